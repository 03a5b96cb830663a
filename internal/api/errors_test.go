package api_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/writeback/writeback/internal/config"
	"github.com/writeback/writeback/internal/testenv"
	"github.com/writeback/writeback/pkg/client"
)

// A write-through change the store rejects for good is a 400 whose reason
// names the database's error class and nothing of the data: not the value,
// the table or the constraint (the full error goes to the log and the
// dead letter).
func TestStoreRejection(t *testing.T) {
	maria := testenv.UniqueName(t, "apim")
	mdb, err := sql.Open("mysql", testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mdb.Exec(fmt.Sprintf("CREATE TABLE %s (id bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0, s varchar(255), CONSTRAINT %s_cap CHECK (n <= 100))", maria, maria)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = mdb.Exec("DROP TABLE IF EXISTS " + maria)
		_, _ = mdb.Exec("DELETE FROM writeback_applied_docs WHERE collection = ?", maria)
		mdb.Close()
	})
	w := newWorld(t, opts{edit: func(c *config.Config) {
		c.Stores["maria"] = config.Store{Driver: config.DriverMySQL, DSN: testenv.MySQLDSN(t), MaxConns: 4}
		c.Collections[maria] = config.Collection{Store: "maria", Table: maria, Key: "id", Policy: config.PolicyWriteThrough, CacheTTL: config.Duration{Duration: time.Hour}}
	}})
	cases := []struct {
		name, coll, table string
		reasons           []string // one of them
	}{
		{"postgres", w.wt, w.wt, []string{"the store rejected the change (a constraint was violated, SQLSTATE 23514)"}},
		{"mariadb", maria, maria, []string{
			"the store rejected the change (a check constraint was violated, Error 4025)", // MariaDB
			"the store rejected the change (a check constraint was violated, Error 3819)", // MySQL
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := w.do(t, "PUT", "/v1/docs/"+tc.coll+"/7", `{"n":987654,"s":"secret-value"}`)
			matched := false
			for _, reason := range tc.reasons {
				var eb client.ErrorBody
				if r.code == http.StatusBadRequest && jsonInto(r.body, &eb) && eb.Error.Message == reason {
					matched = true
				}
			}
			if !matched {
				r.isError(t, "a write-through PUT the store rejects", http.StatusBadRequest, client.CodeInvalidArgument, tc.reasons[0])
			}
			for _, leak := range []string{"987654", "secret-value", tc.table, "_cap", "_check"} {
				if strings.Contains(string(r.body), leak) {
					t.Errorf("the answer %s quotes %q", r.body, leak)
				}
			}
			w.do(t, "GET", "/v1/docs/"+tc.coll+"/7", "").isError(t, "read of the rejected document", http.StatusNotFound, client.CodeNotFound, "document not found")
		})
	}
	if st := w.status(t); st.DeadLetters != 2 || st.Pending != 0 {
		t.Errorf("after two rejected write-through changes: %d dead letters, %d pending; want 2 and 0", st.DeadLetters, st.Pending)
	}
}

// With the store unreachable: /readyz answers 503 naming it (Redis ok) and
// writeback_store_up says 0; a write-through change that got buffered is a
// 500 buffered, retry false, without Retry-After; one refused before
// buffering and a read are a 503, retry true, with Retry-After. Once the store is back, /readyz answers 200 and the buffered
// change is applied.
func TestStoreDown(t *testing.T) {
	w := newWorld(t, opts{proxy: true})
	var ready map[string]string
	w.do(t, "GET", "/readyz", "").ok(t, "readyz", &ready)
	if ready["redis"] != "ok" || ready["store pg"] != "ok" || len(ready) != 2 {
		t.Fatalf("readyz with everything up: %v", ready)
	}
	if got := w.metric(t, `writeback_store_up{store="pg"}`); got != 1 {
		t.Errorf("writeback_store_up = %v after a successful /readyz; want 1", got)
	}
	w.px.cut()

	r := w.do(t, "GET", "/readyz", "")
	ready = map[string]string{}
	r.ok(t, "readyz with the store down", &ready, http.StatusServiceUnavailable)
	if ready["redis"] != "ok" || ready["store pg"] != "unavailable; see the sidecar's log" {
		t.Errorf("readyz with the store down: %v; want redis ok and the store unavailable", ready)
	}
	// The driver's error names the user, the database and the address;
	// /readyz needs no token, so none of them may show.
	for _, leak := range []string{w.px.addr, "postgres", "writeback", "dial", "refused"} {
		if strings.Contains(string(r.body), leak) {
			t.Errorf("/readyz quotes %q: %s", leak, r.body)
		}
	}
	if got := w.metric(t, `writeback_store_up{store="pg"}`); got != 0 {
		t.Errorf("writeback_store_up = %v after a failed /readyz; want 0", got)
	}
	cases := []struct {
		name, method, path, body string
		status                   int
		code, msg                string
		retry                    bool
	}{
		{"write-through put, buffered", "PUT", "/v1/docs/" + w.wt + "/5", `{"n":5}`,
			http.StatusInternalServerError, client.CodeBuffered, "the store is unavailable, but the change is buffered as seq ", false},
		{"write-back patch needing the row", "PATCH", "/v1/docs/" + w.coll + "/5", `{"$set":{"s":"x"}}`,
			http.StatusServiceUnavailable, client.CodeUnavailable, "the store is unavailable; retry with backoff", true},
		{"read of an uncached document", "GET", "/v1/docs/" + w.coll + "/5", "", http.StatusServiceUnavailable, client.CodeUnavailable, "unavailable", true},
		{"scan", "GET", "/v1/docs/" + w.coll, "", http.StatusServiceUnavailable, client.CodeUnavailable, "unavailable", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := w.do(t, tc.method, tc.path, tc.body)
			r.isError(t, tc.name, tc.status, tc.code, tc.msg)
			r.retries(t, tc.name, tc.retry)
		})
	}
	if st := w.status(t); st.Pending != 1 {
		t.Errorf("%d changes pending with the store down; want the buffered write-through one", st.Pending)
	}

	w.px.restore()
	waitFor(t, 10*time.Second, "/readyz to answer 200", func() bool {
		return w.do(t, "GET", "/readyz", "").code == http.StatusOK
	})
	if res := w.flush(t); res.Applied != 1 || !res.Drained {
		t.Errorf("flush after the store came back: %+v; want the buffered change applied", res)
	}
	var n int64
	if err := w.pg.QueryRow(fmt.Sprintf("SELECT n FROM %s WHERE id = 5", w.wt)).Scan(&n); err != nil || n != 5 {
		t.Errorf("the store has n = %d (%v); want the change that was buffered while it was down", n, err)
	}
}

// A flush whose timeout passes while the store is down answers what it
// could not apply (200, drained false, the pending count), as the session
// queues' flush does and as `writeback flush` expects to print "N changes
// are still pending after …".
//
// It once answered 503 "the request timed out or was cancelled" when the
// timeout passed during the backoff after a failed round: Flush went round
// its loop again and returned PendingCounts' context error.
func TestFlushTimeoutReportsPending(t *testing.T) {
	// The long backoff puts the timeout in the backoff after the first
	// failed round, every time.
	w := newWorld(t, opts{proxy: true, sessions: true, edit: func(c *config.Config) {
		c.Writeback.RetryBackoff = config.Duration{Duration: 5 * time.Second}
	}})
	w.do(t, "PUT", "/v1/docs/"+w.coll+"/1", `{"n":1}`).ok(t, "put", nil)
	var begun client.SessionStarted
	w.do(t, "POST", "/v1/sessions", "").ok(t, "begin", &begun, http.StatusCreated)
	commit := fmt.Sprintf(`{"queue":"%s/1","statements":[{"sql":"UPDATE %s_acct SET balance = balance + $1 WHERE id = $2","args":[1,1]}]}`, w.family, w.coll)
	w.do(t, "POST", "/v1/sessions/"+begun.Session+"/commit", commit).ok(t, "commit", nil)
	w.px.cut()

	t.Run("sessions", func(t *testing.T) {
		var res client.QueueFlushResult
		w.do(t, "POST", "/v1/queues/flush", `{"timeout":"300ms"}`).ok(t, "queue flush with the store down", &res)
		if res.Drained || res.Pending != 1 {
			t.Errorf("queue flush with the store down: %+v; want drained false, 1 pending", res)
		}
	})
	t.Run("documents", func(t *testing.T) {
		var res client.FlushResult
		w.do(t, "POST", "/v1/flush", `{"timeout":"300ms"}`).ok(t, "flush with the store down", &res)
		if res.Drained || res.Pending != 1 {
			t.Errorf("flush with the store down: %+v; want drained false, 1 pending", res)
		}
	})
}

// With redis.replicas above what Redis has, a write is not acknowledged:
// once the sidecar has counted the in-sync replicas (every 250 ms), it is
// refused at once — 503 saying how many are in sync, nothing buffered —
// for documents and sessions. (WAIT's own shortfall, when the count says
// enough, is rscript's TestDurableShortfall and document's Classify test.)
func TestReplicationError(t *testing.T) {
	w := newWorld(t, opts{sessions: true, edit: func(c *config.Config) { c.Redis.Replicas = 1 }})
	var begun client.SessionStarted
	w.do(t, "POST", "/v1/sessions", "").ok(t, "begin", &begun, http.StatusCreated)
	time.Sleep(500 * time.Millisecond) // the first count of in-sync replicas
	const msg = "only 0 of the 1 required Redis replicas are in sync, so nothing was buffered; retry with backoff"
	cases := []struct{ name, path, method, body string }{
		{"document", "/v1/docs/" + w.coll + "/1", "PUT", `{"n":1}`},
		{"session", "/v1/sessions/" + begun.Session + "/commit", "POST",
			fmt.Sprintf(`{"queue":"%s/1","statements":[{"sql":"UPDATE %s_acct SET balance = $1 WHERE id = $2","args":[1,1]}]}`, w.family, w.coll)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := w.do(t, tc.method, tc.path, tc.body)
			r.isError(t, tc.name, http.StatusServiceUnavailable, client.CodeUnavailable, msg)
			r.retries(t, tc.name, true)
		})
	}
	t.Cleanup(func() { // after the parallel subtests
		if got := w.metric(t, "writeback_replica_shortfalls_total"); got != 2 {
			t.Errorf("writeback_replica_shortfalls_total = %v; want 2", got)
		}
	})
}

// With Redis unreachable, /readyz answers 503 with a neutral reason for
// Redis (its error goes to the log) and writeback_redis_up says 0, and a
// write is a 503 that is safe to retry (no connection could be made, so
// nothing was buffered); once Redis is back, both recover.
func TestRedisDown(t *testing.T) {
	w := newWorld(t, opts{redisPx: true})
	w.do(t, "GET", "/readyz", "").ok(t, "readyz", nil)
	if got := w.metric(t, "writeback_redis_up"); got != 1 {
		t.Errorf("writeback_redis_up = %v with Redis up; want 1", got)
	}
	w.rpx.cut()
	r := w.do(t, "GET", "/readyz", "")
	var ready map[string]string
	r.ok(t, "readyz with Redis down", &ready, http.StatusServiceUnavailable)
	if ready["redis"] != "unavailable; see the sidecar's log" {
		t.Errorf("readyz with Redis down: %v; want redis unavailable", ready)
	}
	for _, leak := range []string{w.rpx.addr, "dial", "refused", "EOF"} {
		if strings.Contains(string(r.body), leak) {
			t.Errorf("/readyz quotes %q: %s", leak, r.body)
		}
	}
	if got := w.metric(t, "writeback_redis_up"); got != 0 {
		t.Errorf("writeback_redis_up = %v with Redis down; want 0", got)
	}
	p := w.do(t, "PUT", "/v1/docs/"+w.coll+"/1", `{"n":1}`)
	p.isError(t, "put with Redis down", http.StatusServiceUnavailable, client.CodeUnavailable, "Redis is unavailable; retry with backoff")
	p.retries(t, "put with Redis down", true)
	w.rpx.restore()
	waitFor(t, 10*time.Second, "writeback_redis_up to be 1 again", func() bool {
		return w.metric(t, "writeback_redis_up") == 1
	})
}

func jsonInto(b []byte, v any) bool { return json.Unmarshal(b, v) == nil }

// A write-through session whose commit is durable in its queue but could
// not be applied (the store is down) is a 500 buffered, retry false,
// without Retry-After: committing it again would apply it twice.
func TestSessionCommittedNotApplied(t *testing.T) {
	w2 := newWorld(t, opts{proxy: true, sessions: true, edit: func(c *config.Config) {
		for name, q := range c.Queues {
			q.Policy = config.PolicyWriteThrough
			c.Queues[name] = q
		}
	}})
	w2.px.cut()
	var begun client.SessionStarted
	w2.do(t, "POST", "/v1/sessions", "").ok(t, "begin", &begun, http.StatusCreated)
	commit := fmt.Sprintf(`{"queue":"%s/1","statements":[{"sql":"UPDATE %s_acct SET balance = balance + $1 WHERE id = $2","args":[1,1]}]}`, w2.family, w2.coll)
	r := w2.do(t, "POST", "/v1/sessions/"+begun.Session+"/commit", commit)
	r.isError(t, "a write-through commit with the store down", http.StatusInternalServerError, client.CodeBuffered, "so do not commit it again")
	r.retries(t, "a write-through commit with the store down", false)
}
