package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeback/writeback/pkg/client"
)

// bankStats counts what the bank clients did.
type bankStats struct {
	transfers, aborts, audits, auditAborts, reads atomic.Int64
}

// transfer runs one read-balance-then-transfer session until it commits
// (409s restart it with backoff). It returns the amount moved (0 when the
// source was empty) and an error other than an abort.
func (b *bank) transfer(ctx context.Context, c *client.Client, rng *rand.Rand, st *bankStats, branch, from, to int) (int64, error) {
	for attempt := 1; ; attempt++ {
		amt, err := b.transferOnce(ctx, c, rng, branch, from, to)
		if err == nil {
			st.transfers.Add(1)
			return amt, nil
		}
		if !client.IsAborted(err) {
			return 0, err
		}
		st.aborts.Add(1)
		time.Sleep(time.Duration(rng.IntN(1<<min(attempt, 6))) * time.Millisecond)
	}
}

func (b *bank) transferOnce(ctx context.Context, c *client.Client, rng *rand.Rand, branch, from, to int) (int64, error) {
	sid, err := c.BeginSession(ctx)
	if err != nil {
		return 0, err
	}
	var bal [2]int64
	for i, id := range []int{from, to} {
		raw, err := c.Cache(ctx, b.acctKey(branch, id), sid, false)
		if err != nil {
			return 0, err
		}
		a, err := decodeAccount(raw)
		if err != nil {
			return 0, fmt.Errorf("account %d/%d reads %s: %v", branch, id, raw, err)
		}
		if a.Balance < 0 {
			return 0, fmt.Errorf("account %d/%d reads a negative balance %d", branch, id, a.Balance)
		}
		bal[i] = a.Balance
	}
	if bal[0] == 0 {
		// Nothing to move: a read-only session, which still validates.
		_, err := c.CommitSession(ctx, sid, client.Commit{})
		return 0, err
	}
	amt := 1 + rng.Int64N(min(bal[0], 40))
	_, err = c.CommitSession(ctx, sid, client.Commit{
		Queue:      b.queue(branch),
		Statements: b.transferStatements(branch, from, to, amt),
		Cache: []client.CacheChange{
			{Key: b.acctKey(branch, from), Patch: map[string]any{"$inc": map[string]any{"balance": -amt}}},
			{Key: b.acctKey(branch, to), Patch: map[string]any{"$inc": map[string]any{"balance": amt}}},
		},
	})
	return amt, err
}

// audit reads every account of a branch in one session under S leases and
// commits it: once validated, the balances are a consistent state, whose
// total is the branch's initial total.
func (b *bank) audit(ctx context.Context, c *client.Client, st *bankStats, branch int) error {
	for {
		sid, err := c.BeginSession(ctx)
		if err != nil {
			return err
		}
		// In one request: the shorter the window between the first read and
		// the commit, the likelier no transfer wounds the audit.
		keys := make([]string, b.accounts)
		for id := range b.accounts {
			keys[id] = b.acctKey(branch, id)
		}
		var total int64
		vals, readErr := c.CacheMany(ctx, keys, sid, false)
		for id, raw := range vals {
			if readErr != nil {
				break
			}
			var a account
			if a, readErr = decodeAccount(raw); readErr != nil {
				readErr = fmt.Errorf("account %d/%d reads %s: %v", branch, id, raw, readErr)
			}
			total += a.Balance
		}
		if readErr != nil && !client.IsAborted(readErr) {
			_ = c.AbortSession(ctx, sid)
			return readErr
		}
		if readErr == nil {
			_, readErr = c.CommitSession(ctx, sid, client.Commit{})
		}
		if client.IsAborted(readErr) {
			st.auditAborts.Add(1)
			continue
		}
		if readErr != nil {
			return readErr
		}
		st.audits.Add(1)
		if want := b.initial * int64(b.accounts); total != want {
			return fmt.Errorf("audit of branch %d saw a total of %d, want %d: an inconsistent state", branch, total, want)
		}
		return nil
	}
}

// bankRun runs clients doing transfers (and, on every 8th client, audits)
// on b through sc for d, while entries are evicted if evict; it returns
// the model of account deltas. It runs past d, up to 3·d in all, until st
// has at least minTransfers transfers and minAudits audits: on a loaded
// machine (the race detector beside other packages' tests) d alone may
// not reach them.
func bankRun(t *testing.T, b *bank, sc *sidecar, clients int, d time.Duration, evict bool, st *bankStats, minTransfers, minAudits int64) map[[2]int]int64 {
	t.Helper()
	ctx := context.Background()
	var modelMu sync.Mutex // guards model
	model := map[[2]int]int64{}
	stop := make(chan struct{})
	errc := make(chan error, clients+2)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 42))
			for {
				select {
				case <-stop:
					return
				default:
				}
				branch := rng.IntN(b.branches)
				if c%8 == 0 && rng.IntN(4) == 0 {
					if err := b.audit(ctx, sc.c, st, branch); err != nil {
						errc <- err
						return
					}
					continue
				}
				from := rng.IntN(b.accounts)
				to := (from + 1 + rng.IntN(b.accounts-1)) % b.accounts
				amt, err := b.transfer(ctx, sc.c, rng, st, branch, from, to)
				if err != nil {
					errc <- fmt.Errorf("transfer: %w", err)
					return
				}
				modelMu.Lock()
				model[[2]int{branch, from}] -= amt
				model[[2]int{branch, to}] += amt
				modelMu.Unlock()
			}
		}()
	}
	if evict {
		// Entries disappear behind the sidecar's back, so reads miss and
		// must apply the queue before loading.
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(9, 9))
			for {
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Millisecond):
				}
				br, id := rng.IntN(b.branches), rng.IntN(b.accounts)
				if err := b.evict(b.acctKey(br, id), b.queue(br)); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	time.Sleep(d)
	for deadline := time.Now().Add(2 * d); time.Now().Before(deadline) &&
		(st.transfers.Load() < minTransfers || st.audits.Load() < minAudits); {
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("%v\n%s", err, sc.out())
	}
	return model
}

// checkBank flushes the queues and checks every account against the model,
// in the store and through the sidecar, and the total.
func checkBank(t *testing.T, b *bank, sc *sidecar, model map[[2]int]int64) {
	t.Helper()
	res := flushQueues(t, sc)
	if !res.Drained || res.Pending != 0 || res.Stopped != 0 {
		t.Fatalf("flush: %+v", res)
	}
	got := b.balances()
	var total int64
	for br := range b.branches {
		for id := range b.accounts {
			want := b.initial + model[[2]int{br, id}]
			if got[br][id] != want {
				t.Errorf("account %d/%d: %d in the store, model %d", br, id, got[br][id], want)
			}
			total += got[br][id]
			raw, err := sc.c.Cache(context.Background(), b.acctKey(br, id), "", false)
			if err != nil {
				t.Fatal(err)
			}
			if a, _ := decodeAccount(raw); a.Balance != got[br][id] {
				t.Errorf("account %d/%d: the sidecar reads %s, the store has %d", br, id, raw, got[br][id])
			}
		}
	}
	if want := b.initial * int64(b.branches*b.accounts); total != want {
		t.Errorf("total %d, want %d", total, want)
	}
}

// Acceptance 1: 32 clients run read-balance-then-transfer sessions between
// 100 accounts (4 branches of 25, one queue each) while appliers run and
// cache entries are evicted; audits (read-only sessions over a whole
// branch) always see the branch's total; after the flush every account
// equals the model and the total is unchanged, on both databases.
func TestSessionBankTransfers(t *testing.T) {
	for _, db := range []string{"pg", "maria"} {
		t.Run(db, func(t *testing.T) {
			b := newBank(t, db, 4, 25, 1000)
			addr := freeAddr(t)
			sc := start(t, b.config(addr, "", ""), addr)
			var st bankStats
			const minTransfers, minAudits = 200, 5
			model := bankRun(t, b, sc, 32, 10*time.Second, true, &st, minTransfers, minAudits)
			checkBank(t, b, sc, model)
			t.Logf("%s: %d transfers committed, %d aborted and retried; %d audits consistent, %d aborted; %d sessions applied",
				db, st.transfers.Load(), st.aborts.Load(), st.audits.Load(), st.auditAborts.Load(), b.appliedSessions())
			if st.transfers.Load() < minTransfers || st.audits.Load() < minAudits {
				t.Errorf("the workload barely ran: %d transfers, %d audits", st.transfers.Load(), st.audits.Load())
			}
		})
	}
}
