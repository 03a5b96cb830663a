package bgt

import (
	"context"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/store"
)

// compact runs one round of the applied-records compaction (see rounds).
func (a *Applier) compact(ctx context.Context) { a.compactApplied(ctx) }

// compact runs one round of the applied-sessions compaction (see rounds).
func (a *QueueApplier) compact(ctx context.Context) { a.CompactApplied(ctx) }

// compactApplied deletes applied records of documents with nothing
// buffered, in two rounds CompactEvery apart: a record is deleted only if it
// was idle, with the same seq, in the previous round too.
//
// Why two rounds: a reader that missed took a snapshot of the buffered write
// [.. s] and then reads (row, applied seq) from the store. If s was applied
// and trimmed meanwhile and its record deleted before the store read, the
// reader would see the row with s in it but applied seq 0, and apply s
// twice. A record idle at round 1 was trimmed before round 1, so such a
// reader took its snapshot before round 1 and would have to still be
// running at round 2, a whole period later; reads are bounded far below it.
//
// Safe against writers too: the delete is conditional on the seq, so a
// record an applier moved on is kept, and a change buffered but not yet
// applied has a seq above the deleted record's (sequences only grow), so it
// applies as new.
func (a *Applier) compactApplied(ctx context.Context) {
	a.compacting.Lock()
	defer a.compacting.Unlock()
	prev := a.idle
	next := map[store.AppliedRecord]bool{}
	for name, st := range a.stores() {
		var afterColl, afterID string
		for ctx.Err() == nil {
			recs, err := st.ListApplied(ctx, afterColl, afterID, 1000)
			if err != nil || len(recs) == 0 {
				if err != nil && ctx.Err() == nil {
					a.log.Warn("listing applied records", "store", name, "err", err)
				}
				break
			}
			last := recs[len(recs)-1]
			afterColl, afterID = last.Collection, last.ID
			members := make([]string, len(recs))
			for i, r := range recs {
				members[i] = buffer.Member(r.Collection, r.ID)
			}
			has, err := a.buf.HasBuffered(ctx, members)
			if err != nil {
				break
			}
			var del []store.AppliedRecord
			for i, r := range recs {
				// Another deployment's collections in the same database
				// are not ours to judge: their buffers live elsewhere.
				if has[i] || a.colls[r.Collection] == nil {
					continue
				}
				if prev[r] {
					del = append(del, r)
				} else {
					next[r] = true
				}
			}
			if len(del) == 0 {
				continue
			}
			if _, err := st.CompactApplied(ctx, del); err != nil {
				a.log.Warn("compacting applied records", "store", name, "err", err)
				break
			}
		}
	}
	a.idle = next
}

// compactPage is how many applied records one compaction step reads.
const compactPage = 1000

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
	a.compacting.Lock()
	defer a.compacting.Unlock()
	prev := a.idle
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
	a.idle = next
	return deleted
}
