package api

import (
	"crypto/subtle"
	"mime"
	"net/http"
	"strings"
)

// The checks every /v1 request passes before its handler: the bearer token
// (and the admin token of the administrative endpoints), then the body's
// media type.

// authorize checks a request's bearer token. With auth.adminToken set, an
// administrative endpoint takes only it: the normal token (or none, when
// auth.token is empty) is a 403; every other endpoint takes either token.
func (h *Handler) authorize(r *http.Request, admin bool) error {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	isAdmin := ok && len(h.admin) > 0 && subtle.ConstantTimeCompare([]byte(tok), h.admin) == 1
	isUser := len(h.auth) == 0 || ok && subtle.ConstantTimeCompare([]byte(tok), h.auth) == 1
	switch {
	case isAdmin:
		return nil
	case admin && len(h.admin) > 0 && isUser:
		return apiError(http.StatusForbidden, "forbidden", "this endpoint needs the admin token (auth.adminToken); send Authorization: Bearer <admin token>")
	case admin && len(h.admin) > 0, !isUser:
		return apiError(http.StatusUnauthorized, "unauthenticated", "missing or wrong bearer token; send Authorization: Bearer <token>")
	}
	return nil
}

// checkContentType refuses a request body that does not say it is JSON:
// Content-Type application/json or application/<something>+json (such as
// application/merge-patch+json), with any parameters (charset=utf-8). A
// request without a body needs none. Refusing other types keeps a browser
// form (text/plain, application/x-www-form-urlencoded), which a page can
// post cross-site without a preflight, from writing documents.
func checkContentType(r *http.Request) error {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		return nil
	}
	if r.ContentLength == 0 {
		return nil
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err == nil && (mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")) {
		return nil
	}
	return apiError(http.StatusUnsupportedMediaType, "unsupported_media_type", "the request body must be JSON; send Content-Type: application/json")
}
