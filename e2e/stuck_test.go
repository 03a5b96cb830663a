package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/writeback/writeback/pkg/client"
)

// poison installs a trigger on the env's table in both databases that
// refuses any row whose s is 'poison' with an error outside the permanent
// list: PostgreSQL's RAISE EXCEPTION (SQLSTATE P0001), MariaDB's SIGNAL
// SQLSTATE '45000' (error 1644).
func (e *env) poison() {
	e.t.Helper()
	fn := e.table + "_guard"
	e.exec(e.dbs["pg"], fmt.Sprintf(`CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.s = 'poison' THEN RAISE EXCEPTION 'poison row %%', NEW.id; END IF;
  RETURN NEW;
END $$`, fn))
	e.exec(e.dbs["pg"], fmt.Sprintf("CREATE TRIGGER %s BEFORE INSERT OR UPDATE ON %s FOR EACH ROW EXECUTE FUNCTION %s()", fn, e.table, fn))
	e.t.Cleanup(func() {
		_, _ = e.dbs["pg"].Exec("DROP TABLE IF EXISTS " + e.table)
		_, _ = e.dbs["pg"].Exec("DROP FUNCTION IF EXISTS " + fn + "()")
	})
	for _, ev := range []string{"INSERT", "UPDATE"} {
		e.exec(e.dbs["maria"], fmt.Sprintf(`CREATE TRIGGER %s_%s BEFORE %s ON %s FOR EACH ROW
BEGIN
  IF NEW.s = 'poison' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'poison row'; END IF;
END`, fn, strings.ToLower(ev), ev, e.table))
	}
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

// A change the store keeps rejecting with an error outside the permanent
// list (a trigger's exception) must not stall the documents batched with
// it: after maxRetries failed rounds the batch is split, the one change
// that keeps failing alone becomes a dead letter with the store's error,
// and every other change — of other documents, and the poisoned
// document's own later change, applied after it — reaches the store.
func TestStuckChangeIsDeadLettered(t *testing.T) {
	const docs = 150
	e := newEnv(t, docs)
	e.poison()
	addr := freeAddr(t)
	sc := start(t, e.stuckConfig(addr, 2), addr)
	ctx := context.Background()
	dbs := []string{"pg", "maria"}
	poisonSeq := map[string]int64{}
	for _, db := range dbs {
		coll := e.coll(db)
		seq, err := sc.c.Patch(ctx, coll, "1", map[string]any{"$set": map[string]any{"s": "poison"}})
		if err != nil {
			t.Fatal(err)
		}
		poisonSeq[db] = seq
		mustWrite(t)(sc.c.Patch(ctx, coll, "1", map[string]any{"$inc": map[string]any{"n": 7}}))
		for id := 2; id <= docs; id++ {
			mustWrite(t)(sc.c.Patch(ctx, coll, strconv.Itoa(id), map[string]any{"$set": map[string]any{"n": id}}))
		}
	}
	applied := func(db string, plus int64) func() bool {
		return func() bool {
			rows := e.rows(db)
			for id := int64(2); id <= docs; id++ {
				if rows[id].N != id+plus {
					return false
				}
			}
			return true
		}
	}
	for _, db := range dbs {
		waitFor(t, 30*time.Second, db+": every unrelated document in the store", applied(db, 0))
	}

	var dls []client.DeadLetter
	waitFor(t, 10*time.Second, "two dead letters", func() bool {
		var err error
		dls, err = sc.c.DeadLetters(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		return len(dls) >= 2
	})
	if len(dls) != 2 {
		t.Fatalf("dead letters: %+v, want exactly the two poisoned changes", dls)
	}
	for _, db := range dbs {
		code := map[string]string{"pg": "P0001", "maria": "1644"}[db]
		found := false
		for _, d := range dls {
			if d.Collection != e.coll(db) {
				continue
			}
			found = true
			if d.ID != "1" || d.Seq != poisonSeq[db] {
				t.Errorf("%s: dead letter %s/%s seq %d, want the poisoned change 1 seq %d", db, d.Collection, d.ID, d.Seq, poisonSeq[db])
			}
			if !strings.Contains(d.Error, "poison row") || !strings.Contains(d.Error, code) {
				t.Errorf("%s: dead letter error %q does not carry the store's error (%s)", db, d.Error, code)
			}
		}
		if !found {
			t.Errorf("%s: no dead letter: %+v", db, dls)
		}
		// The poisoned document's later change is applied after it; the
		// poisoned change is not.
		waitFor(t, 10*time.Second, db+": the poisoned document's later change", func() bool { return e.rows(db)[1].N == 7 })
		if r := e.rows(db)[1]; r.S.String != "init" {
			t.Errorf("%s: document 1 has s = %q, want the value before the dead-lettered change", db, r.S.String)
		}
	}
	if v := metricValue(t, sc.addr, `writeback_deadletters_total{reason="retries"}`); v != 2 {
		t.Errorf(`writeback_deadletters_total{reason="retries"} = %v, want 2`, v)
	}
	if v := metricValue(t, sc.addr, "writeback_apply_retries_total"); v < 2 {
		t.Errorf("writeback_apply_retries_total = %v, want at least maxRetries", v)
	}

	// Later changes of the other documents flow as usual.
	for _, db := range dbs {
		for id := 2; id <= docs; id++ {
			mustWrite(t)(sc.c.Patch(ctx, e.coll(db), strconv.Itoa(id), map[string]any{"$inc": map[string]any{"n": 1000}}))
		}
	}
	for _, db := range dbs {
		waitFor(t, 30*time.Second, db+": the second wave of unrelated changes", applied(db, 1000))
	}
	if dls, _ := sc.c.DeadLetters(ctx, 100); len(dls) != 2 {
		t.Errorf("dead letters after the second wave: %d, want 2", len(dls))
	}
}

// maxRetries: 0 retries forever: a change the store keeps rejecting with
// an error outside the permanent list is never dead-lettered.
func TestStuckChangeRetriedForeverWithMaxRetriesZero(t *testing.T) {
	e := newEnv(t, 3)
	e.poison()
	addr := freeAddr(t)
	sc := start(t, e.stuckConfig(addr, 0), addr)
	ctx := context.Background()
	mustWrite(t)(sc.c.Patch(ctx, e.coll("pg"), "1", map[string]any{"$set": map[string]any{"s": "poison"}}))
	waitFor(t, 30*time.Second, "ten failed rounds", func() bool {
		return metricValue(t, sc.addr, "writeback_apply_retries_total") >= 10
	})
	if dls, err := sc.c.DeadLetters(ctx, 100); err != nil || len(dls) != 0 {
		t.Fatalf("dead letters: %+v, %v; want none with maxRetries 0", dls, err)
	}
	if v := metricValue(t, sc.addr, "writeback_batch_splits_total"); v != 0 {
		t.Errorf("writeback_batch_splits_total = %v, want 0", v)
	}
}

// poison installs a trigger on the bank's log that refuses a row tagged
// 'poison' with an error outside the permanent list (PostgreSQL RAISE
// EXCEPTION: P0001; MariaDB SIGNAL SQLSTATE '45000': 1644).
func (b *bank) poison() {
	b.t.Helper()
	fn := b.log + "_guard"
	if b.db == "pg" {
		b.exec(fmt.Sprintf(`CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.tag = 'poison' THEN RAISE EXCEPTION 'poison session %%', NEW.n; END IF;
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
  IF NEW.tag = 'poison' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'poison session'; END IF;
END`, fn, b.log))
}

// A session the store keeps rejecting with an error outside the permanent
// list (a trigger's exception) is dead-lettered after maxRetries failed
// batches, as a permanent error would: the sessions before it in its queue
// are applied, its queue stops at it (the sessions behind it wait, in
// order), and other queues go on.
func TestStuckSessionIsDeadLettered(t *testing.T) {
	for _, db := range []string{"pg", "maria"} {
		t.Run(db, func(t *testing.T) {
			b := newBank(t, db, 2, 3, 100)
			b.poison()
			addr := freeAddr(t)
			sc := start(t, b.config(addr, "  maxRetries: 2\n  retryBackoff: 10ms\n", ""), addr)
			ctx := context.Background()
			logInsert := fmt.Sprintf("INSERT INTO %s (branch, n, tag) VALUES (%s, %s, %s)", b.log, b.ph(1), b.ph(2), b.ph(3))
			b.blindTransfer(t, sc, 0, 0, 1, 10) // applied
			s := begin(t, sc)                   // rejected by the trigger, with its transfer
			wantOK(t, "poisoned commit", s.commit(client.Commit{Queue: b.queue(0),
				Statements: append(b.transferStatements(0, 1, 2, 5), client.Statement{SQL: logInsert, Args: []any{0, 1, "poison"}})}))
			b.blindTransfer(t, sc, 0, 2, 0, 3) // waits behind it
			for range 5 {
				b.blindTransfer(t, sc, 1, 0, 1, 1) // another queue: applied
			}

			code := map[string]string{"pg": "P0001", "maria": "1644"}[db]
			var st client.QueueStatus
			waitFor(t, 30*time.Second, "the poisoned queue stopped", func() bool {
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
			if e := st.DeadLetters[0].Error; !strings.Contains(e, "poison session") || !strings.Contains(e, code) {
				t.Errorf("dead letter error %q does not carry the store's error (%s)", e, code)
			}
			waitFor(t, 30*time.Second, "the other queue applied", func() bool { return b.balances()[1][1] == 105 })
			b.wantBalances(t, map[int]map[int]int64{0: {0: 90, 1: 110, 2: 100}, 1: {0: 95, 1: 105, 2: 100}})
			if v := metricValue(t, sc.addr, `writeback_session_deadletters_total{reason="retries"}`); v != 1 {
				t.Errorf(`writeback_session_deadletters_total{reason="retries"} = %v, want 1`, v)
			}
			// Later sessions of other queues flow; the stopped queue keeps
			// its sessions, in order, until it is replayed or dropped.
			b.blindTransfer(t, sc, 1, 2, 0, 7)
			waitFor(t, 30*time.Second, "a later session of the other queue", func() bool { return b.balances()[1][2] == 93 })
			if out, err := cli(t, sc, "sessions", "deadletters", "drop", "--queue", b.queue(0)); err != nil {
				t.Fatalf("drop: %v\n%s", err, out)
			}
			waitFor(t, 30*time.Second, "the session behind the dropped one", func() bool { return b.balances()[0][0] == 93 })
			b.wantBalances(t, map[int]map[int]int64{0: {0: 93, 1: 110, 2: 97}})
		})
	}
}
