package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorded is what the fake server saw of one request.
type recorded struct {
	Method, EscapedPath, RawQuery, Body string
	Header                              http.Header
}

// fake is an httptest server that records each request and answers with
// the given status, headers and body. It checks the client's encoding only.
func fake(t *testing.T, status int, header map[string]string, body string) (*httptest.Server, *[]recorded) {
	t.Helper()
	var (
		mu   sync.Mutex // guards seen
		seen []recorded
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, recorded{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, string(b), r.Header.Clone()})
		mu.Unlock()
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, &seen
}

func TestRequests(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name       string
		status     int
		header     map[string]string
		body       string
		call       func(c *Client) (any, error)
		want       any
		wantMethod string
		wantPath   string
		wantQuery  string
		wantBody   string
	}{
		{
			name: "get", status: 200, header: map[string]string{"ETag": `"h1"`}, body: `{"ycsb_key":"k1","f":1}`,
			call: func(c *Client) (any, error) {
				doc, etag, err := c.Get(ctx, "usertable", "k1")
				return []any{string(doc), etag}, err
			},
			want:       []any{`{"ycsb_key":"k1","f":1}`, `"h1"`},
			wantMethod: "GET", wantPath: "/v1/docs/usertable/k1",
		},
		{
			name: "get escapes collection and id", status: 200, body: `{}`,
			call: func(c *Client) (any, error) {
				_, _, err := c.Get(ctx, "user table", "a/b?c%d#e")
				return nil, err
			},
			wantMethod: "GET", wantPath: "/v1/docs/user%20table/a%2Fb%3Fc%25d%23e",
		},
		{
			name: "get if none match, changed", status: 200, header: map[string]string{"ETag": `"h2"`}, body: `{"v":2}`,
			call: func(c *Client) (any, error) {
				doc, etag, nm, err := c.GetIfNoneMatch(ctx, "usertable", "k1", `"h1"`)
				return []any{string(doc), etag, nm}, err
			},
			want:       []any{`{"v":2}`, `"h2"`, false},
			wantMethod: "GET", wantPath: "/v1/docs/usertable/k1",
		},
		{
			name: "get if none match, not modified", status: 304,
			call: func(c *Client) (any, error) {
				doc, etag, nm, err := c.GetIfNoneMatch(ctx, "usertable", "k1", `"h1"`)
				return []any{doc == nil, etag, nm}, err
			},
			want:       []any{true, `"h1"`, true},
			wantMethod: "GET", wantPath: "/v1/docs/usertable/k1",
		},
		{
			name: "put", status: 200, body: `{"seq":7}`,
			call: func(c *Client) (any, error) {
				return c.Put(ctx, "usertable", "k1", map[string]any{"ycsb_key": "k1", "f": 1})
			},
			want:       int64(7),
			wantMethod: "PUT", wantPath: "/v1/docs/usertable/k1", wantBody: `{"f":1,"ycsb_key":"k1"}`,
		},
		{
			name: "put raw JSON as is", status: 200, body: `{"seq":8}`,
			call: func(c *Client) (any, error) {
				return c.Put(ctx, "usertable", "k1", json.RawMessage(`{"z":1,"a":2}`))
			},
			want:       int64(8),
			wantMethod: "PUT", wantPath: "/v1/docs/usertable/k1", wantBody: `{"z":1,"a":2}`,
		},
		{
			name: "put bytes as is", status: 200, body: `{"seq":9}`,
			call: func(c *Client) (any, error) {
				return c.Put(ctx, "usertable", "k1", []byte(`{"b":1}`))
			},
			want:       int64(9),
			wantMethod: "PUT", wantPath: "/v1/docs/usertable/k1", wantBody: `{"b":1}`,
		},
		{
			name: "patch", status: 200, body: `{"seq":10}`,
			call: func(c *Client) (any, error) {
				return c.Patch(ctx, "usertable", "k1", map[string]any{"$inc": map[string]int{"f": 1}})
			},
			want:       int64(10),
			wantMethod: "PATCH", wantPath: "/v1/docs/usertable/k1", wantBody: `{"$inc":{"f":1}}`,
		},
		{
			name: "delete", status: 200, body: `{"seq":11}`,
			call: func(c *Client) (any, error) {
				return c.Delete(ctx, "usertable", "k1")
			},
			want:       int64(11),
			wantMethod: "DELETE", wantPath: "/v1/docs/usertable/k1",
		},
		{
			name: "scan", status: 200, body: `{"docs":[{"k":"a"},{"k":"b"}]}`,
			call: func(c *Client) (any, error) {
				docs, err := c.Scan(ctx, "usertable", "a b", 2)
				return docs, err
			},
			want:       []json.RawMessage{json.RawMessage(`{"k":"a"}`), json.RawMessage(`{"k":"b"}`)},
			wantMethod: "GET", wantPath: "/v1/docs/usertable", wantQuery: "from=a+b&limit=2",
		},
		{
			name: "scan from the start with the server's page size", status: 200, body: `{"docs":[]}`,
			call: func(c *Client) (any, error) {
				docs, err := c.Scan(ctx, "usertable", "", 0)
				return docs, err
			},
			want:       []json.RawMessage{},
			wantMethod: "GET", wantPath: "/v1/docs/usertable",
		},
		{
			name: "flush", status: 200, body: `{"applied":5,"pending":0,"deadLetters":1,"drained":true}`,
			call: func(c *Client) (any, error) {
				return c.Flush(ctx, 30*time.Second)
			},
			want:       FlushResult{Applied: 5, Pending: 0, DeadLetters: 1, Drained: true},
			wantMethod: "POST", wantPath: "/v1/flush", wantBody: `{"timeout":"30s"}`,
		},
		{
			name: "flush without timeout", status: 200, body: `{"drained":false,"pending":3}`,
			call: func(c *Client) (any, error) {
				return c.Flush(ctx, 0)
			},
			want:       FlushResult{Pending: 3},
			wantMethod: "POST", wantPath: "/v1/flush", wantBody: `{}`,
		},
		{
			name: "status", status: 200,
			body: `{"sidecar":"s1","version":"v1","pending":3,"pendingDocuments":2,"pinnedBytes":100,
				"oldestPendingAgeSeconds":1.5,"deadLetters":1,"deadLetterList":[{"collection":"usertable","id":"k1","seq":4,
				"error":"bad","at":"2024-01-02T03:04:05Z","change":{"$inc":{"f":1}}}],"partitions":64,"ownedPartitions":[0,1],
				"sidecars":2,"collections":[{"name":"usertable","store":"pg","table":"usertable","policy":"write-back",
				"writeThroughFallback":true}],"warnings":["w"]}`,
			call: func(c *Client) (any, error) {
				return c.Status(ctx)
			},
			want: Status{
				Sidecar: "s1", Version: "v1", Pending: 3, PendingDocuments: 2, PinnedBytes: 100,
				OldestPendingAgeSeconds: 1.5, DeadLetters: 1,
				DeadLetterList: []DeadLetter{{Collection: "usertable", ID: "k1", Seq: 4, Error: "bad",
					At: time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC), Change: json.RawMessage(`{"$inc":{"f":1}}`)}},
				Partitions: 64, OwnedPartitions: []int{0, 1}, Sidecars: 2,
				Collections: []CollectionStatus{{Name: "usertable", Store: "pg", Table: "usertable",
					Policy: "write-back", WriteThroughFallback: true}},
				Warnings: []string{"w"},
			},
			wantMethod: "GET", wantPath: "/v1/status",
		},
		{
			name: "healthz", status: 200, body: "ok",
			call:       func(c *Client) (any, error) { return nil, c.Healthz(ctx) },
			wantMethod: "GET", wantPath: "/healthz",
		},
		{
			name: "readyz", status: 200, body: "ok",
			call:       func(c *Client) (any, error) { return nil, c.Readyz(ctx) },
			wantMethod: "GET", wantPath: "/readyz",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, seen := fake(t, tc.status, tc.header, tc.body)
			got, err := tc.call(New(srv.URL + "/"))
			require.NoError(t, err)
			if tc.want != nil {
				assert.Equal(t, tc.want, got)
			}
			require.Len(t, *seen, 1)
			r := (*seen)[0]
			assert.Equal(t, tc.wantMethod, r.Method)
			assert.Equal(t, tc.wantPath, r.EscapedPath)
			assert.Equal(t, tc.wantQuery, r.RawQuery)
			assert.Equal(t, tc.wantBody, r.Body)
			if tc.wantBody != "" {
				assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
			}
			assert.Empty(t, r.Header.Get("Authorization"))
		})
	}
}

func TestIfNoneMatchHeader(t *testing.T) {
	srv, seen := fake(t, 304, nil, "")
	c := New(srv.URL)
	_, _, _, err := c.GetIfNoneMatch(context.Background(), "c", "i", `"abc"`)
	require.NoError(t, err)
	_, _, err = c.Get(context.Background(), "c", "i")
	require.Error(t, err, "a 304 to an unconditional read is not a success")
	assert.Equal(t, `"abc"`, (*seen)[0].Header.Get("If-None-Match"))
	assert.Empty(t, (*seen)[1].Header.Get("If-None-Match"))
}

func TestToken(t *testing.T) {
	srv, seen := fake(t, 200, nil, `{"seq":1}`)
	_, err := New(srv.URL, WithToken("s3cret")).Delete(context.Background(), "c", "i")
	require.NoError(t, err)
	assert.Equal(t, "Bearer s3cret", (*seen)[0].Header.Get("Authorization"))
}

func TestWithHTTPClient(t *testing.T) {
	srv, _ := fake(t, 200, nil, "ok")
	var used bool
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		used = true
		return http.DefaultTransport.RoundTrip(r)
	})}
	require.NoError(t, New(srv.URL, WithHTTPClient(hc)).Healthz(context.Background()))
	assert.True(t, used)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestErrors(t *testing.T) {
	tests := []struct {
		name     string
		status   int
		header   map[string]string
		body     string
		want     *Error
		notFound bool
		invalid  bool
		aborted  bool
		unavail  bool
		retry    bool
	}{
		{
			name: "not found", status: 404, body: `{"error":{"code":"not_found","message":"document usertable/k1 does not exist"}}`,
			want:     &Error{StatusCode: 404, Code: "not_found", Message: "document usertable/k1 does not exist"},
			notFound: true,
		},
		{
			name: "invalid", status: 400, body: `{"error":{"code":"invalid_argument","message":"$inc on a string"}}`,
			want:    &Error{StatusCode: 400, Code: "invalid_argument", Message: "$inc on a string"},
			invalid: true,
		},
		{
			name: "aborted with retry-after", status: 409, header: map[string]string{"Retry-After": "1"},
			body:    `{"error":{"code":"aborted","message":"lease conflict"}}`,
			want:    &Error{StatusCode: 409, Code: "aborted", Message: "lease conflict", RetryAfter: time.Second},
			aborted: true,
		},
		{
			name: "unavailable, retry safe", status: 503, header: map[string]string{"Retry-After": "1"},
			body:    `{"error":{"code":"unavailable","message":"the store is unavailable; retry with backoff","retry":true}}`,
			want:    &Error{StatusCode: 503, Code: "unavailable", Message: "the store is unavailable; retry with backoff", RetryAfter: time.Second, Retry: true},
			unavail: true, retry: true,
		},
		{
			name: "buffered, do not retry", status: 500,
			body: `{"error":{"code":"buffered","message":"the change is buffered as seq 4","retry":false}}`,
			want: &Error{StatusCode: 500, Code: "buffered", Message: "the change is buffered as seq 4"},
		},
		{
			name: "no body", status: 404,
			want:     &Error{StatusCode: 404, Code: "not_found", Message: "Not Found"},
			notFound: true,
		},
		{
			name: "plain-text body from a probe", status: 503, body: "redis: connection refused\n",
			want:    &Error{StatusCode: 503, Code: "unavailable", Message: "redis: connection refused"},
			unavail: true,
		},
		{
			name: "JSON without the error shape", status: 500, body: `{"oops":true}`,
			want: &Error{StatusCode: 500, Code: "internal", Message: "Internal Server Error"},
		},
		{
			name: "unknown status", status: 418, body: "",
			want: &Error{StatusCode: 418, Code: "i'm_a_teapot", Message: "I'm a teapot"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := fake(t, tc.status, tc.header, tc.body)
			_, err := New(srv.URL).Put(context.Background(), "usertable", "k1", map[string]int{"a": 1})
			var e *Error
			require.True(t, errors.As(err, &e), "error %v is not an *Error", err)
			assert.Equal(t, tc.want, e)
			assert.Equal(t, tc.notFound, IsNotFound(err))
			assert.Equal(t, tc.invalid, IsInvalid(err))
			assert.Equal(t, tc.aborted, IsAborted(err))
			assert.Equal(t, tc.unavail, IsUnavailable(err))
			assert.Equal(t, tc.retry, IsRetrySafe(err))
		})
	}
}

func TestErrorString(t *testing.T) {
	e := &Error{StatusCode: 404, Code: "not_found", Message: "no such document"}
	assert.Equal(t, "client: 404 not_found: no such document", e.Error())
	assert.False(t, IsNotFound(errors.New("other")))
	assert.False(t, IsNotFound(nil))
}

func TestBadInput(t *testing.T) {
	c := New("http://127.0.0.1:1")
	ctx := context.Background()
	_, _, err := c.Get(ctx, "", "k")
	assert.EqualError(t, err, "client: empty collection name")
	_, err = c.Put(ctx, "c", "", map[string]int{})
	assert.EqualError(t, err, "client: empty document id")
	_, err = c.Put(ctx, "c", "k", func() {})
	assert.ErrorContains(t, err, "client: encoding the request")
}

func TestBadAnswer(t *testing.T) {
	srv, _ := fake(t, 200, nil, `not json`)
	_, err := New(srv.URL).Status(context.Background())
	assert.ErrorContains(t, err, "client: GET /v1/status: decoding the answer")
}

func TestBaseURLWithoutScheme(t *testing.T) {
	srv, _ := fake(t, 200, nil, "ok")
	require.NoError(t, New(strings.TrimPrefix(srv.URL, "http://")).Healthz(context.Background()))
}

// stalling is a server that answers /healthz and holds every other request
// until the client goes away or the test ends.
func stalling(t *testing.T) *httptest.Server {
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			_, _ = io.WriteString(w, "ok\n")
			return
		}
		select {
		case <-done:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(done) }) // runs first: the handlers return before Close waits for them
	return srv
}

func TestContextCancel(t *testing.T) {
	srv := stalling(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := New(srv.URL).Flush(ctx, time.Minute)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestKeepAlive checks that concurrent clients reuse connections: many
// sequential rounds of parallel requests open at most as many connections
// as requests run at once.
func TestKeepAlive(t *testing.T) {
	var (
		mu    sync.Mutex // guards conns
		conns = map[string]bool{}
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		conns[r.RemoteAddr] = true
		mu.Unlock()
		_, _ = io.WriteString(w, `{"seq":1}`)
	}))
	srv.Start()
	defer srv.Close()

	c := New(srv.URL)
	const parallel, rounds = 32, 10
	for round := 0; round < rounds; round++ {
		var wg sync.WaitGroup
		for i := 0; i < parallel; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := c.Delete(context.Background(), "c", "k")
				assert.NoError(t, err)
			}()
		}
		wg.Wait()
	}
	mu.Lock()
	defer mu.Unlock()
	// Without reuse the rounds would open parallel × rounds connections.
	// With it, about parallel: a connection goes back to the idle pool
	// just after its response is read, so a request of the next round can
	// race it and dial one more now and then (33 of 32 once under load).
	assert.LessOrEqual(t, len(conns), 2*parallel, "connections are not reused")
}
