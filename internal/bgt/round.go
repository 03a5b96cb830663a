package bgt

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/fault"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/store"
)

var _ rounds = (*Applier)(nil)

// ready returns those of parts with pending documents that are not
// backing off after a failed round (see rounds).
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
	counts, err := a.buf.PendingCounts(ctx, polled)
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

// round applies one round of parts on a worker (see rounds): one ApplyRound,
// bounded by the batch timeout.
func (a *Applier) round(ctx context.Context, parts []int) (more bool) {
	var n int
	var full bool
	err := a.bounded(context.WithoutCancel(ctx), parts, func(bctx context.Context, _ int) (err error) {
		n, full, err = a.ApplyRound(bctx, parts)
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

// ApplyRound applies one batch drawn from the given partitions: up to
// BatchSize pending documents and their buffered writes, in one transaction
// per store, then trims what was applied. full reports that more documents
// were pending than the round took.
func (a *Applier) ApplyRound(ctx context.Context, parts []int) (applied int, full bool, err error) {
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
	// Read past documents of collections this sidecar does not serve (a
	// collection removed from the config while it had pending writes; or
	// another deployment's): they must not hide the ones it does serve.
	size, perDoc := a.roundSize(a.divisor(parts...))
	lists, err := a.buf.PendingDocs(ctx, parts, 2*size)
	if err != nil {
		return 0, false, err
	}
	for i, l := range lists {
		kept := l[:0]
		for _, m := range l {
			if coll, _ := buffer.SplitMember(m); a.colls[coll] != nil {
				kept = append(kept, m)
			}
		}
		if len(kept) < len(l) {
			a.warnUnknown(len(l) - len(kept))
		}
		lists[i] = kept
	}
	refs := Pick(parts, lists, size)
	if len(refs) == 0 {
		return 0, false, nil
	}
	for _, l := range lists {
		full = full || len(l) >= size
	}
	full = full || len(refs) == size
	changes, err := a.buf.Changes(ctx, refs, perDoc)
	if err != nil {
		return 0, false, err
	}
	groups := map[string][]store.Write{}
	var done []buffer.Applied
	for i, r := range refs {
		coll, id := buffer.SplitMember(r.Member)
		c := a.colls[coll]
		if c == nil {
			// Buffered under a collection this sidecar is not configured
			// for: leave it to a sidecar that is.
			continue
		}
		if len(changes[i]) == 0 {
			done = append(done, buffer.Applied{DocRef: r}) // drained meanwhile: unindex
			continue
		}
		groups[c.StoreName] = append(groups[c.StoreName], store.Write{
			Collection: coll, Table: c.Table, ID: id, Partition: r.Part, Changes: changes[i],
		})
	}
	fails := a.failed(parts) + 1
	var firstErr error
	for name, writes := range groups {
		n, d, err := a.applyWrites(ctx, name, writes, fails)
		applied += n
		done = append(done, d...)
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	fault.Hit(fault.AfterCommit)
	if _, err := a.buf.Trim(ctx, done); err != nil {
		return applied, false, err
	}
	return applied, full, firstErr
}

// warnUnknown logs, at most once a minute, that pending documents belong to
// collections this sidecar is not configured for.
func (a *Applier) warnUnknown(n int) {
	if a.unknown.due(time.Minute) {
		a.log.Warn("pending documents belong to collections this sidecar does not serve; configure them or flush them from a sidecar that does", "documents", n)
	}
}

// applyWrites applies writes to one store in one transaction. fails is
// how many times in a row this round will have failed if it fails. When
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
func (a *Applier) applyWrites(ctx context.Context, storeName string, writes []store.Write, fails int) (int, []buffer.Applied, error) {
	st := a.colls[writes[0].Collection].Store
	results, err := a.apply(ctx, st, writes)
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
		done[i] = buffer.Applied{DocRef: buffer.DocRef{Part: w.Partition, Member: buffer.Member(w.Collection, w.ID)}, LastSeq: w.Changes[len(w.Changes)-1].Seq}
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
