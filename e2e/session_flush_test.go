package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestFlushAndStatusIncludeSessions: POST /v1/flush (and `writeback
// flush`) applies pending sessions as well as pending document writes, and
// is not drained while a stopped queue holds sessions; /v1/status (and
// `writeback status`) report the session queues. The appliers poll
// rarely here, so what is applied is applied by the flush.
func TestFlushAndStatusIncludeSessions(t *testing.T) {
	b := newBank(t, "pg", 3, 3, 100)
	addr := freeAddr(t)
	cfg := b.config(addr, "", "")
	raw, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	slow := strings.Replace(string(raw), "ownerLease: 1500ms\n  pollInterval: 10ms", "ownerLease: 60s\n  pollInterval: 10s", 1)
	if slow == string(raw) {
		t.Fatal("the session harness's configuration changed: cannot slow its appliers down")
	}
	if err := os.WriteFile(cfg, []byte(slow), 0o600); err != nil {
		t.Fatal(err)
	}
	sc := start(t, cfg, addr)
	ctx := context.Background()

	b.blindTransfer(t, sc, 2, 0, 1, 7)
	b.blindTransfer(t, sc, 2, 1, 2, 3)
	b.blindTransfer(t, sc, 1, 0, 2, 5)
	st, err := sc.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Sessions == nil || st.Sessions.Pending != 3 || st.Sessions.Queues != 2 || st.Sessions.PinnedBytes <= 0 {
		t.Fatalf("status sessions: %+v; want 3 pending sessions in 2 queues, pinned", st.Sessions)
	}
	out, err := cli(t, sc, "status")
	if err != nil || !strings.Contains(out, "sessions:        3 pending in 2 queues") {
		t.Fatalf("writeback status: %v\n%s", err, out)
	}
	out, err = cli(t, sc, "flush", "--timeout", "20s")
	if err != nil || !strings.Contains(out, "applied 3 sessions; 0 pending, 0 stopped queues\ndrained\n") {
		t.Fatalf("writeback flush: %v\n%s", err, out)
	}
	b.wantBalances(t, map[int]map[int]int64{1: {0: 95, 1: 100, 2: 105}, 2: {0: 93, 1: 104, 2: 103}})

	// A rejected session stops its queue: the flush applies what it can
	// and says it is not drained.
	b.blindTransfer(t, sc, 0, 0, 1, 500) // balance would be -400: CHECK violation
	b.blindTransfer(t, sc, 0, 1, 2, 1)   // waits behind it
	b.blindTransfer(t, sc, 1, 1, 0, 1)   // another queue: applied
	res, err := sc.c.Flush(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Drained || res.Sessions == nil || res.Sessions.Stopped != 1 || res.Sessions.Pending != 2 || res.Sessions.Applied != 1 {
		t.Fatalf("flush: %+v sessions %+v; want not drained, 1 applied, 1 stopped queue holding 2", res, res.Sessions)
	}
	out, err = cli(t, sc, "flush", "--timeout", "5s")
	if err == nil || !strings.Contains(out, "1 queue is stopped by a session the store rejected") {
		t.Fatalf("writeback flush with a stopped queue: %v, want exit 1\n%s", err, out)
	}
	st, err = sc.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Sessions == nil || st.Sessions.StoppedQueues != 1 || st.Sessions.Pending != 2 {
		t.Fatalf("status sessions: %+v; want 1 stopped queue holding 2 sessions", st.Sessions)
	}
}

// TestSessionsCountTowardPinnedLimit: pending sessions count toward
// writeback.pinnedMemoryLimit, and while pinned memory is over it, commits
// of write-back queue families write through (applied before the answer),
// until a flush brings it back below 80 % of the limit.
func TestSessionsCountTowardPinnedLimit(t *testing.T) {
	b := newBank(t, "pg", 3, 3, 1000)
	addr := freeAddr(t)
	cfg := b.config(addr, "  pinnedMemoryLimit: 3000", "")
	raw, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	slow := strings.Replace(string(raw), "ownerLease: 1500ms\n  pollInterval: 10ms", "ownerLease: 60s\n  pollInterval: 10s", 1)
	if err := os.WriteFile(cfg, []byte(slow), 0o600); err != nil {
		t.Fatal(err)
	}
	sc := start(t, cfg, addr)
	ctx := context.Background()
	pending := func() int64 {
		t.Helper()
		st, err := sc.c.Status(ctx)
		if err != nil || st.Sessions == nil {
			t.Fatalf("status: %v %+v", err, st)
		}
		return st.Sessions.Pending
	}

	// Below the limit: write-back, the sessions stay pending.
	n := int64(0)
	for {
		b.blindTransfer(t, sc, 0, 0, 1, 1)
		n++
		st, err := sc.c.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Sessions.Pending != n {
			t.Fatalf("%d sessions pending after %d write-back commits", st.Sessions.Pending, n)
		}
		if st.Sessions.PinnedBytes > 3000 {
			break
		}
		if n > 200 {
			t.Fatalf("%d sessions pin only %d bytes", n, st.Sessions.PinnedBytes)
		}
	}
	if got := b.balances()[0][1]; got != 1000 {
		t.Fatalf("account 0/1 is %d while its sessions are pending, want 1000", got)
	}
	// Over it: within the watcher's period, commits are applied before
	// they are answered.
	want := int64(1000)
	waitFor(t, 5*time.Second, "a commit applied before its answer", func() bool {
		b.blindTransfer(t, sc, 1, 0, 1, 1)
		want++
		return b.balances()[1][1] == want
	})
	b.blindTransfer(t, sc, 1, 0, 1, 1)
	if got := b.balances()[1][1]; got != want+1 {
		t.Fatalf("account 1/1 is %d after a commit over the limit, want %d", got, want+1)
	}
	if got := pending(); got != n {
		t.Fatalf("%d sessions pending, want the %d of queue 0 only", got, n)
	}

	// A flush drains the queues: write-back again.
	if out, err := cli(t, sc, "flush", "--timeout", "20s"); err != nil {
		t.Fatalf("flush: %v\n%s", err, out)
	}
	waitFor(t, 5*time.Second, "commits that stay pending", func() bool {
		b.blindTransfer(t, sc, 2, 0, 1, 1)
		return pending() > 0
	})
}
