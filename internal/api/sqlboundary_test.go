package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/writeback/writeback/internal/config"
	"github.com/writeback/writeback/internal/testenv"
	"github.com/writeback/writeback/pkg/client"
)

// commitStatement is a commit body of one statement in queue <family>/1.
func (w *world) commitStatement(sql string, args ...any) string {
	b, err := json.Marshal(map[string]any{"queue": w.family + "/1", "statements": []map[string]any{{"sql": sql, "args": args}}})
	if err != nil {
		w.t.Fatal(err)
	}
	return string(b)
}

// balances reads <coll>_acct's balances by id.
func (w *world) balances(t *testing.T) map[int]int64 {
	t.Helper()
	rows, err := w.pg.Query(fmt.Sprintf("SELECT id, balance FROM %s_acct", w.coll))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int]int64{}
	for rows.Next() {
		var id int
		var b int64
		if err := rows.Scan(&id, &b); err != nil {
			t.Fatal(err)
		}
		out[id] = b
	}
	return out
}

func (w *world) appliedSessions(t *testing.T) int {
	t.Helper()
	var n int
	if err := w.pg.QueryRow("SELECT count(*) FROM writeback_applied_sessions WHERE queue LIKE $1", w.family+"/%").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The session SQL trust boundary through the HTTP API: statements that
// would call functions past the allow-list (quoted, schema-qualified,
// inside an array slice), read the session's identity or reach another
// table are refused with a 400 before anything is buffered, and a flush
// afterwards commits nothing: the balances and the applied records are
// unchanged. Each would change a balance if it ran.
func TestSessionSQLBoundary(t *testing.T) {
	w := newWorld(t, opts{sessions: true})
	acct := w.coll + "_acct"
	hostile := []struct {
		name, sql string
		args      []any
		msg       string
	}{
		{"quoted function", fmt.Sprintf(`UPDATE %s SET balance = balance + $1 WHERE id = $2 AND "pg_sleep"($3) IS NULL`, acct), []any{1, 1, 0}, `"pg_sleep" at byte`},
		{"schema-qualified quoted function", fmt.Sprintf(`UPDATE %s SET balance = balance + length(pg_catalog."set_config"($1, $2, false)) WHERE id = $3`, acct), []any{"application_name", "x", 1}, "pg_catalog.… at byte"},
		{"array slice", fmt.Sprintf(`UPDATE %s SET balance = balance + (ARRAY[1,2])[1:nextval($1)] WHERE id = $2`, acct), []any{"s", 1}, "ARRAY at byte"},
		{"subscript", fmt.Sprintf(`UPDATE %s SET balance = balance + (balance)[1:nextval($1)] WHERE id = $2`, acct), []any{"s", 1}, `"[" at byte`},
		{"quoted name called", fmt.Sprintf(`UPDATE %s SET balance = "abs"($1) WHERE id = $2`, acct), []any{1, 1}, `"abs" at byte`},
		{"cast to regclass", fmt.Sprintf(`UPDATE %s SET balance = $1::regclass::oid WHERE id = $2`, acct), []any{"pg_class", 1}, "type REGCLASS"},
		{"current_user", fmt.Sprintf(`UPDATE %s SET balance = length(current_user) WHERE id = $1`, acct), []any{1}, "CURRENT_USER"},
		{"unicode name", fmt.Sprintf(`UPDATE %s SET balance = U&"abs"($1) WHERE id = $2`, acct), []any{1, 1}, "operator &"},
		{"another table as qualifier", fmt.Sprintf(`UPDATE %s SET balance = pg_class.relpages WHERE id = $1`, acct), []any{1}, "pg_class.… at byte"},
		{"upper-case table", fmt.Sprintf(`UPDATE %s SET balance = $1 WHERE id = $2`, strings.ToUpper(acct)), []any{1, 1}, ""},
	}
	for _, tc := range hostile {
		t.Run(tc.name, func(t *testing.T) {
			r := w.do(t, "POST", "/v1/sessions/"+w.begin(t)+"/commit", w.commitStatement(tc.sql, tc.args...))
			if tc.msg == "" { // folded to the declared table: accepted (PostgreSQL folds it too)
				return
			}
			r.isError(t, tc.name, http.StatusBadRequest, client.CodeInvalidArgument, tc.msg)
		})
	}
	// The upper-case table folds to the declared one and was committed:
	// it is the only session, and the only change.
	w.flush(t)
	if b := w.balances(t); b[1] != 1 || b[2] != 100 {
		t.Errorf("balances after the refused statements: %v; want only the accepted one's change (1: 1, 2: 100)", b)
	}
	if n := w.appliedSessions(t); n != 1 {
		t.Errorf("%d applied sessions; want 1", n)
	}
}

// queues.<family>.role: the family's statements run under a role that
// may change <coll>_acct but not <coll>. A statement on <coll> (declared,
// so the checker lets it through) fails for lack of privilege and
// dead-letters its session, which stops the queue; the session before it
// is applied and recorded in writeback_applied_sessions, which the role
// may not touch: the sidecar's bookkeeping runs as its own user.
func TestSessionRole(t *testing.T) {
	role := testenv.UniqueName(t, "wbrole")
	w := newWorld(t, opts{sessions: true, edit: func(c *config.Config) {
		for name, q := range c.Queues {
			q.Role = role
			q.Tables = append(q.Tables, strings.TrimSuffix(q.Tables[0], "_acct"))
			c.Queues[name] = q
		}
	}, before: func(w *world) {
		w.exec("CREATE ROLE " + role + " NOLOGIN")
		w.exec(fmt.Sprintf("GRANT SELECT, UPDATE ON %s_acct TO %s", w.coll, role))
		w.t.Cleanup(func() {
			_, _ = w.pg.Exec("DROP OWNED BY " + role)
			_, _ = w.pg.Exec("DROP ROLE " + role)
		})
	}})
	w.exec(fmt.Sprintf("INSERT INTO %s (id, n) VALUES (1, 5)", w.coll))

	ok := w.begin(t)
	w.do(t, "POST", "/v1/sessions/"+ok+"/commit", w.commitStatement(fmt.Sprintf("UPDATE %s_acct SET balance = balance - $1 WHERE id = $2", w.coll), 10, 1)).ok(t, "commit on the granted table", nil)
	bad := w.begin(t)
	w.do(t, "POST", "/v1/sessions/"+bad+"/commit", w.commitStatement(fmt.Sprintf("UPDATE %s SET n = $1 WHERE id = $2", w.coll), 7, 1)).ok(t, "commit on the table the role may not change", nil)
	res := w.flush(t)
	if res.Sessions == nil || res.Sessions.Stopped != 1 {
		t.Errorf("flush: %+v; want one stopped queue", res.Sessions)
	}
	if b := w.balances(t); b[1] != 90 {
		t.Errorf("balance of 1: %d; want 90 (the granted session applied)", b[1])
	}
	var n int
	if err := w.pg.QueryRow(fmt.Sprintf("SELECT n FROM %s WHERE id = 1", w.coll)).Scan(&n); err != nil || n != 5 {
		t.Errorf("n of %s 1: %d, %v; want 5 (the refused session changed nothing)", w.coll, n, err)
	}
	if got := w.appliedSessions(t); got != 1 {
		t.Errorf("%d applied sessions; want 1 (the granted one, recorded by the sidecar's user)", got)
	}
	var out struct {
		DeadLetters []client.QueueDeadLetter `json:"deadLetters"`
	}
	w.do(t, "GET", "/v1/queues/deadletters", "").ok(t, "dead letters", &out)
	if len(out.DeadLetters) != 1 || out.DeadLetters[0].Session != bad || !strings.Contains(out.DeadLetters[0].Error, "permission denied") {
		t.Errorf("dead letters: %+v; want the session on %s, permission denied", out.DeadLetters, w.coll)
	}
}
