// Package client is a Go client for the writeback sidecar's HTTP API
// (documents, sessions, flush, status and probes). It speaks JSON over
// HTTP/1.1 — its own pool of kept-alive connections (transport.go), or an
// *http.Client given with WithHTTPClient — and shares its body types
// (types.go) with the server. It holds no state beyond
// the connection pool and, when asked, copies of immutable entries
// (WithImmutableCache), so one Client serves any number of goroutines.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/writeback/writeback/internal/kept"
)

// Client talks to one sidecar.
type Client struct {
	base  string // scheme://host[:port][/prefix], no trailing slash
	token string
	http  *http.Client // WithHTTPClient's; nil: the default
	rt    transport
	kept  *kept.Copies // immutable entries kept (WithImmutableCache); nil: none
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends "Authorization: Bearer <token>" with every request.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient sends the requests with hc (its transport, timeouts,
// TLS, proxies) instead of the package's own connections.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// sharedTransport is used by every Client of an https:// sidecar without
// WithHTTPClient (an http:// one uses the package's pool). It keeps
// connections alive and allows many idle ones per host: a benchmark runs
// hundreds of goroutines against one sidecar, and with net/http's default of
// 2 idle connections per host most requests would open a new connection.
var sharedTransport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 512
	t.IdleConnTimeout = 90 * time.Second
	// The sidecar answers uncompressed: asking for gzip would only cost
	// a header on every request.
	t.DisableCompression = true
	t.DialContext = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return t
}()

var sharedClient = &http.Client{Transport: sharedTransport}

// New returns a client of the sidecar at baseURL ("http://127.0.0.1:8480";
// "127.0.0.1:8480" means http). Deadlines come from each call's context.
func New(baseURL string, opts ...Option) *Client {
	base := strings.TrimRight(baseURL, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	c := &Client{base: base}
	for _, o := range opts {
		o(c)
	}
	switch u, err := url.Parse(base); {
	case c.http != nil:
		c.rt = netTransport{c.http}
	case err == nil && u.Scheme == "http" && u.Host != "" && u.User == nil:
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "80")
		}
		c.rt = poolFor(host)
	default:
		// https, or a base URL the requests will report as bad.
		c.rt = netTransport{sharedClient}
	}
	return c
}

// Error is a response other than 2xx (or 304 where one is expected).
type Error struct {
	StatusCode int
	Code       string // from the error body, e.g. "not_found"; derived from the status when the body has none
	Message    string // from the error body; the status text when the body has none
	// RetryAfter is the server's Retry-After (409 aborted, 503), 0 if none.
	RetryAfter time.Duration
	// Retry is the body's "retry": sending the request again is safe.
	Retry bool
	// Cause is the underlying error when the answer comes from the
	// embedded mode (pkg/writeback), which classifies its errors as the
	// HTTP API does; nil from the HTTP API.
	Cause error
}

func (e *Error) Error() string {
	return fmt.Sprintf("client: %d %s: %s", e.StatusCode, e.Code, e.Message)
}

// Unwrap returns Cause.
func (e *Error) Unwrap() error { return e.Cause }

// IsNotFound reports whether err is a 404 not_found answer.
func IsNotFound(err error) bool { return hasCode(err, CodeNotFound, http.StatusNotFound) }

// IsInvalid reports whether err is a 400 invalid_argument answer.
func IsInvalid(err error) bool { return hasCode(err, CodeInvalidArgument, http.StatusBadRequest) }

// IsAborted reports whether err is a 409 aborted answer (a lease conflict:
// retry with backoff, after Error.RetryAfter if set).
func IsAborted(err error) bool { return hasCode(err, CodeAborted, http.StatusConflict) }

// IsUnavailable reports whether err is a 503 unavailable answer.
func IsUnavailable(err error) bool {
	return hasCode(err, CodeUnavailable, http.StatusServiceUnavailable)
}

// IsRetrySafe reports whether sending the failed request again is safe:
// the answer said nothing was buffered or applied ("retry": true; 409
// aborted, 503 unavailable). A 500 buffered or uncertain is not: the
// change will be, or may have been, applied.
func IsRetrySafe(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Retry
}

func hasCode(err error, code string, status int) bool {
	var e *Error
	return errors.As(err, &e) && (e.Code == code || e.StatusCode == status)
}

// docPath is /v1/docs/{collection}[/{id}], each segment escaped so that an
// id with '/', '?' or '%' stays one segment.
func docPath(coll, id string) (string, error) {
	if coll == "" {
		return "", errors.New("client: empty collection name")
	}
	p := "/v1/docs/" + url.PathEscape(coll)
	if id != "" {
		p += "/" + url.PathEscape(id)
	}
	return p, nil
}

// Get reads a document. It returns the document and its ETag; a missing
// document is an error for which IsNotFound is true.
func (c *Client) Get(ctx context.Context, coll, id string) (json.RawMessage, string, error) {
	doc, etag, _, err := c.GetIfNoneMatch(ctx, coll, id, "")
	return doc, etag, err
}

// GetIfNoneMatch reads a document unless its ETag is still etag: then it
// returns notModified, no document and the same etag. An empty etag reads
// unconditionally.
func (c *Client) GetIfNoneMatch(ctx context.Context, coll, id, etag string) (doc json.RawMessage, newEtag string, notModified bool, err error) {
	if id == "" {
		return nil, "", false, errors.New("client: empty document id")
	}
	p, err := docPath(coll, id)
	if err != nil {
		return nil, "", false, err
	}
	var also []int
	if etag != "" {
		also = append(also, http.StatusNotModified)
	}
	a, err := c.do(ctx, &request{method: http.MethodGet, url: c.base + p, ifNoneMatch: etag}, also...)
	if err != nil {
		return nil, "", false, err
	}
	if a.status == http.StatusNotModified {
		if a.etag != "" {
			etag = a.etag
		}
		return nil, etag, true, nil
	}
	return json.RawMessage(a.body), a.etag, false, nil
}

// Put inserts or replaces a whole document and returns the change's
// sequence number once the sidecar has made it durable. doc is encoded as
// JSON; a json.RawMessage or []byte is sent as it is.
func (c *Client) Put(ctx context.Context, coll, id string, doc any) (int64, error) {
	return c.write(ctx, http.MethodPut, coll, id, doc)
}

// Patch applies update operators ({"$set": {...}, "$inc": {...}}) to a
// document and returns the change's sequence number.
func (c *Client) Patch(ctx context.Context, coll, id string, ops any) (int64, error) {
	return c.write(ctx, http.MethodPatch, coll, id, ops)
}

// Delete deletes a document and returns the change's sequence number.
func (c *Client) Delete(ctx context.Context, coll, id string) (int64, error) {
	return c.write(ctx, http.MethodDelete, coll, id, nil)
}

func (c *Client) write(ctx context.Context, method, coll, id string, v any) (int64, error) {
	if id == "" {
		return 0, errors.New("client: empty document id")
	}
	p, err := docPath(coll, id)
	if err != nil {
		return 0, err
	}
	var res WriteResult
	if err := c.doJSON(ctx, method, p, v, &res); err != nil {
		return 0, err
	}
	return res.Seq, nil
}

// GetMany reads several documents of a collection in one request (one Redis
// round trip for their cache entries): docs[i] is ids[i]'s document, nil
// when it does not exist.
func (c *Client) GetMany(ctx context.Context, coll string, ids []string) ([]json.RawMessage, error) {
	p, err := docPath(coll, "")
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	for _, id := range ids {
		q.Add("id", id)
	}
	var res ManyResult
	if err := c.doJSON(ctx, http.MethodGet, p+"?"+q.Encode(), nil, &res); err != nil {
		return nil, err
	}
	for i, d := range res.Docs {
		if string(d) == "null" {
			res.Docs[i] = nil
		}
	}
	return res.Docs, nil
}

// Scan returns up to limit documents of a collection in key order, starting
// at the key from (inclusive; "" from the first), reflecting buffered
// writes. limit <= 0 leaves the page size to the server.
func (c *Client) Scan(ctx context.Context, coll, from string, limit int) ([]json.RawMessage, error) {
	p, err := docPath(coll, "")
	if err != nil {
		return nil, err
	}
	q := url.Values{}
	if from != "" {
		q.Set("from", from)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	var res ScanResult
	if err := c.doJSON(ctx, http.MethodGet, p, nil, &res); err != nil {
		return nil, err
	}
	return res.Docs, nil
}

// Flush asks the sidecar to apply everything pending now, waiting at most
// timeout (0 leaves it to the server). ctx must allow a little more than
// timeout for the answer to arrive.
func (c *Client) Flush(ctx context.Context, timeout time.Duration) (FlushResult, error) {
	var req FlushRequest
	if timeout > 0 {
		req.Timeout = timeout.String()
	}
	var res FlushResult
	err := c.doJSON(ctx, http.MethodPost, "/v1/flush", req, &res)
	return res, err
}

// Status returns the sidecar's view of the buffer and of itself.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var res Status
	err := c.doJSON(ctx, http.MethodGet, "/v1/status", nil, &res)
	return res, err
}

// DeadLetters lists up to limit dead letters.
func (c *Client) DeadLetters(ctx context.Context, limit int) ([]DeadLetter, error) {
	var res struct {
		DeadLetters []DeadLetter `json:"deadLetters"`
	}
	err := c.doJSON(ctx, http.MethodGet, "/v1/deadletters?limit="+strconv.Itoa(limit), nil, &res)
	return res.DeadLetters, err
}

// DeadLetterAction selects dead letters: one (Collection, ID, Seq), or All.
type DeadLetterAction struct {
	Collection string `json:"collection,omitempty"`
	ID         string `json:"id,omitempty"`
	Seq        int64  `json:"seq,omitempty"`
	All        bool   `json:"all,omitempty"`
}

// ReplayDeadLetters buffers the selected dead letters' changes again (after
// the cause was fixed) and removes them; it returns how many it replayed.
func (c *Client) ReplayDeadLetters(ctx context.Context, sel DeadLetterAction) (int, error) {
	var res struct {
		Done int `json:"done"`
	}
	err := c.doJSON(ctx, http.MethodPost, "/v1/deadletters/replay", sel, &res)
	return res.Done, err
}

// DropDeadLetters removes the selected dead letters for good; it returns
// how many it removed.
func (c *Client) DropDeadLetters(ctx context.Context, sel DeadLetterAction) (int, error) {
	var res struct {
		Done int `json:"done"`
	}
	err := c.doJSON(ctx, http.MethodPost, "/v1/deadletters/drop", sel, &res)
	return res.Done, err
}

// Healthz returns nil when the sidecar process is alive.
func (c *Client) Healthz(ctx context.Context) error {
	_, err := c.do(ctx, &request{method: http.MethodGet, url: c.base + "/healthz"})
	return err
}

// Readyz returns nil when the sidecar can reach Redis and its stores.
func (c *Client) Readyz(ctx context.Context) error {
	_, err := c.do(ctx, &request{method: http.MethodGet, url: c.base + "/readyz"})
	return err
}

// doJSON sends in (if not nil) as JSON and decodes a 2xx answer into out.
func (c *Client) doJSON(ctx context.Context, method, path string, in, out any) error {
	r := &request{method: method, url: c.base + path}
	if in != nil {
		b, err := encode(in)
		if err != nil {
			return err
		}
		r.body = b
	}
	a, err := c.do(ctx, r)
	if err != nil {
		return err
	}
	if err := decodeAnswer(a.body, out); err != nil {
		return fmt.Errorf("client: %s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}

func encode(v any) ([]byte, error) {
	switch b := v.(type) {
	case json.RawMessage:
		return b, nil
	case []byte:
		return b, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("client: encoding the request: %w", err)
	}
	return b, nil
}

// do sends r with the client's token and reads the whole answer.
// Statuses 2xx and those in also succeed; any other becomes an *Error.
func (c *Client) do(ctx context.Context, r *request, also ...int) (answer, error) {
	r.token = c.token
	a, err := c.rt.roundTrip(ctx, r)
	if err != nil {
		return answer{}, err
	}
	if a.status/100 == 2 {
		return a, nil
	}
	for _, s := range also {
		if a.status == s {
			return a, nil
		}
	}
	return answer{}, newError(a)
}

// newError builds an *Error from an error answer: the JSON error body when
// there is one, else the status (and a short plain-text body, which is what
// the probes send).
func newError(a answer) *Error {
	e := &Error{StatusCode: a.status}
	var eb ErrorBody
	if json.Unmarshal(a.body, &eb) == nil {
		e.Code, e.Message, e.Retry = eb.Error.Code, eb.Error.Message, eb.Error.Retry
	}
	if e.Code == "" {
		e.Code = codeOf(a.status)
	}
	if e.Message == "" {
		if t := strings.TrimSpace(string(a.body)); t != "" && len(t) <= 512 && !strings.HasPrefix(t, "{") {
			e.Message = t
		} else {
			e.Message = http.StatusText(a.status)
		}
	}
	if s, err := strconv.Atoi(a.retryAfter); err == nil && s >= 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

// codeOf is the error code the API uses for status.
func codeOf(status int) string {
	switch status {
	case http.StatusBadRequest:
		return CodeInvalidArgument
	case http.StatusUnauthorized:
		return CodeUnauthenticated
	case http.StatusForbidden:
		return CodeForbidden
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusConflict:
		return CodeAborted
	case http.StatusRequestEntityTooLarge:
		return CodeTooLarge
	case http.StatusUnsupportedMediaType:
		return CodeUnsupportedMediaType
	case http.StatusServiceUnavailable:
		return CodeUnavailable
	}
	if status >= 500 {
		return CodeInternal
	}
	return strings.ToLower(strings.ReplaceAll(http.StatusText(status), " ", "_"))
}
