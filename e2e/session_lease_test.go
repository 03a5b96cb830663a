package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/writeback/writeback/pkg/client"
)

// sess is one client session against a sidecar.
type sess struct {
	t  *testing.T
	c  *client.Client
	id string
}

func begin(t *testing.T, sc *sidecar) *sess {
	t.Helper()
	id, err := sc.c.BeginSession(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return &sess{t: t, c: sc.c, id: id}
}

func (s *sess) read(key string) (json []byte, err error) {
	return s.c.Cache(context.Background(), key, s.id, false)
}

func (s *sess) readX(key string) ([]byte, error) {
	return s.c.Cache(context.Background(), key, s.id, true)
}

func (s *sess) commit(cm client.Commit) error {
	_, err := s.c.CommitSession(context.Background(), s.id, cm)
	return err
}

// wantOK fails unless err is nil.
func wantOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// wantAborted fails unless err is a 409 naming conflict (any when "").
func wantAborted(t *testing.T, what string, err error, conflict string) {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) || ce.StatusCode != 409 || ce.Code != client.CodeAborted {
		t.Fatalf("%s: %v, want 409 aborted", what, err)
	}
	if conflict != "" && !strings.Contains(ce.Message, conflict) {
		t.Fatalf("%s: %q does not name %s", what, ce.Message, conflict)
	}
	if ce.RetryAfter <= 0 {
		t.Errorf("%s: no Retry-After", what)
	}
}

// patchBalance is a cache change adding d to an account's balance.
func (b *bank) patchBalance(branch, id int, d int64) client.CacheChange {
	return client.CacheChange{Key: b.acctKey(branch, id), Patch: map[string]any{"$inc": map[string]any{"balance": d}}}
}

// Acceptance 3: every cell of Table 1 over HTTP (S on S, S on X, X on S,
// X on golden S, X on X; the S on X and X on X cells wait for the older
// holder instead of aborting, issue 19), wound-wait (an X voids a non-golden S and the
// reader's commit aborts), a golden S blocks a writer's commit until the
// reader commits, and an expired lease left by a killed client deletes the
// entry it guarded so that the next read recomputes it.
func TestSessionLeases(t *testing.T) {
	b := newBank(t, "pg", 2, 4, 100)
	b.lease = "400ms"
	addr := freeAddr(t)
	sc := start(t, b.config(addr, "", ""), addr)
	k := b.acctKey(0, 0)

	t.Run("S on S: granted", func(t *testing.T) {
		a, c := begin(t, sc), begin(t, sc)
		_, err := a.read(k)
		wantOK(t, "A reads", err)
		_, err = c.read(k)
		wantOK(t, "B reads", err)
		wantOK(t, "A commits", a.commit(client.Commit{}))
		wantOK(t, "B commits", c.commit(client.Commit{}))
	})
	// waits runs read, which must queue for k's lease, then release; the
	// read must succeed once release let it in.
	waits := func(t *testing.T, what string, key string, read func() ([]byte, error), release func()) {
		t.Helper()
		done := make(chan error, 1)
		go func() { _, err := read(); done <- err }()
		wait := strings.Replace(b.entryKey(key, b.queue(0)), ":c:", ":w:", 1)
		waitFor(t, 5*time.Second, what+" to queue", func() bool { return b.redis.Exists(context.Background(), wait).Val() == 1 })
		release()
		select {
		case err := <-done:
			wantOK(t, what, err)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: still waiting after the holder released", what)
		}
	}
	t.Run("S on X: waits for the older X", func(t *testing.T) {
		a, c := begin(t, sc), begin(t, sc)
		_, err := a.readX(k)
		wantOK(t, "A reads for update", err)
		waits(t, "B reads under A's X", k, func() ([]byte, error) { return c.read(k) },
			func() { wantOK(t, "A commits", a.commit(client.Commit{})) })
		wantOK(t, "B commits", c.commit(client.Commit{}))
	})
	t.Run("X on S: granted, voids the S", func(t *testing.T) {
		a, c := begin(t, sc), begin(t, sc)
		_, err := a.read(k)
		wantOK(t, "A reads", err)
		_, err = c.readX(k)
		wantOK(t, "B reads for update", err)
		wantAborted(t, "A commits after B wounded it", a.commit(client.Commit{}), "voided")
		wantOK(t, "B commits", c.commit(client.Commit{}))
	})
	t.Run("X on golden S: abort", func(t *testing.T) {
		a, c := begin(t, sc), begin(t, sc)
		_, err := a.read(k)
		wantOK(t, "A reads", err)
		wantOK(t, "A validates", a.c.ValidateSession(context.Background(), a.id))
		_, err = c.readX(k)
		wantAborted(t, "B reads for update a golden key", err, "x_on_golden_s")
		wantOK(t, "A commits", a.commit(client.Commit{}))
	})
	t.Run("X on X: waits for the older X", func(t *testing.T) {
		a, c := begin(t, sc), begin(t, sc)
		_, err := a.readX(k)
		wantOK(t, "A reads for update", err)
		waits(t, "B reads for update", k, func() ([]byte, error) { return c.readX(k) },
			func() { wantOK(t, "A commits", a.commit(client.Commit{})) })
		wantOK(t, "B commits", c.commit(client.Commit{}))
	})
	t.Run("X on a younger X: wounds it", func(t *testing.T) {
		a, c := begin(t, sc), begin(t, sc)
		_, err := c.readX(k)
		wantOK(t, "B (younger) reads for update", err)
		_, err = a.readX(k)
		wantOK(t, "A (older) reads for update, wounding B", err)
		wantAborted(t, "B commits after A wounded it", c.commit(client.Commit{}), "voided")
		wantOK(t, "A commits", a.commit(client.Commit{}))
	})

	t.Run("wound-wait: a writer's commit aborts the reader", func(t *testing.T) {
		a, w := begin(t, sc), begin(t, sc)
		_, err := a.read(b.acctKey(0, 1))
		wantOK(t, "A reads", err)
		// W transfers out of the account A read, without reading it.
		wantOK(t, "W commits", w.commit(client.Commit{Queue: b.queue(0), Statements: b.transferStatements(0, 1, 2, 5),
			Cache: []client.CacheChange{b.patchBalance(0, 1, -5), b.patchBalance(0, 2, 5)}}))
		err = a.commit(client.Commit{Queue: b.queue(0), Statements: b.transferStatements(0, 1, 3, 50),
			Cache: []client.CacheChange{b.patchBalance(0, 1, -50), b.patchBalance(0, 3, 50)}})
		wantAborted(t, "A commits on a value W changed", err, "voided")
	})

	t.Run("golden S blocks a writer's commit", func(t *testing.T) {
		a, w := begin(t, sc), begin(t, sc)
		// A reads an account W will change and validates: its S lease is
		// golden.
		key := b.acctKey(0, 3)
		_, err := a.read(key)
		wantOK(t, "A reads", err)
		wantOK(t, "A validates", a.c.ValidateSession(context.Background(), a.id))
		err = w.commit(client.Commit{Queue: b.queue(0), Statements: b.transferStatements(0, 3, 2, 1),
			Cache: []client.CacheChange{b.patchBalance(0, 3, -1), b.patchBalance(0, 2, 1)}})
		wantAborted(t, "W commits a key A holds golden", err, "x_on_golden_s")
		wantOK(t, "A commits", a.commit(client.Commit{}))
		w2 := begin(t, sc)
		wantOK(t, "W retries after A committed", w2.commit(client.Commit{Queue: b.queue(0), Statements: b.transferStatements(0, 3, 2, 1),
			Cache: []client.CacheChange{b.patchBalance(0, 3, -1), b.patchBalance(0, 2, 1)}}))
	})

	t.Run("reads of another queue's keys are validated at commit", func(t *testing.T) {
		other := b.acctKey(1, 3) // queue 1; the commits below go to queue 0
		a := begin(t, sc)
		_, err := a.read(other)
		wantOK(t, "A reads", err)
		wantOK(t, "A commits into queue 0", a.commit(client.Commit{Queue: b.queue(0), Statements: b.transferStatements(0, 0, 1, 4),
			Cache: []client.CacheChange{b.patchBalance(0, 0, -4), b.patchBalance(0, 1, 4)}}))
		a2, w := begin(t, sc), begin(t, sc)
		_, err = a2.read(other)
		wantOK(t, "A2 reads", err)
		wantOK(t, "W changes it in queue 1", w.commit(client.Commit{Queue: b.queue(1), Statements: b.transferStatements(1, 3, 2, 2),
			Cache: []client.CacheChange{b.patchBalance(1, 3, -2), b.patchBalance(1, 2, 2)}}))
		err = a2.commit(client.Commit{Queue: b.queue(0), Statements: b.transferStatements(0, 0, 1, 4),
			Cache: []client.CacheChange{b.patchBalance(0, 0, -4), b.patchBalance(0, 1, 4)}})
		wantAborted(t, "A2 commits after W wounded its read", err, "voided")
	})

	t.Run("expired lease of a killed client deletes its entry", func(t *testing.T) {
		key := b.acctKey(1, 0)
		dead := begin(t, sc)
		_, err := dead.readX(key)
		wantOK(t, "the client reads for update", err)
		// The client half-updates the entry and is killed: it never
		// commits nor aborts. (The sidecar's own commits change entries
		// atomically; a client of the lease library could die half way.)
		if err := b.redis.Set(context.Background(), b.entryKey(key, b.queue(1)), `{"branch":1,"id":0,"balance":999999}`, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		// A reader while the X lease lives waits for it to expire (400ms,
		// within the 1s lease wait), then reads the recomputed value.
		r2 := begin(t, sc)
		raw, err := r2.read(key)
		wantOK(t, "a reader that waited for the lease to expire", err)
		if a, _ := decodeAccount(raw); a.Balance != 100 {
			t.Errorf("read %s after the expiry; want the store's balance 100, not the half-updated entry", raw)
		}
		wantOK(t, "commit", r2.commit(client.Commit{}))
	})

	t.Run("expired golden S of a killed client stops blocking writers", func(t *testing.T) {
		key := b.acctKey(1, 1)
		dead := begin(t, sc)
		_, err := dead.read(key)
		wantOK(t, "the client reads", err)
		wantOK(t, "the client validates, then is killed", dead.c.ValidateSession(context.Background(), dead.id))
		time.Sleep(500 * time.Millisecond)
		w := begin(t, sc)
		wantOK(t, "a writer after the golden lease expired", w.commit(client.Commit{Queue: b.queue(1), Statements: b.transferStatements(1, 1, 2, 7),
			Cache: []client.CacheChange{b.patchBalance(1, 1, -7), b.patchBalance(1, 2, 7)}}))
	})

	res := flushQueues(t, sc)
	if !res.Drained || res.Stopped != 0 {
		t.Fatalf("flush: %+v", res)
	}
	got := b.balances()
	want := map[int]map[int]int64{0: {0: 96, 1: 99, 2: 106, 3: 99}, 1: {0: 100, 1: 93, 2: 109, 3: 98}}
	for br, ids := range want {
		for id, v := range ids {
			if got[br][id] != v {
				t.Errorf("account %d/%d: %d, want %d", br, id, got[br][id], v)
			}
		}
	}
}
