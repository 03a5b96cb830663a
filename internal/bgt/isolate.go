package bgt

import (
	"context"
	"fmt"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/session"
	"github.com/writeback/writeback/internal/store"
)

// What keeps failing.
//
// A batch spans documents of several partitions (a queue's batch, several
// sessions). A change the store rejects with an error outside the
// permanent list — a trigger's RAISE EXCEPTION or SIGNAL, an index row too
// large, a statement that times out on that row — fails its whole batch at
// every retry, and would stall every document (session) batched with it
// forever. So once a batch failed more than MaxRetries times in a row with
// an error that may come from the data (store.Isolable), the applier
// splits it: each half is applied on its own, a half that fails again is
// split again, down to one document, whose changes are then applied one by
// one (isolate) as for a permanent error. The change that still fails
// alone, again after a pause, while the store answers a ping, is
// dead-lettered with the store's error (reason "retries"); everything else
// is applied. An error of the store as a whole (down, read-only, out of
// connections, contention) is not isolable: it never splits a batch and
// never dead-letters anything, however long it lasts.
//
// Order and exactly-once are those of the permanent errors' dead letters:
// a document's changes before the dead letter are applied first, the dead
// letter is popped with them (buffer.Reject), and its later changes are
// applied after it; every apply is a store transaction that records what
// it applied, so a crash anywhere in a split replays nothing twice.

// errorLogAt is the failure in a row at which the appliers log that the
// store keeps failing at error level (once): the one after MaxRetries
// retries, or the sixth when retries are unbounded.
func errorLogAt(maxRetries int) int {
	if maxRetries <= 0 {
		return 6
	}
	return maxRetries + 1
}

// stuck reports whether a round that fails for the fails-th time in a row
// is past MaxRetries retries, so that its batch is split.
func (a *Applier) stuck(fails int) bool {
	return a.cfg.MaxRetries > 0 && fails > a.cfg.MaxRetries
}

// split applies writes, a batch of one store that just failed with an
// isolable error, in halves: a half that fails again with such an error is
// split again, and a document that fails alone is isolated change by
// change, dead-lettering what keeps failing (see the comment at the top of
// this file). A half that fails with a permanent error is applied
// document by document, as any batch with one. It stops at the first
// error that is neither (the store went down meanwhile). It returns how
// many changes it applied and the documents to trim.
func (a *Applier) split(ctx context.Context, storeName string, st store.Store, writes []store.Write) (applied int, done []buffer.Applied, err error) {
	if len(writes) == 1 {
		n, _, err := a.isolate(ctx, st, writes[0], true)
		if err != nil {
			err = fmt.Errorf("store %s: %w", storeName, err)
		}
		return n, nil, err
	}
	a.m.BatchSplits.Inc()
	mid := len(writes) / 2
	for _, half := range [][]store.Write{writes[:mid], writes[mid:]} {
		res, err := a.apply(ctx, st, half, nil)
		var n int
		var d []buffer.Applied
		switch {
		case err == nil:
			n, d, _ = a.account(half, res)
		case ctx.Err() != nil:
		case store.IsPermanent(err):
			a.m.ApplyErrors.WithLabelValues(errKind(err)).Inc()
			n, d, err = a.oneByOne(ctx, storeName, st, half, true)
		case store.Isolable(err):
			a.m.ApplyErrors.WithLabelValues(errKind(err)).Inc()
			n, d, err = a.split(ctx, storeName, st, half)
		default:
			a.m.ApplyErrors.WithLabelValues(errKind(err)).Inc()
		}
		applied += n
		done = append(done, d...)
		if err != nil {
			return applied, done, fmt.Errorf("store %s: %w", storeName, err)
		}
	}
	return applied, done, nil
}

// oneByOne applies writes, a batch the store rejected for good, one
// document at a time, and isolates a document the store rejects (see
// isolate; stuck is passed on). It returns how many changes it applied and
// the documents to trim (an isolated document trims itself).
func (a *Applier) oneByOne(ctx context.Context, storeName string, st store.Store, writes []store.Write, stuck bool) (int, []buffer.Applied, error) {
	var applied int
	var done []buffer.Applied
	for _, w := range writes {
		res, err := a.apply(ctx, st, []store.Write{w}, nil)
		if err == nil {
			n, d, _ := a.account([]store.Write{w}, res)
			applied += n
			done = append(done, d...)
			continue
		}
		a.m.ApplyErrors.WithLabelValues(errKind(err)).Inc()
		if ctx.Err() != nil || !store.IsPermanent(err) && !(stuck && store.Isolable(err)) {
			return applied, done, fmt.Errorf("store %s: %w", storeName, err)
		}
		n, _, err := a.isolate(ctx, st, w, stuck)
		applied += n
		if err != nil {
			return applied, done, fmt.Errorf("store %s: %w", storeName, err)
		}
	}
	return applied, done, nil
}

// settle applies one change that just failed alone with an isolable error
// once more, after a pause: a batch of unrelated documents must not lose a
// change to a passing failure that happened to hit it alone. If it fails
// again with an isolable error, the store must answer a ping for that
// error to stand (and the change to become a dead letter); otherwise the
// ping's error is returned, which is not isolable.
func (a *Applier) settle(ctx context.Context, st store.Store, one store.Write) ([]store.Result, error) {
	if err := pause(ctx, a.cfg.RetryBackoff); err != nil {
		return nil, err
	}
	res, err := a.apply(ctx, st, []store.Write{one}, nil)
	if err == nil || !store.Isolable(err) || ctx.Err() != nil {
		return res, err
	}
	a.m.ApplyErrors.WithLabelValues(errKind(err)).Inc()
	if perr := st.Ping(ctx); perr != nil {
		return nil, fmt.Errorf("the store does not answer a ping: %w", perr)
	}
	return nil, err
}

// stuck reports whether a batch of queue that fails now is past
// MaxRetries retries (its earlier failures in a row, as the scheduler
// counted them), so that it is split.
func (a *QueueApplier) stuck(queue string) bool {
	return a.cfg.MaxRetries > 0 && a.failed([]string{queue})+1 > a.cfg.MaxRetries
}

// split applies head, the head of queue that just failed with an isolable
// error (cause), in order: it looks for the first session that fails on
// its own by applying ever smaller prefixes (the one the store names, else
// half), and stops the queue at that session once it failed again after a
// pause while the store answers a ping (a dead letter, reason "retries"),
// as a permanent error does. The sessions before it are applied; the ones
// after it wait behind the stopped queue. It returns how many sessions it
// applied.
func (a *QueueApplier) split(ctx context.Context, f *session.Family, queue string, head []session.Pending, cause error) (applied int, _ error) {
	for len(head) > 1 {
		// head failed with cause: apply a prefix of it.
		mid := len(head) / 2
		if i, ok := store.FailedSession(cause); ok && i < len(head) {
			mid = max(i, 1) // the sessions before it, or it alone
		}
		a.m.BatchSplits.Inc()
		k, err := a.applyBatch(ctx, f, queue, head[:mid])
		applied += k
		switch {
		case err == nil:
			head = head[mid:]
			k, err = a.applyBatch(ctx, f, queue, head)
			applied += k
			if err == nil {
				return applied, nil
			}
		default:
			head = head[:mid]
		}
		switch {
		case ctx.Err() != nil:
			return applied, err
		case store.IsPermanent(err):
			k, err := a.isolate(ctx, f, queue, head, err)
			return applied + k, err
		case !store.Isolable(err):
			return applied, err
		}
		cause = err
	}
	// head[0] failed alone: once more after a pause, then the ping.
	if err := pause(ctx, a.cfg.RetryBackoff); err != nil {
		return applied, err
	}
	k, err := a.applyBatch(ctx, f, queue, head)
	applied += k
	switch {
	case err == nil:
		return applied, nil
	case ctx.Err() != nil:
		return applied, err
	case store.IsPermanent(err):
		return applied, a.stop(ctx, head[0], err, metrics.DeadPermanent)
	case !store.Isolable(err):
		return applied, err
	}
	if perr := f.Store.Ping(ctx); perr != nil {
		return applied, fmt.Errorf("store %s does not answer a ping: %w", f.StoreName, perr)
	}
	return applied, a.stop(ctx, head[0], err, metrics.DeadRetries)
}
