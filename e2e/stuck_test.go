package e2e

import (
	"context"
	"testing"
	"time"
)

// poisonCode is, per database, the error code of a poison trigger's
// refusal.
var poisonCode = map[string]string{"pg": "P0001", "maria": "1644"}

// poison installs a trigger on the env's table in both databases that
// refuses any row whose s is 'poison' with an error outside the permanent
// list: PostgreSQL's RAISE EXCEPTION (SQLSTATE P0001), MariaDB's SIGNAL
// SQLSTATE '45000' (error 1644).
func (e *env) poison() {
	e.t.Helper()
	fn := e.table + "_guard"
	e.rowTrigger("pg", fn, `IF NEW.s = 'poison' THEN RAISE EXCEPTION 'poison row %', NEW.id; END IF;`)
	e.rowTrigger("maria", fn, `IF NEW.s = 'poison' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'poison row'; END IF;`)
}

// A change the store keeps rejecting with an error outside the permanent
// list (a trigger's exception) must not stall the documents batched with
// it: after maxRetries failed rounds the batch is split, the one change
// that keeps failing alone becomes a dead letter with the store's error,
// and every other change — of other documents, and the poisoned
// document's own later change, applied after it — reaches the store.
func TestStuckChangeIsDeadLettered(t *testing.T) {
	stuckChange{
		dbs: []string{"pg", "maria"}, docs: 150, bad: "poison",
		code: poisonCode, msg: "poison row", install: (*env).poison,
	}.run(t)
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
	b.logTrigger(b.log+"_guard", `IF NEW.tag = 'poison' THEN RAISE EXCEPTION 'poison session %', NEW.n; END IF;`,
		`IF NEW.tag = 'poison' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'poison session'; END IF;`)
}

// A session the store keeps rejecting with an error outside the permanent
// list (a trigger's exception) is dead-lettered after maxRetries failed
// batches, as a permanent error would: the sessions before it in its queue
// are applied, its queue stops at it (the sessions behind it wait, in
// order), and other queues go on.
func TestStuckSessionIsDeadLettered(t *testing.T) {
	for _, db := range []string{"pg", "maria"} {
		t.Run(db, func(t *testing.T) {
			stuckSession(t, db, "poison", poisonCode[db], "poison session", "", (*bank).poison)
		})
	}
}
