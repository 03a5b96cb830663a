package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/writeback/writeback/pkg/client"
)

// seqSession is what a client knows of one session it committed: which
// sequence number it wrote to its branch's log, and the transfer it made.
type seqSession struct {
	bank     *bank
	branch   int
	n        int64
	from, to int
	amt      int64
}

// seqTransfer runs one session: it reads its branch's sequence n and two
// accounts under S leases and commits the transfer together with
// "sequence := n+1" and a log row (branch, n+1, tag). Every session of a
// branch reads and writes the sequence, so the leases serialize them; the
// log then shows the order the store applied them in, and a session
// applied twice, lost or out of order breaks 1, 2, 3 … .
func (b *bank) seqTransfer(ctx context.Context, c *client.Client, rng *rand.Rand, branch int, tag string) (seqSession, error) {
	s := seqSession{bank: b, branch: branch, from: rng.IntN(b.accounts)}
	s.to = (s.from + 1 + rng.IntN(b.accounts-1)) % b.accounts
	sid, err := c.BeginSession(ctx)
	if err != nil {
		return s, err
	}
	raw, err := c.Cache(ctx, b.seqKey(branch), sid, false)
	if err != nil {
		return s, err
	}
	var seq struct{ N int64 }
	if err := json.Unmarshal(raw, &seq); err != nil {
		return s, fmt.Errorf("sequence reads %s: %v", raw, err)
	}
	s.n = seq.N + 1
	raw, err = c.Cache(ctx, b.acctKey(branch, s.from), sid, false)
	if err != nil {
		return s, err
	}
	a, err := decodeAccount(raw)
	if err != nil {
		return s, err
	}
	if a.Balance > 0 {
		s.amt = 1 + rng.Int64N(min(a.Balance, 20))
	}
	stmts := b.transferStatements(branch, s.from, s.to, s.amt)
	stmts = append(stmts,
		client.Statement{SQL: fmt.Sprintf("UPDATE %s SET n = %s WHERE branch = %s", b.qseq, b.ph(1), b.ph(2)), Args: []any{s.n, branch}},
		client.Statement{SQL: fmt.Sprintf("INSERT INTO %s (branch, n, tag) VALUES (%s, %s, %s)", b.log, b.ph(1), b.ph(2), b.ph(3)), Args: []any{branch, s.n, tag}},
	)
	_, err = c.CommitSession(ctx, sid, client.Commit{
		Queue:      b.queue(branch),
		Statements: stmts,
		Cache: []client.CacheChange{
			{Key: b.seqKey(branch), Set: map[string]any{"n": s.n}},
			{Key: b.acctKey(branch, s.from), Patch: map[string]any{"$inc": map[string]any{"balance": -s.amt}}},
			{Key: b.acctKey(branch, s.to), Patch: map[string]any{"$inc": map[string]any{"balance": s.amt}}},
		},
	})
	return s, err
}

// logRows reads a branch's log in the order the store applied it.
func (b *bank) logRows(branch int) []struct {
	n   int64
	tag string
} {
	b.t.Helper()
	rows, err := b.conn.Query(fmt.Sprintf("SELECT n, tag FROM %s WHERE branch = %d ORDER BY pos", b.log, branch))
	if err != nil {
		b.t.Fatal(err)
	}
	defer rows.Close()
	var out []struct {
		n   int64
		tag string
	}
	for rows.Next() {
		var r struct {
			n   int64
			tag string
		}
		if err := rows.Scan(&r.n, &r.tag); err != nil {
			b.t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// checkSeqModel checks a bank after the flush: per branch, the log holds
// 1, 2, … K in the order applied (none twice, none lost, none out of
// order), the sequence is K, every acknowledged session is there with its
// number, nothing else is; balances are the initial ones plus the
// transfers of exactly the sessions in the log.
func checkSeqModel(t *testing.T, b *bank, acked, uncertain map[string]seqSession, final *sidecar) {
	t.Helper()
	delta := map[[2]int]int64{}
	seen := map[string]bool{}
	applied := 0
	for br := range b.branches {
		rows := b.logRows(br)
		for i, r := range rows {
			if r.n != int64(i+1) {
				t.Errorf("%s branch %d: log position %d holds n = %d, want %d (a session applied twice, lost or out of order)", b.db, br, i+1, r.n, i+1)
				break
			}
			if seen[r.tag] {
				t.Errorf("%s branch %d: session %s applied twice", b.db, br, r.tag)
			}
			seen[r.tag] = true
			s, ok := acked[r.tag]
			if !ok {
				s, ok = uncertain[r.tag]
			}
			if !ok || s.bank != b || s.branch != br {
				t.Errorf("%s branch %d: log row %s belongs to no session of this branch", b.db, br, r.tag)
				continue
			}
			if s.n != r.n {
				t.Errorf("%s branch %d: session %s wrote n = %d, the log has %d", b.db, br, r.tag, s.n, r.n)
			}
			delta[[2]int{br, s.from}] -= s.amt
			delta[[2]int{br, s.to}] += s.amt
			applied++
		}
		var n int64
		if err := b.conn.QueryRow(fmt.Sprintf("SELECT n FROM %s WHERE branch = %d", b.qseq, br)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != int64(len(rows)) {
			t.Errorf("%s branch %d: sequence %d, log length %d", b.db, br, n, len(rows))
		}
	}
	for tag, s := range acked {
		if s.bank == b && !seen[tag] {
			t.Errorf("%s: acknowledged session %s (branch %d, n %d) was lost", b.db, tag, s.branch, s.n)
		}
	}
	got := b.balances()
	var total int64
	for br := range b.branches {
		for id := range b.accounts {
			want := b.initial + delta[[2]int{br, id}]
			if got[br][id] != want {
				t.Errorf("%s account %d/%d: %d, want %d", b.db, br, id, got[br][id], want)
			}
			total += got[br][id]
			raw, err := final.c.Cache(context.Background(), b.acctKey(br, id), "", false)
			if err != nil {
				t.Fatal(err)
			}
			if a, _ := decodeAccount(raw); a.Balance != got[br][id] {
				t.Errorf("%s account %d/%d: the sidecar reads %s, the store has %d", b.db, br, id, raw, got[br][id])
			}
		}
	}
	if want := b.initial * int64(b.branches*b.accounts); total != want {
		t.Errorf("%s: total %d, want %d", b.db, total, want)
	}
	t.Logf("%s: %d sessions applied", b.db, applied)
}

// Acceptance 2: the sidecar is SIGKILLed 22 times under a session workload
// on both databases — at random moments and at armed fault points:
// between the store commit and the queue pop, before the store commit,
// between the commit in Redis and the answer — and restarted. After a
// final flush: no session applied twice, none acknowledged lost, each
// branch's sessions applied in commit order (the log's sequence).
func TestSessionCrashRecovery(t *testing.T) {
	const branches, accounts, clients, kills = 3, 6, 8, 22
	banks := []*bank{newBank(t, "pg", branches, accounts, 100), newBank(t, "maria", branches, accounts, 100)}
	addr := freeAddr(t)
	cfg := sessionConfig(t, addr, "", "", banks...)
	faults := []string{"", "bgt.queue-after-commit:1-6", "", "bgt.queue-before-commit:1-6", "session.after-commit:2-20", "bgt.queue-after-commit:1-3"}
	cr := newCrashing(t, cfg, addr)
	current := cr.current

	var mu sync.Mutex // guards acked, uncertain and the counters
	acked, uncertain := map[string]seqSession{}, map[string]seqSession{}
	var aborts, refused int
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 77))
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				b := banks[rng.IntN(len(banks))]
				tag := fmt.Sprintf("c%d-%d", c, k)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				s, err := b.seqTransfer(ctx, current().c, rng, rng.IntN(branches), tag)
				cancel()
				mu.Lock()
				switch {
				case err == nil:
					acked[tag] = s
				case client.IsAborted(err):
					aborts++
				case s.n == 0 || neverSent(err) || client.IsNotFound(err):
					refused++ // failed before the commit was sent
				default:
					uncertain[tag] = s
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(time.Duration(1+rng.IntN(10)) * time.Millisecond)
				}
			}
		}()
	}
	rng := rand.New(rand.NewPCG(5, 6))
	atFault := 0
	for k := range kills {
		time.Sleep(time.Duration(200+rng.IntN(400)) * time.Millisecond)
		if cr.restart(faults[k%len(faults)]) {
			atFault++ // it killed itself at its armed fault point
		}
	}
	close(stop)
	wg.Wait()
	final := cr.final()
	if res := flushQueues(t, final); !res.Drained || res.Pending != 0 || res.Stopped != 0 {
		t.Fatalf("flush: %+v\n%s", res, final.out())
	}
	t.Logf("%d kills (%d at an armed fault point); sessions: %d acknowledged, %d uncertain, %d aborted and retried, %d refused while down",
		kills, atFault, len(acked), len(uncertain), aborts, refused)
	if atFault == 0 {
		t.Error("no sidecar died at an armed fault point")
	}
	if len(acked) < 150 {
		t.Errorf("only %d sessions acknowledged; the workload barely ran", len(acked))
	}
	for _, b := range banks {
		checkSeqModel(t, b, acked, uncertain, final)
	}
}

// Acceptance 2, deliberate case: the sidecar dies after the store
// committed a batch of sessions and before it popped them from the queue.
// The restarted sidecar finds them in writeback_applied_sessions, skips
// them and pops them: each is applied once.
func TestSessionCrashBetweenCommitAndPop(t *testing.T) {
	for _, db := range []string{"pg", "maria"} {
		t.Run(db, func(t *testing.T) {
			b := newBank(t, db, 1, 4, 1000)
			addr := freeAddr(t)
			cfg := b.config(addr, "", "")
			sc := startArmed(t, cfg, addr, "WRITEBACK_FAULTS=bgt.queue-after-commit:1")
			ctx := context.Background()
			model := map[int]int64{}
			var maybe map[int]int64 // a commit whose answer was lost: applied or not
			for i := range 40 {
				from, to := i%4, (i+1)%4
				amt := int64(i + 1)
				sid, err := sc.c.BeginSession(ctx)
				if err == nil {
					_, err = sc.c.CommitSession(ctx, sid, client.Commit{
						Queue:      b.queue(0),
						Statements: b.transferStatements(0, from, to, amt),
						Affects:    []string{b.acctKey(0, from), b.acctKey(0, to)},
					})
				}
				if err != nil {
					if !neverSent(err) {
						maybe = map[int]int64{from: -amt, to: amt}
					}
					break
				}
				model[from] -= amt
				model[to] += amt
			}
			waitFor(t, 10*time.Second, "the sidecar to die after its first store commit", sc.exited)
			sc2 := start(t, cfg, addr)
			if res := flushQueues(t, sc2); !res.Drained || res.Pending != 0 {
				t.Fatalf("flush: %+v", res)
			}
			got := b.balances()
			ids := make([]int, 0, 4)
			for id := range got[0] {
				ids = append(ids, id)
			}
			sort.Ints(ids)
			match := func(extra map[int]int64) bool {
				for _, id := range ids {
					if got[0][id] != 1000+model[id]+extra[id] {
						return false
					}
				}
				return true
			}
			if !match(nil) && (maybe == nil || !match(maybe)) {
				t.Errorf("balances %v, want 1000 + %v (+ possibly %v): a replayed session was applied twice or lost", got[0], model, maybe)
			}
			if skipped := metricValue(t, sc2.addr, "writeback_session_duplicates_skipped_total"); skipped < 1 {
				t.Errorf("writeback_session_duplicates_skipped_total = %v after replaying a committed batch; want > 0", skipped)
			}
		})
	}
}
