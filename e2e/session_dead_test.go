package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/writeback/writeback/pkg/client"
)

// blindTransfer commits a transfer without reading (no leases to lose).
func (b *bank) blindTransfer(t *testing.T, sc *sidecar, branch, from, to int, amt int64) {
	t.Helper()
	s := begin(t, sc)
	wantOK(t, fmt.Sprintf("transfer %d→%d of %d in branch %d", from, to, amt, branch), s.commit(client.Commit{
		Queue: b.queue(branch), Statements: b.transferStatements(branch, from, to, amt),
		Cache: []client.CacheChange{b.patchBalance(branch, from, -amt), b.patchBalance(branch, to, amt)},
	}))
}

// cli runs the writeback binary's command line against a sidecar.
func cli(t *testing.T, sc *sidecar, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(binary, append(args, "--addr", "http://"+sc.addr)...).CombinedOutput()
	return string(out), err
}

func (b *bank) wantBalances(t *testing.T, want map[int]map[int]int64) {
	t.Helper()
	got := b.balances()
	for br, ids := range want {
		for id, v := range ids {
			if got[br][id] != v {
				t.Errorf("%s account %d/%d: %d, want %d", b.db, br, id, got[br][id], v)
			}
		}
	}
}

// Acceptance 4: a session whose statement the store rejects (a CHECK
// violation) is dead-lettered with the store's error; its queue stops and
// says so — the sessions behind it wait, reads that need them answer 503 —
// while other queues go on. The CLI lists it, replays it after the cause
// is fixed, or drops it.
func TestSessionDeadLetters(t *testing.T) {
	for _, db := range []string{"pg", "maria"} {
		t.Run(db, func(t *testing.T) {
			b := newBank(t, db, 3, 3, 100)
			addr := freeAddr(t)
			sc := start(t, b.config(addr, "", ""), addr)
			ctx := context.Background()
			b.blindTransfer(t, sc, 0, 0, 1, 10)   // applied
			b.blindTransfer(t, sc, 0, 1, 2, 500)  // rejected: balance would be -390
			b.blindTransfer(t, sc, 0, 2, 0, 5)    // waits behind it
			b.blindTransfer(t, sc, 1, 0, 1, 1000) // rejected
			b.blindTransfer(t, sc, 1, 1, 2, 3)    // waits behind it
			b.blindTransfer(t, sc, 2, 0, 1, 7)    // another queue: applied

			res := flushQueues(t, sc)
			if res.Stopped != 2 || res.Pending != 4 {
				t.Fatalf("flush: %+v; want 2 stopped queues holding 4 sessions", res)
			}
			b.wantBalances(t, map[int]map[int]int64{0: {0: 90, 1: 110, 2: 100}, 1: {0: 100, 1: 100, 2: 100}, 2: {0: 93, 1: 107, 2: 100}})
			// Other queues go on.
			b.blindTransfer(t, sc, 2, 1, 2, 1)
			flushQueues(t, sc)
			b.wantBalances(t, map[int]map[int]int64{2: {0: 93, 1: 106, 2: 101}})

			st, err := sc.c.Queues(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.StoppedQueues != 2 || len(st.DeadLetters) != 2 {
				t.Fatalf("status: %+v", st)
			}
			for _, d := range st.DeadLetters {
				if d.Queue != b.queue(0) && d.Queue != b.queue(1) {
					t.Errorf("dead letter of queue %s", d.Queue)
				}
				if !strings.Contains(strings.ToLower(d.Error), "check") && !strings.Contains(d.Error, "23514") && !strings.Contains(d.Error, "4025") {
					t.Errorf("dead letter error %q does not name the check violation", d.Error)
				}
			}
			waitFor(t, 5*time.Second, "writeback_stopped_queues = 2", func() bool {
				return metricValue(t, sc.addr, "writeback_stopped_queues") == 2
			})
			// The rejected session's entries are dropped, and a miss on them
			// needs the stopped queue: 503, saying why.
			_, err = sc.c.Cache(ctx, b.acctKey(0, 1), "", false)
			if !client.IsUnavailable(err) || !strings.Contains(err.Error(), "stopped") {
				t.Errorf("read of an account the rejected session changed: %v, want 503 naming the stopped queue", err)
			}
			if _, err := sc.c.Cache(ctx, b.acctKey(2, 0), "", false); err != nil {
				t.Errorf("read in another queue: %v", err)
			}

			out, err := cli(t, sc, "sessions", "deadletters", "list")
			if err != nil || !strings.Contains(out, b.queue(0)) || !strings.Contains(out, b.queue(1)) {
				t.Fatalf("deadletters list: %v\n%s", err, out)
			}
			// Replaying before the cause is fixed stops the queue again.
			if out, err := cli(t, sc, "sessions", "deadletters", "replay", "--queue", b.queue(0)); err != nil {
				t.Fatalf("replay: %v\n%s", err, out)
			}
			if res := flushQueues(t, sc); res.Stopped != 2 {
				t.Errorf("after a replay without a fix: %+v, want the queue stopped again", res)
			}
			// Fix the cause, then replay: the session and the one behind it
			// are applied in order.
			b.exec(fmt.Sprintf("UPDATE %s SET balance = balance + 1000 WHERE branch = 0 AND id = 1", b.account))
			if out, err := cli(t, sc, "sessions", "deadletters", "replay", "--queue", b.queue(0)); err != nil || !strings.Contains(out, "restarted 1 queue") {
				t.Fatalf("replay: %v\n%s", err, out)
			}
			// Drop the other one: the session behind it is applied.
			if out, err := cli(t, sc, "sessions", "deadletters", "drop", "--queue", b.queue(1)); err != nil || !strings.Contains(out, "1 queue") {
				t.Fatalf("drop: %v\n%s", err, out)
			}
			if out, err := cli(t, sc, "sessions", "flush"); err != nil {
				t.Fatalf("sessions flush: %v\n%s", err, out)
			}
			b.wantBalances(t, map[int]map[int]int64{0: {0: 95, 1: 610, 2: 595}, 1: {0: 100, 1: 97, 2: 103}, 2: {0: 93, 1: 106, 2: 101}})
			for br, ids := range map[int][]int{0: {0, 1, 2}, 1: {0, 1, 2}} {
				for _, id := range ids {
					raw, err := sc.c.Cache(ctx, b.acctKey(br, id), "", false)
					if err != nil {
						t.Fatal(err)
					}
					if a, _ := decodeAccount(raw); a.Balance != b.balances()[br][id] {
						t.Errorf("account %d/%d reads %s after the queue restarted", br, id, raw)
					}
				}
			}
			if out, err := cli(t, sc, "sessions", "status"); err != nil || !strings.Contains(out, "stopped queues") {
				t.Errorf("sessions status: %v\n%s", err, out)
			}
		})
	}
}

// Bad input: statements that are not parameterised INSERT/UPDATE/DELETE of
// a declared table, keys of another queue, malformed bodies are refused
// with a 400 and a sentence, before anything is buffered; the session
// stays usable.
func TestSessionBadInput(t *testing.T) {
	b := newBank(t, "pg", 2, 2, 100)
	addr := freeAddr(t)
	sc := start(t, b.config(addr, "", ""), addr)
	ctx := context.Background()
	s := begin(t, sc)
	upd := fmt.Sprintf("UPDATE %s SET balance = balance + $1 WHERE branch = $2 AND id = $3", b.account)
	cases := []struct {
		name string
		c    client.Commit
		msg  string
	}{
		{"select", client.Commit{Queue: b.queue(0), Statements: []client.Statement{{SQL: "SELECT * FROM " + b.account}}}, "SELECT statements are not allowed"},
		{"undeclared table", client.Commit{Queue: b.queue(0), Statements: []client.Statement{{SQL: "DELETE FROM pg_class WHERE oid = $1", Args: []any{1}}}}, "is not declared for this queue"},
		{"string literal", client.Commit{Queue: b.queue(0), Statements: []client.Statement{{SQL: fmt.Sprintf("UPDATE %s SET balance = 'x'", b.account)}}}, "string literal"},
		{"two statements", client.Commit{Queue: b.queue(0), Statements: []client.Statement{{SQL: upd + "; DROP TABLE x", Args: []any{1, 0, 0}}}}, "more than one statement"},
		{"argument count", client.Commit{Queue: b.queue(0), Statements: []client.Statement{{SQL: upd, Args: []any{1}}}}, "3 placeholders and 1 arguments"},
		{"no queue", client.Commit{Statements: []client.Statement{{SQL: upd, Args: []any{1, 0, 0}}}}, "must name its queue"},
		{"unknown family", client.Commit{Queue: "nope/1", Statements: []client.Statement{{SQL: upd, Args: []any{1, 0, 0}}}}, "is not configured"},
		{"key of another queue", client.Commit{Queue: b.queue(0), Cache: []client.CacheChange{b.patchBalance(1, 0, 1)}}, "belongs to queue"},
		{"unmapped key", client.Commit{Queue: b.queue(0), Affects: []string{"nothing:1"}}, "no mapping matches"},
		{"two changes of a key", client.Commit{Queue: b.queue(0), Cache: []client.CacheChange{{Key: b.acctKey(0, 0), Delete: true, Set: 1}}}, "exactly one of"},
		{"bad operator", client.Commit{Queue: b.queue(0), Cache: []client.CacheChange{{Key: b.acctKey(0, 0), Patch: map[string]any{"$mul": map[string]any{"balance": 2}}}}}, "unknown operator"},
	}
	for _, tc := range cases {
		_, err := sc.c.CommitSession(ctx, s.id, tc.c)
		if !client.IsInvalid(err) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want a 400 containing %q", tc.name, err, tc.msg)
		}
	}
	_, err := sc.c.CommitSession(ctx, "00000000000000000000000000000000", client.Commit{})
	if !client.IsNotFound(err) {
		t.Errorf("commit of an unknown session: %v, want 404", err)
	}
	if _, err := sc.c.Cache(ctx, "nothing:1", "", false); !client.IsNotFound(err) {
		t.Errorf("read of an unmapped key: %v, want 404", err)
	}
	if _, err := sc.c.Cache(ctx, b.acctKey(0, 9), "", false); !client.IsNotFound(err) {
		t.Errorf("read of a key with no row: %v, want 404", err)
	}
	st, err := sc.c.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.PendingSessions != 0 || st.PinnedBytes != 0 {
		t.Errorf("after refused commits: %+v; want nothing buffered", st)
	}
	// The session survived its bad commits.
	wantOK(t, "a good commit after bad ones", s.commit(client.Commit{Queue: b.queue(0), Statements: b.transferStatements(0, 0, 1, 1)}))
}
