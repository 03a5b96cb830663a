package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/writeback/writeback/internal/config"
	"github.com/writeback/writeback/pkg/client"
)

// Unknown endpoints, methods and collections, and missing documents, are
// 404s in the error model, never the mux's plain-text 404 or 405.
func TestNotFound(t *testing.T) {
	w := newWorld(t, opts{})
	doc := "/v1/docs/" + w.coll + "/1"
	cases := []struct {
		name, method, path, body, msg string
	}{
		{"unknown endpoint", "GET", "/v1/nope", "", "no such endpoint: GET /v1/nope"},
		{"unknown method", "POST", doc, `{"n":1}`, "no such endpoint: POST " + doc},
		{"get of an unknown collection", "GET", "/v1/docs/nocoll/1", "", `unknown collection "nocoll"`},
		{"put into an unknown collection", "PUT", "/v1/docs/nocoll/1", `{"n":1}`, `unknown collection "nocoll"`},
		{"patch of an unknown collection", "PATCH", "/v1/docs/nocoll/1", `{"$set":{"n":1}}`, `unknown collection "nocoll"`},
		{"delete in an unknown collection", "DELETE", "/v1/docs/nocoll/1", "", `unknown collection "nocoll"`},
		{"scan of an unknown collection", "GET", "/v1/docs/nocoll", "", `unknown collection "nocoll"`},
		{"missing document", "GET", "/v1/docs/" + w.coll + "/404", "", "document not found"},
		{"patch of a missing document", "PATCH", "/v1/docs/" + w.coll + "/404", `{"$set":{"s":"x"}}`, "document not found"},
		{"unknown dead-letter action", "POST", "/v1/deadletters/explode", `{"all":true}`, "use replay or drop"},
		{"unknown session action", "POST", "/v1/sessions/00000000000000000000000000000000/explode", "", "use commit, validate or abort"},
		{"unknown queue dead-letter action", "POST", "/v1/queues/deadletters/explode", `{"all":true}`, "use replay or drop"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w.do(t, tc.method, tc.path, tc.body).isError(t, tc.method+" "+tc.path, http.StatusNotFound, client.CodeNotFound, tc.msg)
		})
	}
	r := w.do(t, "GET", "/healthz", "")
	if r.code != http.StatusOK || string(r.body) != "ok\n" {
		t.Errorf("/healthz: %d %q; want 200 ok", r.code, r.body)
	}
	if got := w.metric(t, `writeback_requests_total{code="404",op="other"}`); got != 2 {
		t.Errorf(`writeback_requests_total{code="404",op="other"} = %v; want 2 (the unknown endpoint and method)`, got)
	}
}

// With a token, every /v1 request needs exactly "Authorization: Bearer
// <token>" — before routing, so that an unauthenticated client learns
// nothing — while the probes and /metrics need none (docs/api.md).
func TestAuth(t *testing.T) {
	w := newWorld(t, opts{token: "s3cret"})
	cases := []struct {
		name, auth string
		want       int
	}{
		{"no header", "", http.StatusUnauthorized},
		{"wrong token of the same length", "Bearer s3cres", http.StatusUnauthorized},
		{"prefix of the token", "Bearer s3cre", http.StatusUnauthorized},
		{"token with a suffix", "Bearer s3cretx", http.StatusUnauthorized},
		{"empty token", "Bearer ", http.StatusUnauthorized},
		{"token without the scheme", "s3cret", http.StatusUnauthorized},
		{"another scheme", "Basic czNjcmV0", http.StatusUnauthorized},
		{"the token", "Bearer s3cret", http.StatusOK},
	}
	refused := 0
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := w.do(t, "GET", "/v1/status", "", "Authorization", tc.auth)
			if tc.want == http.StatusOK {
				r.ok(t, "status with the token", nil)
				return
			}
			refused++
			r.isError(t, "status", tc.want, client.CodeUnauthenticated, "missing or wrong bearer token")
		})
	}
	t.Run("unknown endpoint", func(t *testing.T) {
		w.do(t, "GET", "/v1/nope", "", "Authorization", "").isError(t, "unknown endpoint without the token", http.StatusUnauthorized, client.CodeUnauthenticated, "bearer token")
		w.do(t, "GET", "/v1/nope", "").isError(t, "unknown endpoint with the token", http.StatusNotFound, client.CodeNotFound, "no such endpoint")
	})
	t.Run("a write is refused before it is buffered", func(t *testing.T) {
		w.do(t, "PUT", "/v1/docs/"+w.coll+"/1", `{"n":1}`, "Authorization", "").isError(t, "put without the token", http.StatusUnauthorized, client.CodeUnauthenticated, "bearer token")
		if st := w.status(t); st.Pending != 0 {
			t.Errorf("an unauthenticated PUT left %d changes pending", st.Pending)
		}
	})
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		t.Run(path+" needs no token", func(t *testing.T) {
			w.do(t, "GET", path, "", "Authorization", "").ok(t, path, nil)
		})
	}
	if got := w.metric(t, `writeback_requests_total{code="401",op="status"}`); got != float64(refused) {
		t.Errorf(`writeback_requests_total{code="401",op="status"} = %v; want %d`, got, refused)
	}
}

// A body over limits.maxBodyBytes is a 413 naming the limit, on every
// endpoint that reads one, and leaves nothing behind.
func TestBodyLimit(t *testing.T) {
	const limit = 512
	w := newWorld(t, opts{sessions: true, edit: func(c *config.Config) { c.Limits.MaxBodyBytes = limit }})
	var begun client.SessionStarted
	w.do(t, "POST", "/v1/sessions", "").ok(t, "begin", &begun, http.StatusCreated)
	big := fmt.Sprintf(`{"s":%q}`, strings.Repeat("x", limit))
	cases := []struct{ name, method, path string }{
		{"put", "PUT", "/v1/docs/" + w.coll + "/1"},
		{"patch", "PATCH", "/v1/docs/" + w.coll + "/1"},
		{"flush", "POST", "/v1/flush"},
		{"dead-letter replay", "POST", "/v1/deadletters/replay"},
		{"commit", "POST", "/v1/sessions/" + begun.Session + "/commit"},
		{"queue flush", "POST", "/v1/queues/flush"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w.do(t, tc.method, tc.path, big).isError(t, tc.name, http.StatusRequestEntityTooLarge, client.CodeTooLarge,
				fmt.Sprintf("the request body is larger than the limit of %d bytes", limit))
		})
	}
	fits := fmt.Sprintf(`{"n":0,"s":%q}`, strings.Repeat("x", limit-14))
	w.do(t, "PUT", "/v1/docs/"+w.coll+"/1", fits).ok(t, fmt.Sprintf("a PUT of %d bytes", len(fits)), nil)
	if st := w.status(t); st.Pending != 1 {
		t.Errorf("%d changes pending; want only the one that fits", st.Pending)
	}
}

// A client's mistake is a 400 invalid_argument with the sentence that says
// what is wrong, and buffers nothing.
func TestInvalidArgument(t *testing.T) {
	w := newWorld(t, opts{})
	doc := "/v1/docs/" + w.coll + "/1"
	cases := []struct {
		name, method, path, body, msg string
	}{
		{"malformed JSON", "PUT", doc, `{"n":`, "malformed JSON"},
		{"empty body", "PUT", doc, "", "the request body is empty"},
		{"not an object", "PUT", doc, `[1]`, "must be a JSON object"},
		{"unknown field", "PUT", doc, `{"nope":1}`, `unknown field "nope"`},
		{"wrong type", "PUT", doc, `{"n":"one"}`, `field "n" must be an integer`},
		{"id not an integer", "PUT", "/v1/docs/" + w.coll + "/abc", `{"n":1}`, "is an integer column"},
		{"key differs from the path", "PUT", doc, `{"id":2}`, "the id in the path is 1"},
		{"unknown operator", "PATCH", doc, `{"$mul":{"n":2}}`, `unknown operator "$mul"`},
		{"no operators", "PATCH", doc, `{}`, "the update has no operators"},
		{"$inc of a text column", "PATCH", doc, `{"$inc":{"s":1}}`, "$inc needs a numeric column"},
		{"scan limit 0", "GET", "/v1/docs/" + w.coll + "?limit=0", "", "limit must be an integer from 1 to 1000"},
		{"scan limit 1001", "GET", "/v1/docs/" + w.coll + "?limit=1001", "", "limit must be an integer from 1 to 1000"},
		{"scan limit not a number", "GET", "/v1/docs/" + w.coll + "?limit=ten", "", "limit must be an integer from 1 to 1000"},
		{"scan from not an integer", "GET", "/v1/docs/" + w.coll + "?from=abc", "", "is an integer column"},
		{"dead-letter limit 0", "GET", "/v1/deadletters?limit=0", "", "limit must be an integer from 1 to 10000"},
		{"dead-letter limit 10001", "GET", "/v1/deadletters?limit=10001", "", "limit must be an integer from 1 to 10000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w.do(t, tc.method, tc.path, tc.body).isError(t, tc.name, http.StatusBadRequest, client.CodeInvalidArgument, tc.msg)
		})
	}
	if st := w.status(t); st.Pending != 0 {
		t.Errorf("refused writes left %d changes pending", st.Pending)
	}
}

// A scan's limit is 1..1000 inclusive and bounds the documents returned.
func TestScanLimits(t *testing.T) {
	w := newWorld(t, opts{})
	w.exec(fmt.Sprintf("INSERT INTO %s (id, n) SELECT g, 0 FROM generate_series(1, 1005) g", w.wt))
	cases := []struct {
		query string
		want  int
	}{
		{"", 100},
		{"?limit=1", 1},
		{"?limit=1000", 1000},
		{"?limit=1000&from=1000", 6},
	}
	for _, tc := range cases {
		t.Run("scan"+tc.query, func(t *testing.T) {
			var res client.ScanResult
			w.do(t, "GET", "/v1/docs/"+w.wt+tc.query, "").ok(t, "scan", &res)
			if len(res.Docs) != tc.want {
				t.Fatalf("%d documents; want %d", len(res.Docs), tc.want)
			}
		})
	}
}

// A document's ETag depends on its value only: the same whether it was
// read from the store (a miss), from the cache (a hit) or after its
// changes were applied; If-None-Match with it answers 304 without a body;
// a change gives a new one.
func TestETag(t *testing.T) {
	w := newWorld(t, opts{})
	w.exec(fmt.Sprintf("INSERT INTO %s (id, n, s) VALUES (1, 5, 'five')", w.coll))
	doc := "/v1/docs/" + w.coll + "/1"
	miss := w.do(t, "GET", doc, "")
	miss.ok(t, "get (miss)", nil)
	tag := miss.header.Get("ETag")
	if tag == "" || string(miss.body) != `{"id":1,"n":5,"s":"five"}` {
		t.Fatalf("get: ETag %q, body %s; want an ETag and the row in column order", tag, miss.body)
	}
	hit := w.do(t, "GET", doc, "")
	if hit.header.Get("ETag") != tag || string(hit.body) != string(miss.body) {
		t.Errorf("a cache hit answers %s with ETag %s; the miss answered %s with %s", hit.body, hit.header.Get("ETag"), miss.body, tag)
	}
	nm := w.do(t, "GET", doc, "", "If-None-Match", tag)
	if nm.code != http.StatusNotModified || len(nm.body) != 0 || nm.header.Get("ETag") != tag {
		t.Errorf("If-None-Match with the current ETag: %d %q ETag %q; want 304, no body, the same ETag", nm.code, nm.body, nm.header.Get("ETag"))
	}
	w.do(t, "GET", doc, "", "If-None-Match", `"other"`).ok(t, "If-None-Match with another ETag", nil)

	w.do(t, "PATCH", doc, `{"$inc":{"n":1}}`).ok(t, "patch", nil)
	changed := w.do(t, "GET", doc, "", "If-None-Match", tag)
	changed.ok(t, "If-None-Match after a change", nil)
	tag2 := changed.header.Get("ETag")
	if tag2 == tag || string(changed.body) != `{"id":1,"n":6,"s":"five"}` {
		t.Fatalf("after a change: ETag %s (was %s), body %s", tag2, tag, changed.body)
	}
	w.flush(t)
	if _, err := w.rdb.Del(t.Context(), w.cacheKeys(t)...).Result(); err != nil {
		t.Fatal(err)
	}
	applied := w.do(t, "GET", doc, "", "If-None-Match", tag2)
	if applied.code != http.StatusNotModified {
		t.Errorf("If-None-Match after the change was applied and the entry evicted: %d %s; want 304", applied.code, applied.body)
	}
}

// cacheKeys lists the world's cache entries of its write-back collection.
func (w *world) cacheKeys(t *testing.T) []string {
	t.Helper()
	keys, err := w.rdb.Keys(t.Context(), w.prefix+":{*}:c:"+w.coll+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Fatal("no cache entry to evict")
	}
	return keys
}

// The flush body is optional; when sent it must be exactly
// {"timeout":"<positive duration>"}.
func TestFlushBody(t *testing.T) {
	w := newWorld(t, opts{sessions: true})
	cases := []struct {
		name, body, msg string // msg "": a 200
	}{
		{"no body", "", ""},
		{"empty object", "{}", ""},
		{"a timeout", `{"timeout":"5s"}`, ""},
		{"zero timeout", `{"timeout":"0s"}`, `timeout "0s" is not a positive duration such as 30s`},
		{"negative timeout", `{"timeout":"-1s"}`, `timeout "-1s" is not a positive duration`},
		{"not a duration", `{"timeout":"soon"}`, `timeout "soon" is not a positive duration`},
		{"a number", `{"timeout":30}`, `the flush body must be {"timeout":"30s"}`},
		{"unknown field", `{"timeout":"5s","wait":true}`, `the flush body must be {"timeout":"30s"}`},
		{"not JSON", `timeout=5s`, `the flush body must be {"timeout":"30s"}`},
	}
	for _, path := range []string{"/v1/flush", "/v1/queues/flush"} {
		for _, tc := range cases {
			t.Run(path+" "+tc.name, func(t *testing.T) {
				r := w.do(t, "POST", path, tc.body)
				if tc.msg != "" {
					r.isError(t, tc.name, http.StatusBadRequest, client.CodeInvalidArgument, tc.msg)
					return
				}
				var res struct {
					Drained bool `json:"drained"`
				}
				r.ok(t, tc.name, &res)
				if !res.Drained {
					t.Errorf("a flush of nothing is not drained: %s", r.body)
				}
			})
		}
	}
}

// /v1/status reports the buffer exactly: a write adds a pending change, a
// flush applies it; the collections with their policies; this sidecar's
// partitions.
func TestStatus(t *testing.T) {
	w := newWorld(t, opts{})
	st := w.status(t)
	if st.Pending != 0 || st.PendingDocuments != 0 || st.PinnedBytes != 0 || st.DeadLetters != 0 || st.Sessions != nil {
		t.Fatalf("status of an idle sidecar without queue families: %+v", st)
	}
	if st.Sidecar == "" || st.Partitions != 4 {
		t.Errorf("status names sidecar %q with %d partitions; want an instance ID and 4", st.Sidecar, st.Partitions)
	}
	waitFor(t, 5*time.Second, "the sidecar to own its 4 partitions", func() bool {
		st := w.status(t)
		return len(st.OwnedPartitions) == 4 && st.Sidecars == 1
	})
	want := []client.CollectionStatus{
		{Name: w.coll, Store: "pg", Table: w.coll, Policy: "write-back"},
		{Name: w.wt, Store: "pg", Table: w.wt, Policy: "write-through"},
	}
	if got, _ := json.Marshal(st.Collections); string(got) != string(mustJSON(t, want)) {
		t.Errorf("collections %s; want %s", got, mustJSON(t, want))
	}

	w.do(t, "PUT", "/v1/docs/"+w.coll+"/1", `{"n":1}`).ok(t, "put 1", nil)
	w.do(t, "PUT", "/v1/docs/"+w.coll+"/2", `{"n":2}`).ok(t, "put 2", nil)
	w.do(t, "PATCH", "/v1/docs/"+w.coll+"/1", `{"$inc":{"n":1}}`).ok(t, "patch 1", nil)
	w.do(t, "PUT", "/v1/docs/"+w.wt+"/1", `{"n":1}`).ok(t, "put write-through", nil)
	st = w.status(t)
	if st.Pending != 3 || st.PendingDocuments != 2 || st.PinnedBytes <= 0 || st.OldestPendingAgeSeconds < 0 {
		t.Errorf("after 3 write-back changes of 2 documents and 1 write-through: pending %d, documents %d, pinned %d bytes, oldest %vs",
			st.Pending, st.PendingDocuments, st.PinnedBytes, st.OldestPendingAgeSeconds)
	}

	res := w.flush(t)
	if res.Applied != 3 || res.Pending != 0 || res.DeadLetters != 0 || !res.Drained || res.Sessions != nil {
		t.Errorf("flush: %+v; want 3 applied, nothing pending, drained, no sessions part", res)
	}
	st = w.status(t)
	if st.Pending != 0 || st.PendingDocuments != 0 || st.PinnedBytes != 0 {
		t.Errorf("after the flush: pending %d, documents %d, pinned %d bytes; want 0", st.Pending, st.PendingDocuments, st.PinnedBytes)
	}
	var n int64
	if err := w.pg.QueryRow(fmt.Sprintf("SELECT n FROM %s WHERE id = 1", w.coll)).Scan(&n); err != nil || n != 2 {
		t.Errorf("the store has n = %d (%v) after the flush; want 2", n, err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeback_requests_total and writeback_request_duration_seconds count
// every request by operation and status.
func TestRequestMetrics(t *testing.T) {
	w := newWorld(t, opts{})
	doc := "/v1/docs/" + w.coll + "/1"
	w.do(t, "PUT", doc, `{"n":1}`).ok(t, "put", nil)
	w.do(t, "PUT", doc, `{"n":2}`).ok(t, "put", nil)
	w.do(t, "PUT", doc, `{"x":2}`)
	w.do(t, "GET", doc, "").ok(t, "get", nil)
	w.do(t, "GET", "/v1/docs/"+w.coll+"/9", "")
	w.do(t, "GET", "/v1/docs/"+w.coll, "").ok(t, "scan", nil)
	w.do(t, "DELETE", doc, "").ok(t, "delete", nil)
	w.flush(t)
	w.status(t)
	for series, want := range map[string]float64{
		`writeback_requests_total{code="200",op="put"}`:                 2,
		`writeback_requests_total{code="400",op="put"}`:                 1,
		`writeback_requests_total{code="200",op="get"}`:                 1,
		`writeback_requests_total{code="404",op="get"}`:                 1,
		`writeback_requests_total{code="200",op="scan"}`:                1,
		`writeback_requests_total{code="200",op="delete"}`:              1,
		`writeback_requests_total{code="200",op="flush"}`:               1,
		`writeback_requests_total{code="200",op="status"}`:              1,
		`writeback_request_duration_seconds_count{op="put"}`:            3,
		`writeback_buffered_changes_total{collection="` + w.coll + `"}`: 3,
	} {
		if got := w.metric(t, series); got != want {
			t.Errorf("%s = %v; want %v", series, got, want)
		}
	}
}

// The op label of writeback_requests_total takes the values docs/api.md
// lists, whatever endpoint is called (the dead-letter endpoints count under
// op="deadletters", which the list once missed).
func TestRequestMetricOps(t *testing.T) {
	w := newWorld(t, opts{sessions: true})
	documented := map[string]bool{}
	for _, op := range strings.Fields("get put patch delete scan flush status deadletters session cache queues other") {
		documented[op] = true
	}
	for _, req := range []struct{ method, path, body string }{
		{"PUT", "/v1/docs/" + w.coll + "/1", `{"n":1}`},
		{"PATCH", "/v1/docs/" + w.coll + "/1", `{"$inc":{"n":1}}`},
		{"GET", "/v1/docs/" + w.coll + "/1", ""},
		{"DELETE", "/v1/docs/" + w.coll + "/1", ""},
		{"GET", "/v1/docs/" + w.coll, ""},
		{"POST", "/v1/flush", ""},
		{"GET", "/v1/status", ""},
		{"GET", "/v1/deadletters", ""},
		{"POST", "/v1/deadletters/drop", `{"all":true}`},
		{"POST", "/v1/sessions", ""},
		{"GET", "/v1/cache/" + w.family + ":acct:1", ""},
		{"GET", "/v1/queues", ""},
		{"POST", "/v1/queues/flush", ""},
		{"GET", "/v1/queues/deadletters", ""},
		{"GET", "/v1/nope", ""},
	} {
		w.do(t, req.method, req.path, req.body)
	}
	r := w.do(t, "GET", "/metrics", "")
	seen := 0
	for _, line := range strings.Split(string(r.body), "\n") {
		rest, ok := strings.CutPrefix(line, "writeback_requests_total{")
		if !ok {
			continue
		}
		seen++
		_, op, _ := strings.Cut(rest, `op="`)
		op, _, _ = strings.Cut(op, `"`)
		if !documented[op] {
			t.Errorf("%s: op %q is not one of the documented values", line, op)
		}
	}
	if seen < 10 {
		t.Errorf("only %d writeback_requests_total series after requests to every endpoint", seen)
	}
}
