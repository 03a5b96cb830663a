package api_test

import (
	"net/http"
	"testing"

	"github.com/writeback/writeback/pkg/client"
)

// A POST, PUT or PATCH with a body takes only JSON: application/json or
// application/…+json, with parameters. Anything else — a browser form, or
// no Content-Type — is a 415 that leaves nothing behind. A request without
// a body needs no Content-Type.
func TestContentType(t *testing.T) {
	w := newWorld(t, opts{sessions: true})
	doc := "/v1/docs/" + w.coll + "/1"
	refused := []struct{ name, method, path, body, ctype string }{
		{"put as text/plain", "PUT", doc, `{"n":1}`, "text/plain"},
		{"put as a form", "PUT", doc, `{"n":1}`, "application/x-www-form-urlencoded"},
		{"put without a type", "PUT", doc, `{"n":1}`, ""},
		{"patch as text/plain", "PATCH", doc, `{"$set":{"s":"x"}}`, "text/plain; charset=utf-8"},
		{"flush as a form", "POST", "/v1/flush", `{"timeout":"5s"}`, "multipart/form-data; boundary=x"},
		{"dead letters as text", "POST", "/v1/deadletters/drop", `{"all":true}`, "text/json"},
		{"a malformed type", "PUT", doc, `{"n":1}`, "application/json; charset"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			w.do(t, tc.method, tc.path, tc.body, "Content-Type", tc.ctype).
				isError(t, tc.name, http.StatusUnsupportedMediaType, client.CodeUnsupportedMediaType, "the request body must be JSON; send Content-Type: application/json")
		})
	}
	if st := w.status(t); st.Pending != 0 {
		t.Fatalf("refused requests left %d changes pending", st.Pending)
	}
	accepted := []struct{ name, method, path, body, ctype string }{
		{"application/json", "PUT", doc, `{"n":1}`, "application/json"},
		{"with a charset", "PUT", doc, `{"n":2}`, "application/json; charset=utf-8"},
		{"upper case", "PATCH", doc, `{"$inc":{"n":1}}`, "Application/JSON"},
		{"merge-patch", "PATCH", doc, `{"$set":{"s":"y"}}`, "application/merge-patch+json"},
		{"flush without a body", "POST", "/v1/flush", "", ""},
		{"begin without a body", "POST", "/v1/sessions", "", ""},
	}
	for _, tc := range accepted {
		t.Run(tc.name, func(t *testing.T) {
			r := w.do(t, tc.method, tc.path, tc.body, "Content-Type", tc.ctype)
			if r.code/100 != 2 {
				t.Errorf("%s %s as %q: %d %s; want a 2xx", tc.method, tc.path, tc.ctype, r.code, r.body)
			}
		})
	}
}
