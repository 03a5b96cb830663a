package api_test

import (
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/writeback/writeback/pkg/client"
)

// begin starts a session and checks the answer's form.
func (w *world) begin(t *testing.T) string {
	t.Helper()
	var s client.SessionStarted
	r := w.do(t, "POST", "/v1/sessions", "")
	r.ok(t, "begin", &s, http.StatusCreated)
	if _, err := hex.DecodeString(s.Session); err != nil || len(s.Session) != 32 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("begin answered %s (%s); want {\"session\":<32 hex digits>} as JSON", r.body, r.header.Get("Content-Type"))
	}
	return s.Session
}

// commitBody is a transfer of amt into account id, in its queue.
func (w *world) commitBody(id, amt int) string {
	return fmt.Sprintf(`{"queue":"%s/%d","statements":[{"sql":"UPDATE %s_acct SET balance = balance + $1 WHERE id = $2","args":[%d,%d]}],"affects":["%s:acct:%d"]}`,
		w.family, id, w.coll, amt, id, w.family, id)
}

// The session endpoints: begin, commit (whose body is decoded strictly;
// a refused commit leaves the session open), validate and abort, and the
// 404 of a session that is over.
func TestSessionLifecycle(t *testing.T) {
	w := newWorld(t, opts{sessions: true})
	s := w.begin(t)
	path := func(id, action string) string { return "/v1/sessions/" + id + "/" + action }
	bad := []struct{ name, body, msg string }{
		{"not JSON", "commit", "the commit body is not valid: "},
		{"unknown field", `{"queue":"x/1","sql":"DELETE"}`, `unknown field "sql"`},
		{"two JSON values", `{} {}`, "the commit body holds more than one JSON value"},
		{"wrong type", `{"statements":{}}`, "the commit body is not valid: "},
		{"no queue", fmt.Sprintf(`{"statements":[{"sql":"DELETE FROM %s_acct WHERE id = $1","args":[1]}]}`, w.coll), "must name its queue"},
	}
	for _, tc := range bad {
		t.Run("commit "+tc.name, func(t *testing.T) {
			w.do(t, "POST", path(s, "commit"), tc.body).isError(t, tc.name, http.StatusBadRequest, client.CodeInvalidArgument, tc.msg)
		})
	}
	var res client.CommitResult
	w.do(t, "POST", path(s, "commit"), w.commitBody(1, 5)).ok(t, "a good commit after refused ones", &res)
	if res.Session != s || res.Queue != w.family+"/1" || res.Seq < 1 {
		t.Errorf("commit answered %+v", res)
	}
	gone := []struct{ name, path, body string }{
		{"commit of a committed session", path(s, "commit"), w.commitBody(1, 5)},
		{"abort of a committed session", path(s, "abort"), ""},
		{"validate of an unknown session", path("0123456789abcdef0123456789abcdef", "validate"), ""},
		{"commit of a malformed id", path("nope", "commit"), "{}"},
	}
	for _, tc := range gone {
		t.Run(tc.name, func(t *testing.T) {
			w.do(t, "POST", tc.path, tc.body).isError(t, tc.name, http.StatusNotFound, client.CodeNotFound, "unknown session")
		})
	}

	r := w.begin(t)
	w.do(t, "GET", "/v1/cache/"+w.family+":acct:2?session="+r, "").ok(t, "read in a session", nil)
	var v client.SessionStarted
	w.do(t, "POST", path(r, "validate"), "").ok(t, "validate", &v)
	w.do(t, "POST", path(r, "abort"), "").ok(t, "abort", &v)
	if v.Session != r {
		t.Errorf("abort answered session %q; want %q", v.Session, r)
	}
	w.do(t, "POST", path(r, "abort"), "").isError(t, "abort twice", http.StatusNotFound, client.CodeNotFound, "unknown session")

	var qs client.QueueStatus
	w.do(t, "GET", "/v1/queues", "").ok(t, "queues", &qs)
	if qs.PendingSessions != 1 || qs.Queues != 1 || qs.Partitions != 4 || len(qs.Families) != 1 ||
		qs.Families[0].Name != w.family || qs.Families[0].Store != "pg" || qs.DeadLetters == nil {
		t.Errorf("queues: %+v; want the committed session pending in one queue, 4 partitions, the family, [] dead letters", qs)
	}
	if st := w.status(t); st.Sessions == nil || st.Sessions.Pending != 1 {
		t.Errorf("status' sessions: %+v; want 1 pending", st.Sessions)
	}
	fr := w.flush(t)
	if fr.Sessions == nil || fr.Sessions.Applied != 1 || fr.Sessions.Pending != 0 || !fr.Drained {
		t.Errorf("flush: %+v (sessions %+v); want the session applied", fr, fr.Sessions)
	}
	var bal int64
	if err := w.pg.QueryRow(fmt.Sprintf("SELECT balance FROM %s_acct WHERE id = 1", w.coll)).Scan(&bal); err != nil || bal != 105 {
		t.Errorf("balance %d (%v) after the flush; want 105", bal, err)
	}
}

// Mapped cache reads: the lease parameter, unmapped and missing keys, a
// read that waits for another session's X lease, and an X lease refused
// by a golden S: 409 with Retry-After, after which the refused session is
// over.
func TestCacheReads(t *testing.T) {
	w := newWorld(t, opts{sessions: true})
	key := "/v1/cache/" + w.family + ":acct:1"
	r := w.do(t, "GET", key, "")
	r.ok(t, "read without a session", nil)
	if string(r.body) != `{"id":1,"balance":100}` || r.header.Get("Content-Type") != "application/json" {
		t.Errorf("read: %s (%s); want the mapped row as JSON", r.body, r.header.Get("Content-Type"))
	}
	cases := []struct {
		name, path string
		status     int
		code, msg  string
	}{
		{"unknown lease", key + "?lease=q", http.StatusBadRequest, client.CodeInvalidArgument, `lease "q" is not s or x`},
		{"x lease without a session", key + "?lease=x", http.StatusBadRequest, client.CodeInvalidArgument, "lease=x needs a session"},
		{"unmapped key", "/v1/cache/nothing:1", http.StatusNotFound, client.CodeNotFound, "no mapping matches the key"},
		{"key with no row", "/v1/cache/" + w.family + ":acct:9", http.StatusNotFound, client.CodeNotFound, "the key has no value"},
		{"unknown session", key + "?session=0123456789abcdef0123456789abcdef", http.StatusNotFound, client.CodeNotFound, "unknown session"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w.do(t, "GET", tc.path, "").isError(t, tc.name, tc.status, tc.code, tc.msg)
		})
	}

	// A read under another session's X lease waits for it (the older
	// session's commit) and then reads the committed value.
	a, b := w.begin(t), w.begin(t)
	w.do(t, "GET", key+"?session="+a+"&lease=x", "").ok(t, "read for update", nil)
	waited := make(chan reply, 1)
	go func() { waited <- w.do(t, "GET", key+"?session="+b, "") }()
	var res client.CommitResult
	w.do(t, "POST", "/v1/sessions/"+a+"/commit", w.commitBody(1, -10)).ok(t, "commit of the session holding the X lease", &res)
	if r := <-waited; r.code != http.StatusOK || string(r.body) != `{"id":1,"balance":90}` {
		t.Errorf("the read that waited for the X lease: %d %s; want 200 with the committed balance 90", r.code, r.body)
	}
	w.do(t, "POST", "/v1/sessions/"+b+"/abort", "").ok(t, "abort of the reader", nil)
	// An X on a validated (golden) S is refused at once: 409 with
	// Retry-After, after which the refused session is over.
	c, d := w.begin(t), w.begin(t)
	w.do(t, "GET", key+"?session="+c, "").ok(t, "read", nil)
	w.do(t, "POST", "/v1/sessions/"+c+"/validate", "").ok(t, "validate", nil)
	refused := w.do(t, "GET", key+"?session="+d+"&lease=x", "")
	refused.isError(t, "a read for update of a golden key", http.StatusConflict, client.CodeAborted, "held by a concurrent session (x_on_golden_s)")
	if got := refused.header.Get("Retry-After"); got != "1" {
		t.Errorf("409 with Retry-After %q; want 1", got)
	}
	w.do(t, "POST", "/v1/sessions/"+d+"/commit", "{}").isError(t, "commit of the aborted session", http.StatusNotFound, client.CodeNotFound, "unknown session")
	w.do(t, "POST", "/v1/sessions/"+c+"/commit", "{}").ok(t, "commit of the validated reader", nil)
	waitFor(t, 5*time.Second, "a read to see the committed session", func() bool {
		r := w.do(t, "GET", key, "")
		return r.code == http.StatusOK && string(r.body) == `{"id":1,"balance":90}`
	})
}

// The queue dead-letter endpoints: the selection is {"queue":…} or
// {"all":true}, exactly one; a queue that is not stopped is a 404.
func TestQueueDeadLetterSelection(t *testing.T) {
	w := newWorld(t, opts{sessions: true})
	var out struct {
		DeadLetters []client.QueueDeadLetter `json:"deadLetters"`
	}
	w.do(t, "GET", "/v1/queues/deadletters", "").ok(t, "list", &out)
	if out.DeadLetters == nil || len(out.DeadLetters) != 0 {
		t.Errorf("dead sessions of a new world: %+v; want []", out.DeadLetters)
	}
	w.do(t, "GET", "/v1/queues/deadletters?limit=0", "").isError(t, "limit 0", http.StatusBadRequest, client.CodeInvalidArgument, "limit must be an integer from 1 to 10000")
	const sel = `select stopped queues with {"queue":"bank/3"} or {"all":true}`
	for _, action := range []string{"replay", "drop"} {
		cases := []struct {
			name, body string
			status     int
			msg        string
		}{
			{"empty selection", "{}", http.StatusBadRequest, sel},
			{"both", fmt.Sprintf(`{"queue":"%s/1","all":true}`, w.family), http.StatusBadRequest, sel},
			{"unknown field", `{"all":true,"force":true}`, http.StatusBadRequest, sel},
			{"not JSON", "all", http.StatusBadRequest, sel},
			{"a queue that is not stopped", fmt.Sprintf(`{"queue":"%s/1"}`, w.family), http.StatusNotFound, fmt.Sprintf(`queue "%s/1" is not stopped`, w.family)},
		}
		for _, tc := range cases {
			t.Run(action+" "+tc.name, func(t *testing.T) {
				code := client.CodeInvalidArgument
				if tc.status == http.StatusNotFound {
					code = client.CodeNotFound
				}
				w.do(t, "POST", "/v1/queues/deadletters/"+action, tc.body).isError(t, tc.name, tc.status, code, tc.msg)
			})
		}
		var done struct{ Done int }
		w.do(t, "POST", "/v1/queues/deadletters/"+action, `{"all":true}`).ok(t, action+" all with none stopped", &done)
		if done.Done != 0 {
			t.Errorf("%s all with none stopped: done %d", action, done.Done)
		}
	}
}

// Multi-reads of mapped entries: the values in the order asked (a repeated
// key twice, null for a key with no value), one unmapped or invalid key
// refusing the whole request before any lease is taken, and leases taken
// on every key: a session that read two keys in one request is wounded by
// a commit on either, and one that read them under X holds both.
func TestCacheReadMany(t *testing.T) {
	w := newWorld(t, opts{sessions: true})
	k1, k2, k9 := w.family+":acct:1", w.family+":acct:2", w.family+":acct:9"
	many := func(q string) string { return "/v1/cache?" + q }
	var res client.CacheManyResult
	w.do(t, "GET", many("key="+k2+"&key="+k9+"&key="+k1+"&key="+k2), "").ok(t, "multi-read without a session", &res)
	want := []string{`{"id":2,"balance":100}`, "null", `{"id":1,"balance":100}`, `{"id":2,"balance":100}`}
	if len(res.Values) != len(want) {
		t.Fatalf("multi-read: %d values; want %d", len(res.Values), len(want))
	}
	for i, v := range res.Values {
		if string(v) != want[i] {
			t.Errorf("value %d: %s; want %s", i, v, want[i])
		}
	}
	s := w.begin(t)
	cases := []struct {
		name, path string
		status     int
		code, msg  string
	}{
		{"no key", many("session=" + s), http.StatusBadRequest, client.CodeInvalidArgument, "name the keys to read"},
		{"unmapped key", many("session=" + s + "&key=" + k1 + "&key=nothing:1"), http.StatusNotFound, client.CodeNotFound, "no mapping matches the key"},
		{"invalid key", many("session=" + s + "&key=" + k1 + "&key=a%01b"), http.StatusBadRequest, client.CodeInvalidArgument, "control character"},
		{"unknown lease", many("lease=q&key=" + k1), http.StatusBadRequest, client.CodeInvalidArgument, `lease "q" is not s or x`},
		{"x lease without a session", many("lease=x&key=" + k1), http.StatusBadRequest, client.CodeInvalidArgument, "lease=x needs a session"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w.do(t, "GET", tc.path, "").isError(t, tc.name, tc.status, tc.code, tc.msg)
		})
	}
	// The refused requests took no lease: s read nothing, so a writer of
	// k1 does not wound it, and its (read-only) commit succeeds.
	w.do(t, "POST", "/v1/sessions/"+w.begin(t)+"/commit", w.commitBody(1, 1)).ok(t, "a transfer into 1", nil)
	w.do(t, "POST", "/v1/sessions/"+s+"/commit", "{}").ok(t, "the commit of the session whose multi-reads were refused", nil)

	// S leases on both keys: a commit changing k2 voids the reader's S.
	r := w.begin(t)
	w.do(t, "GET", many("session="+r+"&key="+k1+"&key="+k2), "").ok(t, "multi-read in a session", &res)
	if len(res.Values) != 2 || string(res.Values[0]) != `{"id":1,"balance":101}` || string(res.Values[1]) != `{"id":2,"balance":100}` {
		t.Errorf("multi-read in a session: %s; want accounts 1 (101) and 2 (100)", res.Values)
	}
	w.do(t, "POST", "/v1/sessions/"+w.begin(t)+"/commit", w.commitBody(2, 1)).ok(t, "a transfer into 2", nil)
	w.do(t, "POST", "/v1/sessions/"+r+"/validate", "").isError(t, "validate of the wounded reader", http.StatusConflict, client.CodeAborted, "")

	// X leases on both keys: a younger session's read of either waits, and
	// sees the value committed by the holder.
	x, y := w.begin(t), w.begin(t)
	w.do(t, "GET", many("session="+x+"&lease=x&key="+k1+"&key="+k2), "").ok(t, "multi-read for update", nil)
	waited := make(chan reply, 1)
	go func() { waited <- w.do(t, "GET", many("session="+y+"&key="+k2+"&key="+k1), "") }()
	w.do(t, "POST", "/v1/sessions/"+x+"/commit", w.commitBody(2, 5)).ok(t, "commit of the X holder", nil)
	if got := <-waited; got.code != http.StatusOK || strings.TrimSpace(string(got.body)) != `{"values":[{"id":2,"balance":106},{"id":1,"balance":101}]}` {
		t.Errorf("the multi-read that waited for the X leases: %d %s; want both values, account 2 at 106", got.code, got.body)
	}
	w.do(t, "POST", "/v1/sessions/"+y+"/commit", "{}").ok(t, "commit of the reader that waited", nil)

	// session=new begins a session in the read: its S leases are taken
	// (a transfer into 2 voids them) and it goes on as any session.
	var begun client.CacheManyResult
	for i, name := range []string{"voided", "committed"} {
		w.do(t, "GET", many("session=new&key="+k1+"&key="+k2), "").ok(t, "a multi-read that begins a session", &begun)
		if _, err := hex.DecodeString(begun.Session); err != nil || len(begun.Session) != 32 || len(begun.Values) != 2 {
			t.Fatalf("session=new answered %+v; want a session of 32 hex digits and two values", begun)
		}
		if i == 0 {
			w.do(t, "POST", "/v1/sessions/"+w.begin(t)+"/commit", w.commitBody(2, 1)).ok(t, "a transfer into 2", nil)
			w.do(t, "POST", "/v1/sessions/"+begun.Session+"/commit", "{}").isError(t, "commit of the "+name+" session", http.StatusConflict, client.CodeAborted, "")
			continue
		}
		w.do(t, "GET", "/v1/cache/"+k1+"?session="+begun.Session+"&lease=x", "").ok(t, "a read for update in the begun session", nil)
		w.do(t, "POST", "/v1/sessions/"+begun.Session+"/commit", w.commitBody(1, 2)).ok(t, "commit of the "+name+" session", nil)
	}
	w.do(t, "GET", many("session=new&key=nothing:1"), "").isError(t, "session=new with an unmapped key", http.StatusNotFound, client.CodeNotFound, "no mapping matches the key")
}
