package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/writeback/writeback/pkg/client"
)

// stmtTimeout is, per database, the DSN parameter that gives the test
// sidecar's connections (only them: other tests share the role and the
// database) a one-second statement timeout, and the error the store then
// answers a statement that runs out of it with: PostgreSQL's
// statement_timeout (milliseconds, a run-time parameter of the
// connection) and SQLSTATE 57014; MariaDB's max_statement_time (seconds,
// a system variable go-sql-driver/mysql sets on each connection) and
// error 1969.
var stmtTimeout = map[string]struct{ param, code, msg string }{
	"pg":    {"statement_timeout=1000", "57014", "statement timeout"},
	"maria": {"max_statement_time=1", "1969", "max_statement_time exceeded"},
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

// A change whose statement runs out of MariaDB's max_statement_time
// (error 1969: a trigger sleeps on one value) is isolable, as PostgreSQL's
// 57014 is (TestStuckStatementTimeout): after maxRetries failed rounds it
// is dead-lettered alone, and every other change batched with it reaches
// the store.
func TestStuckStatementTimeoutMaria(t *testing.T) {
	to := stmtTimeout["maria"]
	stuckChange(t, "maria", "slow", to.code, to.msg, to.param, func(e *env) {
		for _, ev := range []string{"INSERT", "UPDATE"} {
			e.exec(e.dbs["maria"], fmt.Sprintf(`CREATE TRIGGER %s_slow_%s BEFORE %s ON %s FOR EACH ROW
BEGIN
  IF NEW.s = 'slow' THEN DO SLEEP(10); END IF;
END`, e.table, strings.ToLower(ev), ev, e.table))
		}
	})
}

// slow installs a trigger on the bank's log that sleeps 10 s on a row
// tagged 'slow': longer than the statement timeout of stmtTimeout.
func (b *bank) slow() {
	b.t.Helper()
	fn := b.log + "_slow"
	if b.db == "pg" {
		b.exec(fmt.Sprintf(`CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.tag = 'slow' THEN PERFORM pg_sleep(10); END IF;
  RETURN NEW;
END $$`, fn))
		b.exec(fmt.Sprintf("CREATE TRIGGER %s BEFORE INSERT ON %s FOR EACH ROW EXECUTE FUNCTION %s()", fn, b.log, fn))
		b.t.Cleanup(func() {
			_, _ = b.conn.Exec("DROP TABLE IF EXISTS " + b.log)
			_, _ = b.conn.Exec("DROP FUNCTION IF EXISTS " + fn + "()")
		})
		return
	}
	b.exec(fmt.Sprintf(`CREATE TRIGGER %s BEFORE INSERT ON %s FOR EACH ROW
BEGIN
  IF NEW.tag = 'slow' THEN DO SLEEP(10); END IF;
END`, fn, b.log))
}

// A session one of whose statements runs out of the statement timeout
// every time (a trigger sleeps on it) is isolable: after maxRetries
// failed batches it is dead-lettered with the store's error, as a
// permanent error would: the sessions before it in its queue are
// applied, its queue stops at it (the sessions behind it wait, in order),
// other queues go on, and dropping it restarts its queue.
func TestStuckSessionStatementTimeout(t *testing.T) {
	for _, db := range []string{"pg", "maria"} {
		t.Run(db, func(t *testing.T) {
			to := stmtTimeout[db]
			b := newBank(t, db, 2, 3, 100)
			b.slow()
			b.dsn = withDSNParam(db, b.dsn, to.param) // the sidecar's only: b.conn is open
			addr := freeAddr(t)
			sc := start(t, b.config(addr, "  maxRetries: 2\n  retryBackoff: 10ms\n", ""), addr)
			ctx := context.Background()
			logInsert := fmt.Sprintf("INSERT INTO %s (branch, n, tag) VALUES (%s, %s, %s)", b.log, b.ph(1), b.ph(2), b.ph(3))
			b.blindTransfer(t, sc, 0, 0, 1, 10) // applied
			s := begin(t, sc)                   // times out in the trigger, with its transfer
			wantOK(t, "slow commit", s.commit(client.Commit{Queue: b.queue(0),
				Statements: append(b.transferStatements(0, 1, 2, 5), client.Statement{SQL: logInsert, Args: []any{0, 1, "slow"}})}))
			b.blindTransfer(t, sc, 0, 2, 0, 3) // waits behind it
			for range 5 {
				b.blindTransfer(t, sc, 1, 0, 1, 1) // another queue: applied
			}

			var st client.QueueStatus
			waitFor(t, 60*time.Second, "the slow session's queue stopped", func() bool {
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
			if e := st.DeadLetters[0].Error; !strings.Contains(e, to.code) || !strings.Contains(e, to.msg) {
				t.Errorf("dead letter error %q does not carry the store's error (%s, %q)", e, to.code, to.msg)
			}
			waitFor(t, 30*time.Second, "the other queue applied", func() bool { return b.balances()[1][1] == 105 })
			// The session before the slow one is applied, the slow one and
			// the one behind it are not.
			b.wantBalances(t, map[int]map[int]int64{0: {0: 90, 1: 110, 2: 100}, 1: {0: 95, 1: 105, 2: 100}})
			if v := metricValue(t, sc.addr, `writeback_session_deadletters_total{reason="retries"}`); v != 1 {
				t.Errorf(`writeback_session_deadletters_total{reason="retries"} = %v, want 1`, v)
			}
			// Later sessions of other queues flow; the stopped queue keeps
			// its sessions, in order, until it is replayed or dropped.
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
				t.Errorf("%s holds %d rows; want none (the slow session is dropped)", b.log, n)
			}
		})
	}
}
