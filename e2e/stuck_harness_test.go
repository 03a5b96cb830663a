package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/writeback/writeback/pkg/client"
)

// The stuck tests' shared setups: a store that keeps refusing one change
// (stuckChange) or one session (stuckSession) with an error outside the
// permanent list, set up by a trigger, an index or a statement timeout.

// pgTrigger installs on table a trigger fn that runs the PL/pgSQL
// statement stmt before each row's events ("INSERT", "INSERT OR UPDATE"),
// and drops table and fn when the test ends (the trigger goes with the
// table, and fn cannot go before it).
func pgTrigger(t *testing.T, db *sql.DB, table, fn, events, stmt string) {
	t.Helper()
	for _, q := range []string{
		fmt.Sprintf(`CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  %s
  RETURN NEW;
END $$`, fn, stmt),
		fmt.Sprintf("CREATE TRIGGER %s BEFORE %s ON %s FOR EACH ROW EXECUTE FUNCTION %s()", fn, events, table, fn),
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		_, _ = db.Exec("DROP TABLE IF EXISTS " + table)
		_, _ = db.Exec("DROP FUNCTION IF EXISTS " + fn + "()")
	})
}

// mariaTrigger installs on table a trigger name that runs the statement
// stmt before each row's event ("INSERT" or "UPDATE"); it goes with the
// table.
func mariaTrigger(t *testing.T, db *sql.DB, table, name, event, stmt string) {
	t.Helper()
	q := fmt.Sprintf(`CREATE TRIGGER %s BEFORE %s ON %s FOR EACH ROW
BEGIN
  %s
END`, name, event, table, stmt)
	if _, err := db.Exec(q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// rowTrigger installs on the env's table in db (pg or maria) a trigger,
// named after fn, that runs stmt before each row is inserted or updated.
func (e *env) rowTrigger(db, fn, stmt string) {
	e.t.Helper()
	if db == "pg" {
		pgTrigger(e.t, e.dbs["pg"], e.table, fn, "INSERT OR UPDATE", stmt)
		return
	}
	for _, ev := range []string{"INSERT", "UPDATE"} {
		mariaTrigger(e.t, e.dbs[db], e.table, fn+"_"+strings.ToLower(ev), ev, stmt)
	}
}

// logTrigger installs on the bank's log a trigger fn that runs pgStmt or
// mariaStmt (by the bank's database) before each row is inserted.
func (b *bank) logTrigger(fn, pgStmt, mariaStmt string) {
	b.t.Helper()
	if b.db == "pg" {
		pgTrigger(b.t, b.conn, b.log, fn, "INSERT", pgStmt)
		return
	}
	mariaTrigger(b.t, b.conn, b.log, fn, "INSERT", mariaStmt)
}

// withDSNParam adds the parameter kv (key=value) to a DSN of db: a
// PostgreSQL URL or keyword/value string, a go-sql-driver/mysql DSN.
func withDSNParam(db, dsn, kv string) string {
	switch {
	case db == "pg" && !strings.Contains(dsn, "://"):
		return dsn + " " + kv
	case strings.Contains(dsn, "?"):
		return dsn + "&" + kv
	}
	return dsn + "?" + kv
}

// stuckConfig is the env's write-back configuration with maxRetries and a
// short retryBackoff.
func (e *env) stuckConfig(addr string, maxRetries int) string {
	e.t.Helper()
	p := e.config(addr, "write-back", "")
	b, err := os.ReadFile(p)
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := strings.Replace(string(b), "\nwriteback:\n", fmt.Sprintf("\nwriteback:\n  maxRetries: %d\n  retryBackoff: 10ms\n", maxRetries), 1)
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// stuckChange is a change the store keeps refusing, in the collections of
// one or more databases served by one sidecar (maxRetries 2).
type stuckChange struct {
	dbs      []string          // the databases whose collections are written
	docs     int               // documents per collection
	bad      string            // document 1's s that the store refuses
	code     map[string]string // per database, the store's error code
	msg      string            // and message, that the dead letter carries
	dsnParam string            // key=value added to the sidecar's DSNs, or ""
	install  func(*env)        // makes the store refuse bad
}

// run writes, to each database's collection in turn, document 1's s =
// bad, then its n += 7, and n = id to documents 2..docs, then a second
// wave of n += 1000 to every document: each bad change alone must become
// a dead letter carrying the store's error, after maxRetries failed
// rounds; everything else, document 1's later changes included, must
// reach the store.
func (c stuckChange) run(t *testing.T) {
	e := newEnv(t, c.docs)
	c.install(e)
	if c.dsnParam != "" {
		for _, db := range c.dbs {
			e.dsns[db] = withDSNParam(db, e.dsns[db], c.dsnParam)
		}
	}
	addr := freeAddr(t)
	sc := start(t, e.stuckConfig(addr, 2), addr)
	ctx := context.Background()
	badSeq := map[string]int64{}
	for _, db := range c.dbs {
		coll := e.coll(db)
		seq, err := sc.c.Patch(ctx, coll, "1", map[string]any{"$set": map[string]any{"s": c.bad}})
		if err != nil {
			t.Fatal(err)
		}
		badSeq[db] = seq
		mustWrite(t)(sc.c.Patch(ctx, coll, "1", map[string]any{"$inc": map[string]any{"n": 7}}))
		for id := 2; id <= c.docs; id++ {
			mustWrite(t)(sc.c.Patch(ctx, coll, strconv.Itoa(id), map[string]any{"$set": map[string]any{"n": id}}))
		}
	}
	applied := func(db string, plus int64) func() bool {
		return func() bool {
			rows := e.rows(db)
			for id := int64(2); id <= int64(c.docs); id++ {
				if rows[id].N != id+plus {
					return false
				}
			}
			return true
		}
	}
	for _, db := range c.dbs {
		waitFor(t, 60*time.Second, db+": every unrelated document in the store", applied(db, 0))
	}
	var dls []client.DeadLetter
	waitFor(t, 60*time.Second, fmt.Sprintf("%d dead letters", len(c.dbs)), func() bool {
		var err error
		if dls, err = sc.c.DeadLetters(ctx, 100); err != nil {
			t.Fatal(err)
		}
		return len(dls) >= len(c.dbs)
	})
	if len(dls) != len(c.dbs) {
		t.Fatalf("dead letters: %+v, want exactly the bad changes (%d)", dls, len(c.dbs))
	}
	for _, db := range c.dbs {
		coll, found := e.coll(db), false
		for _, d := range dls {
			if d.Collection != coll {
				continue
			}
			found = true
			if d.ID != "1" || d.Seq != badSeq[db] {
				t.Errorf("%s: dead letter %s/%s seq %d, want %s/1 seq %d", db, d.Collection, d.ID, d.Seq, coll, badSeq[db])
			}
			if !strings.Contains(d.Error, c.code[db]) || !strings.Contains(d.Error, c.msg) {
				t.Errorf("%s: dead letter error %q does not carry the store's error (%s, %q)", db, d.Error, c.code[db], c.msg)
			}
		}
		if !found {
			t.Errorf("%s: no dead letter: %+v", db, dls)
		}
		// The bad document's later change is applied after it; the bad
		// change is not.
		waitFor(t, 30*time.Second, db+": document 1's later change", func() bool { return e.rows(db)[1].N == 7 })
		if r := e.rows(db)[1]; r.S.String != "init" {
			t.Errorf("%s: document 1 has s = %.40q, want the value before the dead-lettered change", db, r.S.String)
		}
	}
	if v := metricValue(t, sc.addr, `writeback_deadletters_total{reason="retries"}`); v != float64(len(c.dbs)) {
		t.Errorf(`writeback_deadletters_total{reason="retries"} = %v, want %d`, v, len(c.dbs))
	}
	if v := metricValue(t, sc.addr, "writeback_apply_retries_total"); v < 2 {
		t.Errorf("writeback_apply_retries_total = %v, want at least maxRetries", v)
	}

	// Later changes flow as usual.
	for _, db := range c.dbs {
		for id := 1; id <= c.docs; id++ {
			mustWrite(t)(sc.c.Patch(ctx, e.coll(db), strconv.Itoa(id), map[string]any{"$inc": map[string]any{"n": 1000}}))
		}
	}
	for _, db := range c.dbs {
		waitFor(t, 60*time.Second, db+": the second wave", func() bool { return applied(db, 1000)() && e.rows(db)[1].N == 1007 })
	}
	if dls, _ := sc.c.DeadLetters(ctx, 100); len(dls) != len(c.dbs) {
		t.Errorf("dead letters after the second wave: %d, want %d", len(dls), len(c.dbs))
	}
	if st := sc.flush(t); st.Pending != 0 {
		t.Errorf("flush: %+v; want nothing pending", st)
	}
}

// stuckSession commits, through one sidecar (maxRetries 2) on a bank of
// db set up by install (with dsnParam, key=value, added to the sidecar's
// DSN unless it is ""), a transfer in queue 0, then one whose session
// also logs a row tagged tag, which the store keeps refusing, then a
// transfer behind it, and transfers in queue 1. The tagged session must
// be dead-lettered, carrying code and msg, after maxRetries failed
// batches, as a permanent error would: the session before it in its
// queue is applied, its queue stops at it (the session behind it waits),
// the other queue goes on, and dropping it restarts its queue.
func stuckSession(t *testing.T, db, tag, code, msg, dsnParam string, install func(*bank)) {
	b := newBank(t, db, 2, 3, 100)
	install(b)
	if dsnParam != "" {
		b.dsn = withDSNParam(db, b.dsn, dsnParam) // the sidecar's only: b.conn is open
	}
	addr := freeAddr(t)
	sc := start(t, b.config(addr, "  maxRetries: 2\n  retryBackoff: 10ms\n", ""), addr)
	ctx := context.Background()
	logInsert := fmt.Sprintf("INSERT INTO %s (branch, n, tag) VALUES (%s, %s, %s)", b.log, b.ph(1), b.ph(2), b.ph(3))
	b.blindTransfer(t, sc, 0, 0, 1, 10) // applied
	s := begin(t, sc)                   // refused by the store, with its transfer
	wantOK(t, tag+" commit", s.commit(client.Commit{Queue: b.queue(0),
		Statements: append(b.transferStatements(0, 1, 2, 5), client.Statement{SQL: logInsert, Args: []any{0, 1, tag}})}))
	b.blindTransfer(t, sc, 0, 2, 0, 3) // waits behind it
	for range 5 {
		b.blindTransfer(t, sc, 1, 0, 1, 1) // another queue: applied
	}

	var st client.QueueStatus
	waitFor(t, 60*time.Second, "the "+tag+" session's queue stopped", func() bool {
		var err error
		st, err = sc.c.Queues(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.StoppedQueues > 0
	})
	if st.StoppedQueues != 1 || len(st.DeadLetters) != 1 || st.DeadLetters[0].Queue != b.queue(0) {
		t.Fatalf("queues: %+v; want queue %s stopped", st, b.queue(0))
	}
	if e := st.DeadLetters[0].Error; !strings.Contains(e, code) || !strings.Contains(e, msg) {
		t.Errorf("dead letter error %q does not carry the store's error (%s, %q)", e, code, msg)
	}
	waitFor(t, 30*time.Second, "the other queue applied", func() bool { return b.balances()[1][1] == 105 })
	// The session before the refused one is applied, the refused one and
	// the one behind it are not.
	b.wantBalances(t, map[int]map[int]int64{0: {0: 90, 1: 110, 2: 100}, 1: {0: 95, 1: 105, 2: 100}})
	if v := metricValue(t, sc.addr, `writeback_session_deadletters_total{reason="retries"}`); v != 1 {
		t.Errorf(`writeback_session_deadletters_total{reason="retries"} = %v, want 1`, v)
	}
	// Later sessions of other queues flow; the stopped queue keeps its
	// sessions, in order, until it is replayed or dropped.
	b.blindTransfer(t, sc, 1, 2, 0, 7)
	waitFor(t, 30*time.Second, "a later session of the other queue", func() bool { return b.balances()[1][2] == 93 })
	if bal := b.balances()[0]; bal[0] != 90 || bal[2] != 100 {
		t.Errorf("stopped queue: balances %v; want the sessions behind the dead letter still waiting", bal)
	}
	if out, err := cli(t, sc, "sessions", "deadletters", "drop", "--queue", b.queue(0)); err != nil {
		t.Fatalf("drop: %v\n%s", err, out)
	}
	waitFor(t, 30*time.Second, "the session behind the dropped one", func() bool { return b.balances()[0][0] == 93 })
	b.wantBalances(t, map[int]map[int]int64{0: {0: 93, 1: 110, 2: 97}})
	var n int
	if err := b.conn.QueryRow("SELECT count(*) FROM " + b.log).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%s holds %d rows; want none (the %s session is dropped)", b.log, n, tag)
	}
}
