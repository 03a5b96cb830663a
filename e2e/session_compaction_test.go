package e2e

import (
	"context"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/writeback/writeback/pkg/client"
)

// Acceptance 5, the long run: sessions are committed and applied without
// pause for 5 minutes (WRITEBACK_E2E_LONG_DURATION) with a compaction
// period of 1 minute, and writeback_applied_sessions stays bounded — rows
// live at most about two periods after their session was popped — while
// the number of applied sessions keeps growing. The size is logged every
// 15 s. Gated: WRITEBACK_E2E_LONG=1 (add WRITEBACK_E2E_NORACE=1 for a
// binary without the race detector). The short version, in make test, is
// internal/bgt's TestCompactAppliedSessions.
func TestSessionCompactionLong(t *testing.T) {
	if os.Getenv("WRITEBACK_E2E_LONG") == "" {
		t.Skip("a 5-minute run; set WRITEBACK_E2E_LONG=1 to run it (the short version is internal/bgt's TestCompactAppliedSessions)")
	}
	run := 5 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("WRITEBACK_E2E_LONG_DURATION")); err == nil && d > 0 {
		run = d
	}
	const period = time.Minute
	banks := []*bank{newBank(t, "pg", 4, 10, 1_000_000), newBank(t, "maria", 4, 10, 1_000_000)}
	addr := freeAddr(t)
	sc := start(t, sessionConfig(t, addr, "  sessionCompaction: 1m", "", banks...), addr)
	var committed atomic.Int64
	stop := make(chan struct{})
	errc := make(chan error, 16)
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 5))
			for {
				select {
				case <-stop:
					return
				default:
				}
				b := banks[c%2]
				br := rng.IntN(b.branches)
				from := rng.IntN(b.accounts)
				to := (from + 1) % b.accounts
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				sid, err := sc.c.BeginSession(ctx)
				if err == nil {
					_, err = sc.c.CommitSession(ctx, sid, client.Commit{Queue: b.queue(br), Statements: b.transferStatements(br, from, to, 1),
						Cache: []client.CacheChange{b.patchBalance(br, from, -1), b.patchBalance(br, to, 1)}})
				}
				cancel()
				if err != nil {
					errc <- err
					return
				}
				committed.Add(1)
			}
		}()
	}
	type sample struct {
		at        time.Duration
		committed int64
		rows      map[string]int64
	}
	var samples []sample
	begin := time.Now()
	tick := time.NewTicker(15 * time.Second)
	for time.Since(begin) < run {
		select {
		case err := <-errc:
			t.Fatalf("commit: %v\n%s", err, sc.out())
		case <-tick.C:
		}
		s := sample{at: time.Since(begin).Round(time.Second), committed: committed.Load(), rows: map[string]int64{}}
		for _, b := range banks {
			s.rows[b.db] = b.appliedSessions()
		}
		st, _ := sc.c.Queues(context.Background())
		t.Logf("t=%v committed %d, pending %d; writeback_applied_sessions rows: pg %d, maria %d",
			s.at, s.committed, st.PendingSessions, s.rows["pg"], s.rows["maria"])
		samples = append(samples, s)
	}
	tick.Stop()
	close(stop)
	wg.Wait()
	if res := flushQueues(t, sc); !res.Drained || res.Pending != 0 {
		t.Fatalf("flush: %+v", res)
	}
	// Bounded: a row is deleted by the second round (a period apart) that
	// finds its session popped; with rounds every period, a row lives at
	// most 3 periods, so the table holds at most the sessions of the last
	// 3 periods.
	var peak int64
	for i, s := range samples {
		var window int64 // sessions committed in the 3 periods before s
		for j := i; j >= 0; j-- {
			if s.at-samples[j].at > 3*period {
				window = s.committed - samples[j].committed
				break
			}
			window = s.committed
		}
		rows := s.rows["pg"] + s.rows["maria"]
		peak = max(peak, rows)
		if s.at > 3*period && rows > window {
			t.Errorf("t=%v: %d applied records, more than the %d sessions of the last 3 periods: the table is not bounded", s.at, rows, window)
		}
	}
	last := samples[len(samples)-1]
	t.Logf("committed %d sessions in %v; applied records peaked at %d and ended at %d", last.committed, run, peak, last.rows["pg"]+last.rows["maria"])
	if run >= 3*period && peak >= last.committed {
		t.Errorf("applied records peaked at %d of %d sessions: nothing was compacted", peak, last.committed)
	}
}
