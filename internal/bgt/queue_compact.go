package bgt

import (
	"context"
	"time"
)

// compactPage is how many applied records one compaction step reads.
const compactPage = 1000

// compactLoop compacts writeback_applied_sessions every CompactEvery, on
// the sidecar that owns queue partition 0 (one compactor at a time).
func (a *QueueApplier) compactLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.CompactEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if a.owned.has(0) {
				a.CompactApplied(ctx)
			}
		}
	}
}

// CompactApplied runs one round of the applied-sessions compaction: a
// record is deleted when its session object was gone from Redis at this
// round and at the previous one, CompactEvery apart.
//
// Why two rounds: an applier (or a miss) reads a batch of sessions from a
// queue's head and only then, in its store transaction, looks their ids up
// in writeback_applied_sessions. If another applier applied and popped the
// batch in between, and the records were deleted before the lookup, the
// sessions would be applied twice. A record whose session was gone at the
// previous round was popped before that round, so such a reader read the
// queue before it and would still be running a whole period later; every
// apply of a batch (applier, miss, flush) is bounded by BatchTimeout, at
// most batchTimeout, half the shortest period (MinSessionCompactEvery).
//
// A record whose session is still in Redis is kept: a replay of its queue
// after a crash between the store commit and the pop must find it.
func (a *QueueApplier) CompactApplied(ctx context.Context) (deleted int) {
	a.mu.Lock()
	prev := a.idle
	a.mu.Unlock()
	next := map[string]bool{}
	seen := map[string]bool{}
	for _, f := range a.fams {
		if seen[f.StoreName] {
			continue
		}
		seen[f.StoreName] = true
		after := ""
		for ctx.Err() == nil {
			recs, err := f.Store.ListAppliedSessions(ctx, after, compactPage)
			if err != nil {
				a.log.Warn("listing applied sessions", "store", f.StoreName, "err", err)
				break
			}
			if len(recs) == 0 {
				break
			}
			after = recs[len(recs)-1].ID
			exist, err := a.q.Exist(ctx, recs)
			if err != nil {
				a.log.Warn("compacting applied sessions", "err", err)
				break
			}
			var del []string
			for i, r := range recs {
				// Another deployment's queues in the same database are
				// not ours to judge: their sessions live elsewhere.
				if exist[i] || a.family(r.Queue) == nil {
					continue
				}
				if prev[r.ID] {
					del = append(del, r.ID)
				} else {
					next[r.ID] = true
				}
			}
			if len(del) == 0 {
				continue
			}
			n, err := f.Store.CompactAppliedSessions(ctx, del)
			deleted += n
			a.m.Compacted.Add(float64(n))
			if err != nil {
				a.log.Warn("compacting applied sessions", "store", f.StoreName, "err", err)
				break
			}
		}
		if n, err := f.Store.CountAppliedSessions(ctx); err == nil {
			a.m.AppliedRecords.WithLabelValues(f.StoreName).Set(float64(n))
		}
	}
	a.mu.Lock()
	a.idle = next
	a.mu.Unlock()
	return deleted
}
