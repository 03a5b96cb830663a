package bgt

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/fault"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/store"
)

var _ rounds = (*Applier)(nil)

// ready returns those of parts with documents pending for at least
// ApplyDelay that are not backing off after a failed round (see rounds).
func (a *Applier) ready(ctx context.Context, parts []int) (todo []int, held bool, err error) {
	now := time.Now()
	var polled []int
	for _, p := range parts {
		if !a.waiting(p, now) {
			polled = append(polled, p)
		}
	}
	if len(polled) == 0 {
		return nil, true, nil
	}
	counts, err := a.buf.PendingCounts(ctx, polled, a.cfg.ApplyDelay)
	if err != nil {
		return nil, false, err
	}
	for i, p := range polled {
		if counts[i] > 0 {
			todo = append(todo, p)
		}
	}
	return todo, false, nil
}

// round applies one round of parts on a worker (see rounds): one ApplyRound
// of the documents pending for at least ApplyDelay, bounded by the batch
// timeout.
func (a *Applier) round(ctx context.Context, parts []int) (more bool) {
	var n int
	var full bool
	err := a.bounded(context.WithoutCancel(ctx), parts, func(bctx context.Context, _ int) (err error) {
		n, full, err = a.applyRound(bctx, parts, ctx.Done(), a.cfg.ApplyDelay)
		return err
	}, "partitions", parts)
	a.note(parts, err)
	if err != nil && ctx.Err() == nil {
		a.log.Warn("applying buffered writes", "partitions", parts, "err", err)
	}
	return err == nil && full && n > 0
}

// Pick chooses up to limit documents from the pending lists of several
// partitions, round-robin so that no partition starves the others.
func Pick(parts []int, lists [][]string, limit int) []buffer.DocRef {
	var out []buffer.DocRef
	for i := 0; len(out) < limit; i++ {
		progressed := false
		for j, p := range parts {
			if i < len(lists[j]) && len(out) < limit {
				out = append(out, buffer.DocRef{Part: p, Member: lists[j][i]})
				progressed = true
			}
		}
		if !progressed {
			break
		}
	}
	return out
}

// maxPipelined bounds the batches one ApplyRound applies back to back while
// its partitions have more pending: enough to keep the store busy through a
// backlog, few enough that one round does not hold its partitions (and its
// worker) for long.
const maxPipelined = 8

// ApplyRound applies the pending documents of the given partitions in
// batches: up to BatchSize documents and their buffered writes, in one
// transaction per store, each trimmed once applied. While a batch is in its
// store, the round trims the previous one and reads the next, so that the
// next is usually ready when the current one commits; it goes on while
// documents are pending, up to maxPipelined batches, while ctx's deadline
// leaves twice the last batch's time, and while no write-through waits for
// one of the partitions (ApplyDoc). The partitions stay locked throughout,
// so no batch is read across a release of their lock (a MongoDB store
// relies on that lock for each document's order), and a batch never holds a
// change of the batch still in the store (with cuts, it may hold a later
// change of one of its SQL documents; never one of a MongoDB document,
// whose conversion rewrites the head of its buffered write). full reports that more
// documents were pending than the round took.
func (a *Applier) ApplyRound(ctx context.Context, parts []int) (applied int, full bool, err error) {
	return a.applyRound(ctx, parts, nil, 0)
}

// applyRound is ApplyRound; stop, when not nil, ends the pipeline early
// once it is closed (the run's end: a round on its way out starts no more
// batches); age > 0 takes only the documents pending for at least age.
func (a *Applier) applyRound(ctx context.Context, parts []int, stop <-chan struct{}, age time.Duration) (applied int, full bool, err error) {
	locked := slices.Clone(parts)
	slices.Sort(locked)
	locked = slices.Compact(locked)
	for _, p := range locked {
		a.parts[p].Lock()
	}
	defer func() {
		for _, p := range locked {
			a.parts[p].Unlock()
		}
	}()
	more := func() bool {
		select {
		case <-stop:
			return false
		default:
		}
		for _, p := range locked {
			if a.parts[p].waiting.Load() > 0 {
				return false
			}
		}
		return true
	}
	size, perDoc := a.roundSize(a.divisor(parts...))
	b, err := a.readBatch(ctx, parts, size, perDoc, nil, age)
	if err != nil || b == nil {
		return 0, false, err
	}
	fails := a.failed(parts) + 1
	var trim []buffer.Applied // applied, not trimmed yet
	for n := 1; ; n++ {
		type outcome struct {
			applied int
			done    []buffer.Applied
			err     error
		}
		out := make(chan outcome, 1)
		began := time.Now()
		go func(b *batch) {
			var o outcome
			o.applied, o.done, o.err = a.applyBatch(ctx, b, fails)
			out <- o
		}(b)
		var next *batch
		_, rerr := a.buf.Trim(ctx, trim)
		if rerr == nil {
			trim = nil
			if b.full && n < maxPipelined && more() {
				next, rerr = a.readBatch(ctx, parts, size, perDoc, b, age)
			}
		}
		o := <-out
		applied += o.applied
		trim = append(trim, o.done...)
		fault.Hit(fault.AfterCommit)
		if next != nil && (!more() || !roomFor(ctx, time.Since(began))) {
			next = nil // read, not started: the next round reads it again
		}
		if o.err != nil || rerr != nil || next == nil {
			if _, err := a.buf.Trim(ctx, trim); err != nil {
				return applied, false, err
			}
			switch {
			case o.err != nil:
				return applied, false, o.err
			case rerr != nil:
				return applied, false, rerr
			}
			return applied, b.full, nil
		}
		b = next
	}
}

// roomFor reports whether ctx's deadline leaves time for one more batch
// after one that took took: twice that.
func roomFor(ctx context.Context, took time.Duration) bool {
	deadline, ok := ctx.Deadline()
	return !ok || time.Until(deadline) > 2*took
}

// batch is what one transaction per store applies: the documents read
// from the pending index and their changes, grouped by store.
type batch struct {
	groups  map[string][]store.Write
	planned map[string]*store.Planned // groups planned ahead, for stores that are store.Planners
	done    []buffer.Applied          // documents drained meanwhile: unindex
	members map[buffer.DocRef]bool
	// bounds is, for a batch read as cuts, each partition's bound: the
	// batch holds every buffered change of its partition at or below it
	// (and above the previous batch's bound), and no other. seqs is each
	// partition's sequence as the cut read it; past, the documents whose
	// changes read went past the bound (or were cut at perDoc).
	bounds map[int]int64
	seqs   map[int]int64
	past   map[buffer.DocRef]bool
	full   bool // more documents were pending than the batch took
}

// readBatch reads up to size pending documents of parts (with age > 0, of
// those pending for at least age) and up to perDoc changes of each; nil
// when none is pending. prev, when not nil, is the batch in the store,
// which commits before this one: its documents are skipped; or, with cuts,
// this batch holds the changes above its bounds.
//
// With cuts (not Config.RecordsOnly), the batch is a cut of each partition
// (buffer.Cut): its oldest documents, its share of size (not Pick's), and
// every buffered change of the partition up to a bound, which the first
// document left out and perDoc may lower; stores that plan ahead apply it
// as one (store.PlanCut), moving one floor per collection and partition
// instead of a record per document. Not with an age (ApplyDelay): a cut
// would leave out the changes younger than the age of the documents it
// takes, which the delay is there to gather into one row write; nor after
// a batch read as documents. When the bounds leave nothing of a
// first batch (its documents all tied on the score of one left out), it
// is read as documents instead, so that the round makes progress.
func (a *Applier) readBatch(ctx context.Context, parts []int, size, perDoc int, prev *batch, age time.Duration) (*batch, error) {
	if a.cfg.RecordsOnly || age > 0 || (prev != nil && prev.bounds == nil) {
		return a.readAs(ctx, parts, size, perDoc, prev, age, false)
	}
	b, err := a.readAs(ctx, parts, size, perDoc, prev, age, true)
	if err != nil || b == nil || len(b.groups) > 0 || len(b.done) > 0 {
		return b, err
	}
	if prev != nil {
		return nil, nil // the next round reads them, once prev is trimmed
	}
	a.log.Debug("a cut of the pending documents holds no change; reading them as documents", "partitions", parts)
	return a.readAs(ctx, parts, size, perDoc, nil, age, false)
}

// readAs is readBatch, reading cuts or not.
func (a *Applier) readAs(ctx context.Context, parts []int, size, perDoc int, prev *batch, age time.Duration, cut bool) (*batch, error) {
	var skip map[buffer.DocRef]bool
	if prev != nil {
		skip = prev.members
	}
	var cuts []buffer.Cut
	var lists [][]string
	var err error
	if !cut {
		lists, err = a.buf.PendingDocs(ctx, parts, 2*size+len(skip), age)
	} else {
		// A cut takes every document it reads: each partition's share of
		// the batch, and the documents of the batch in the store it holds.
		quota := (size + len(parts) - 1) / len(parts)
		limits := make([]int, len(parts))
		for i, p := range parts {
			limits[i] = quota
			for r := range skip {
				if r.Part == p {
					limits[i]++
				}
			}
		}
		cuts, err = a.buf.PendingCuts(ctx, parts, limits)
		lists = make([][]string, len(cuts))
		for i := range cuts {
			lists[i] = cuts[i].Members
		}
	}
	if err != nil {
		return nil, err
	}
	// Read past documents of collections this sidecar does not serve (a
	// collection removed from the config while it had pending writes; or
	// another deployment's) and those of the batch in the store: they must
	// not hide the others. carried is the documents of the batch in the
	// store that a cut must read again: those of stores taking cuts (it
	// holds their changes past the previous cut) that may have any —
	// changes the previous cut read and left out, or changes buffered since
	// it read the partition's sequence.
	unknown := 0
	var carried []buffer.DocRef
	for i, l := range lists {
		var kept []string
		for _, m := range l {
			coll, _ := buffer.SplitMember(m)
			if ref := (buffer.DocRef{Part: parts[i], Member: m}); skip[ref] {
				if cut && a.cuttable(coll) && (prev.past[ref] || cuts[i].Seq > prev.seqs[parts[i]]) {
					carried = append(carried, ref)
				}
				continue
			}
			if a.colls[coll] != nil {
				kept = append(kept, m)
			} else {
				unknown++
			}
		}
		lists[i] = kept
	}
	if unknown > 0 {
		a.warnUnknown(unknown)
	}
	b := &batch{groups: map[string][]store.Write{}}
	var refs []buffer.DocRef
	if cut {
		b.bounds, b.seqs = make(map[int]int64, len(parts)), make(map[int]int64, len(parts))
		b.past = map[buffer.DocRef]bool{}
		for i, p := range parts {
			for _, m := range lists[i] {
				refs = append(refs, buffer.DocRef{Part: p, Member: m})
			}
			b.bounds[p], b.seqs[p] = cuts[i].Bound, cuts[i].Seq
			b.full = b.full || cuts[i].More
		}
	} else {
		refs = Pick(parts, lists, size)
		for _, l := range lists {
			b.full = b.full || len(l) >= size
		}
		b.full = b.full || len(refs) == size
	}
	picked := len(refs)
	refs = append(refs, carried...)
	if len(refs) == 0 {
		return nil, nil
	}
	b.members = make(map[buffer.DocRef]bool, len(refs))
	changes, err := a.buf.Changes(ctx, refs, perDoc)
	if err != nil {
		return nil, err
	}
	if cut {
		// A partition's bound is at most the last change read of a
		// document cut at perDoc (of a store taking cuts: the others'
		// changes are not filtered).
		for i, r := range refs {
			coll, _ := buffer.SplitMember(r.Member)
			if cs := changes[i]; len(cs) >= perDoc && a.cuttable(coll) {
				b.bounds[r.Part] = min(b.bounds[r.Part], cs[len(cs)-1].Seq)
			}
		}
	}
	for i, r := range refs {
		// A document cut at perDoc changes has more pending.
		b.full = b.full || len(changes[i]) >= perDoc
		b.members[r] = true
		coll, id := buffer.SplitMember(r.Member)
		c := a.colls[coll]
		if len(changes[i]) == 0 {
			if i < picked {
				b.done = append(b.done, buffer.Applied{DocRef: r}) // drained meanwhile: unindex
			}
			continue
		}
		cs := changes[i]
		if b.bounds != nil && a.cuttable(coll) {
			var lo int64
			if prev != nil {
				lo = prev.bounds[r.Part]
			}
			if len(cs) >= perDoc || cs[len(cs)-1].Seq > b.bounds[r.Part] {
				b.past[r] = true
			}
			cs = within(cs, lo, b.bounds[r.Part])
			if len(cs) == 0 {
				continue
			}
		}
		writes := b.groups[c.StoreName]
		if writes == nil {
			// Usually one store holds the whole batch.
			writes = make([]store.Write, 0, len(refs)-i)
		}
		b.groups[c.StoreName] = append(writes, store.Write{
			Collection: coll, Table: c.Table, ID: id, Partition: r.Part, Changes: cs,
		})
	}
	if b.bounds != nil && prev != nil {
		// A bound below the previous batch's (a document of both cut at
		// perDoc) took nothing: the next batch starts above the higher.
		for p, lo := range prev.bounds {
			if _, ok := b.bounds[p]; ok {
				b.bounds[p] = max(b.bounds[p], lo)
			}
		}
	}
	// Planned here, the next batch's statements are ready when the batch
	// in the store commits.
	for name, writes := range b.groups {
		if a.cuttable(writes[0].Collection) {
			if b.planned == nil {
				b.planned = map[string]*store.Planned{}
			}
			if b.bounds != nil {
				b.planned[name] = store.PlanCut(writes)
			} else {
				b.planned[name] = store.Plan(writes)
			}
		}
	}
	return b, nil
}

// cuttable reports whether coll's store plans batches ahead, and so can
// apply one as a cut (store.PlanCut).
func (a *Applier) cuttable(coll string) bool {
	c := a.colls[coll]
	if c == nil {
		return false
	}
	_, ok := c.Store.(store.Planner)
	return ok
}

// within returns the changes cs (in seq order) with lo < seq <= hi.
func within(cs []change.Change, lo, hi int64) []change.Change {
	from := sort.Search(len(cs), func(j int) bool { return cs[j].Seq > lo })
	to := sort.Search(len(cs), func(j int) bool { return cs[j].Seq > hi })
	if from >= to {
		return nil
	}
	return cs[from:to]
}

// applyBatch applies b, one transaction per store, and returns what to
// trim: even when a store failed, what the others applied.
func (a *Applier) applyBatch(ctx context.Context, b *batch, fails int) (applied int, done []buffer.Applied, firstErr error) {
	done = b.done
	for name, writes := range b.groups {
		n, d, err := a.applyWrites(ctx, name, writes, b.planned[name], fails)
		applied += n
		done = append(done, d...)
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return applied, done, firstErr
}

// warnUnknown logs, at most once a minute, that pending documents belong to
// collections this sidecar is not configured for.
func (a *Applier) warnUnknown(n int) {
	if a.unknown.due(time.Minute) {
		a.log.Warn("pending documents belong to collections this sidecar does not serve; configure them or flush them from a sidecar that does", "documents", n)
	}
}

// applyWrites applies writes to one store in one transaction. fails is
// how many times in a row this round will have failed if it fails;
// planned, when not nil, is writes planned ahead (readBatch). When
// the store rejects the batch for good (a permanent error), the batch is
// split to find the culprits (oneByOne), so that only the changes the store
// refuses become dead letters — never the valid changes around them, never
// changes an earlier attempt already applied. Other errors are retried with
// backoff: the round fails. Once a round failed more than MaxRetries times
// in a row with an error that may come from the data (store.Isolable: a
// trigger's exception, a statement timeout …), its batch is split in two,
// and so on, until what keeps failing is one change, which becomes a dead
// letter (see split). Errors of the store as a whole (down, read-only …)
// never dead-letter anything.
func (a *Applier) applyWrites(ctx context.Context, storeName string, writes []store.Write, planned *store.Planned, fails int) (int, []buffer.Applied, error) {
	st := a.colls[writes[0].Collection].Store
	results, err := a.apply(ctx, st, writes, planned)
	if err == nil {
		return a.account(writes, results)
	}
	a.m.ApplyErrors.WithLabelValues(errKind(err)).Inc()
	switch {
	case ctx.Err() != nil:
	case store.IsPermanent(err):
		return a.oneByOne(ctx, storeName, st, writes, false)
	case a.stuck(fails) && store.Isolable(err):
		a.log.Warn("a batch of buffered writes keeps failing; splitting it to find the changes the store refuses",
			"store", storeName, "documents", len(writes), "failures", fails, "err", err)
		return a.split(ctx, storeName, st, writes)
	}
	a.m.ApplyRetries.Inc()
	if fails == errorLogAt(a.cfg.MaxRetries) {
		a.log.Error("the store keeps failing; buffered writes wait and are retried with backoff", "store", storeName, "failures", fails, "err", err)
	}
	return 0, nil, fmt.Errorf("store %s: %w", storeName, err)
}

// account turns store results into trims and metrics.
func (a *Applier) account(writes []store.Write, results []store.Result) (int, []buffer.Applied, error) {
	var applied int
	done := make([]buffer.Applied, len(writes))
	for i, w := range writes {
		r := results[i]
		applied += r.Applied
		a.m.AppliedChanges.WithLabelValues(w.Collection).Add(float64(r.Applied))
		if r.Skipped > 0 {
			a.m.DuplicatesSkipped.Add(float64(r.Skipped))
		}
		if r.Missing {
			a.log.Warn("patch found no row in the store; the row was deleted behind the cache", "collection", w.Collection, "id", w.ID)
		}
		done[i] = buffer.Applied{DocRef: buffer.DocRef{Part: w.Partition, Member: buffer.Member(w.Collection, w.ID)}, LastSeq: w.Changes[len(w.Changes)-1].Seq, Count: len(w.Changes)}
	}
	return applied, done, nil
}

// errKind is the kind of a store error, as the apply errors metric counts
// it.
func errKind(err error) string {
	if store.IsPermanent(err) {
		return metrics.ErrorPermanent
	}
	return metrics.ErrorTransient
}
