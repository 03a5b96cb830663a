package e2e

import (
	"context"
	"testing"

	"github.com/writeback/writeback/pkg/client"
)

// A session reads two accounts under S leases and commits a transfer; the
// cache shows it at once, the store after the queue is applied.
func TestSessionTransferRoundTrip(t *testing.T) {
	for _, db := range []string{"pg", "maria"} {
		t.Run(db, func(t *testing.T) {
			b := newBank(t, db, 2, 3, 100)
			addr := freeAddr(t)
			sc := start(t, b.config(addr, "", ""), addr)
			ctx := context.Background()
			sid, err := sc.c.BeginSession(ctx)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := sc.c.Cache(ctx, b.acctKey(1, 0), sid, false)
			if err != nil {
				t.Fatalf("read: %v\n%s", err, sc.out())
			}
			a, err := decodeAccount(raw)
			if err != nil || a.Balance != 100 || a.Branch != 1 {
				t.Fatalf("read %s: %+v %v", raw, a, err)
			}
			if _, err := sc.c.Cache(ctx, b.acctKey(1, 2), sid, false); err != nil {
				t.Fatal(err)
			}
			res, err := sc.c.CommitSession(ctx, sid, client.Commit{
				Queue:      b.queue(1),
				Statements: b.transferStatements(1, 0, 2, 30),
				Cache: []client.CacheChange{
					{Key: b.acctKey(1, 0), Patch: map[string]any{"$inc": map[string]any{"balance": -30}}},
					{Key: b.acctKey(1, 2), Patch: map[string]any{"$inc": map[string]any{"balance": 30}}},
				},
			})
			if err != nil {
				t.Fatalf("commit: %v\n%s", err, sc.out())
			}
			if res.Seq != 1 || res.Queue != b.queue(1) {
				t.Errorf("commit result %+v", res)
			}
			raw, err = sc.c.Cache(ctx, b.acctKey(1, 0), "", false)
			if err != nil {
				t.Fatal(err)
			}
			if string(raw) != `{"branch":1,"id":0,"balance":70}` {
				t.Errorf("cache after commit: %s", raw)
			}
			// A miss on the other account applies the queue first.
			if err := b.evict(b.acctKey(1, 2), b.queue(1)); err != nil {
				t.Fatal(err)
			}
			raw, err = sc.c.Cache(ctx, b.acctKey(1, 2), "", false)
			if err != nil {
				t.Fatal(err)
			}
			if a, _ := decodeAccount(raw); a.Balance != 130 {
				t.Errorf("miss after commit: %s", raw)
			}
			res2 := flushQueues(t, sc)
			if !res2.Drained || res2.Pending != 0 {
				t.Errorf("flush: %+v", res2)
			}
			got := b.balances()
			if got[1][0] != 70 || got[1][2] != 130 || got[1][1] != 100 || got[0][0] != 100 {
				t.Errorf("store: %v", got)
			}
			if n := b.appliedSessions(); n != 1 {
				t.Errorf("applied sessions: %d, want 1", n)
			}
		})
	}
}
