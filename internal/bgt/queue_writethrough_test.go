package bgt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/writeback/writeback/internal/session"
	"github.com/writeback/writeback/internal/store"
)

// pendingIn returns how many sessions wait in queue "<family>/<q>".
func (w *queueWorld) pendingIn(t *testing.T, q string) int {
	t.Helper()
	head, err := w.q.Head(context.Background(), w.family+"/"+q, 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	return len(head)
}

// A write-through commit returns only once the store holds its session and
// every session committed before it in its queue, in order; other queues
// are left to the appliers (none run here, so without write-through nothing
// would be applied at all).
func TestQueueWriteThroughCommit(t *testing.T) {
	eachSessionStore(t, func(t *testing.T, driver string) {
		w := newQueueWorld(t, driver, 2)
		w.commit(t, "a", 1, 1) // write-back: pending
		w.commit(t, "a", 1, 2)
		w.commit(t, "a", 1, 3)
		w.commit(t, "b", 2, 7)
		if n := w.pendingIn(t, "a"); n != 3 {
			t.Fatalf("%d sessions pending in queue a before the write-through commit, want 3", n)
		}
		w.svc.Families()[w.family].WriteThrough = true
		res := w.commit(t, "a", 1, 4)
		if res.Seq != 4 {
			t.Errorf("seq %d, want 4 (after the three pending sessions)", res.Seq)
		}
		if v := w.value(t, 1); v != 4 {
			t.Errorf("after the write-through commit returned: v = %d in the store, want 4", v)
		}
		if n := w.pendingIn(t, "a"); n != 0 {
			t.Errorf("%d sessions still pending in queue a, want 0", n)
		}
		if n := w.appliedRows(t); n != 4 {
			t.Errorf("%d applied records, want 4 (each session of queue a exactly once)", n)
		}
		if v, n := w.value(t, 2), w.pendingIn(t, "b"); v != 0 || n != 1 {
			t.Errorf("queue b: v = %d with %d pending, want 0 with 1: another queue is the appliers' business", v, n)
		}
	})
}

// A write-through session the store rejects is committed (its queue stops
// at it, as for any session) and the commit says it is not applied.
func TestQueueWriteThroughRejected(t *testing.T) {
	eachSessionStore(t, func(t *testing.T, driver string) {
		w := newQueueWorld(t, driver, 8)
		w.svc.Families()[w.family].WriteThrough = true
		w.commit(t, "a", 1, 5)
		ctx := context.Background()
		sid, err := w.svc.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		res, err := w.svc.Commit(ctx, sid, session.CommitRequest{
			Queue: w.family + "/a",
			Statements: []store.Statement{{
				SQL:  fmt.Sprintf("UPDATE %s SET v = %s WHERE id = %s", w.table, w.ph(1), w.ph(2)),
				Args: []json.RawMessage{json.RawMessage("-1"), json.RawMessage("1")}, // violates the check
			}},
		})
		var ne *session.NotAppliedError
		if !errors.As(err, &ne) || ne.Seq != 2 || res.Seq != 2 {
			t.Fatalf("commit of a rejected write-through session: %+v, %v; want seq 2 and a NotAppliedError", res, err)
		}
		var qe *session.QueueStoppedError
		if !errors.As(err, &qe) {
			t.Errorf("the cause is %v, want the stopped queue", ne.Err)
		}
		if v := w.value(t, 1); v != 5 {
			t.Errorf("v = %d, want 5", v)
		}
		dls, err := w.q.DeadLetters(ctx, 10)
		if err != nil || len(dls) != 1 || dls[0].Session != sid {
			t.Fatalf("dead letters %+v %v, want the rejected session", dls, err)
		}
	})
}
