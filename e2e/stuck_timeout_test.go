package e2e

import "testing"

// stmtTimeout is, per database, the DSN parameter that gives the test
// sidecar's connections (only them: other tests share the role and the
// database) a one-second statement timeout, the error the store then
// answers a statement that runs out of it with, and a statement that
// sleeps 10 s, past it: PostgreSQL's statement_timeout (milliseconds, a
// run-time parameter of the connection) and SQLSTATE 57014; MariaDB's
// max_statement_time (seconds, a system variable go-sql-driver/mysql
// sets on each connection) and error 1969.
var stmtTimeout = map[string]struct{ param, code, msg, sleep string }{
	"pg":    {"statement_timeout=1000", "57014", "statement timeout", "PERFORM pg_sleep(10)"},
	"maria": {"max_statement_time=1", "1969", "max_statement_time exceeded", "DO SLEEP(10)"},
}

// stuckSlowChange runs stuckChange on db's collection, with stmtTimeout's
// statement timeout on the sidecar's DSN and a trigger that sleeps past
// it on a row whose s is 'slow'.
func stuckSlowChange(t *testing.T, db string) {
	to := stmtTimeout[db]
	stuckChange{
		dbs: []string{db}, docs: 60, bad: "slow",
		code: map[string]string{db: to.code}, msg: to.msg, dsnParam: to.param,
		install: func(e *env) {
			e.rowTrigger(db, e.table+"_slow", "IF NEW.s = 'slow' THEN "+to.sleep+"; END IF;")
		},
	}.run(t)
}

// A change whose statement runs out of MariaDB's max_statement_time
// (error 1969: a trigger sleeps on one value) is isolable, as PostgreSQL's
// 57014 is (TestStuckStatementTimeout): after maxRetries failed rounds it
// is dead-lettered alone, and every other change batched with it reaches
// the store.
func TestStuckStatementTimeoutMaria(t *testing.T) { stuckSlowChange(t, "maria") }

// slow installs a trigger on the bank's log that sleeps 10 s on a row
// tagged 'slow': past the statement timeout of stmtTimeout.
func (b *bank) slow() {
	b.t.Helper()
	b.logTrigger(b.log+"_slow", "IF NEW.tag = 'slow' THEN "+stmtTimeout["pg"].sleep+"; END IF;",
		"IF NEW.tag = 'slow' THEN "+stmtTimeout["maria"].sleep+"; END IF;")
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
			stuckSession(t, db, "slow", to.code, to.msg, to.param, (*bank).slow)
		})
	}
}
