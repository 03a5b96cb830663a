package bgt

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/session"
	"github.com/writeback/writeback/internal/store"
)

// isolate applies a document's changes one at a time, each in its own
// transaction, and dead-letters each change the store rejects for good.
// stuck says that the document's batch kept failing past MaxRetries with
// an isolable error (see split): a change that then fails alone with such
// an error, again after a pause, while the store answers (settled), is
// dead-lettered too. Every change it handles is trimmed (applied ones by
// the dead-letter script's pop, which removes the prefix up to a rejected
// change). It returns how many changes it applied and the seqs it
// dead-lettered.
func (a *Applier) isolate(ctx context.Context, st store.Store, w store.Write, stuck bool) (applied int, dead []int64, err error) {
	var lastApplied int64
	for _, c := range w.Changes {
		one := w
		one.Changes = []change.Change{c}
		res, err := a.apply(ctx, st, []store.Write{one}, nil)
		if err != nil {
			a.m.ApplyErrors.WithLabelValues(errKind(err)).Inc()
			if stuck && !store.IsPermanent(err) && store.Isolable(err) && ctx.Err() == nil {
				res, err = a.settle(ctx, st, one)
			}
		}
		if err == nil {
			n, _, _ := a.account([]store.Write{one}, res)
			applied += n
			lastApplied = c.Seq
			continue
		}
		reason := metrics.DeadPermanent
		if !store.IsPermanent(err) {
			if !stuck || !store.Isolable(err) || ctx.Err() != nil {
				return applied, dead, a.trimApplied(ctx, w, lastApplied, err)
			}
			reason = metrics.DeadRetries
		}
		if err := a.deadLetter(ctx, w, c, err, reason); err != nil {
			return applied, dead, err
		}
		dead = append(dead, c.Seq)
	}
	return applied, dead, a.trimApplied(ctx, w, lastApplied, nil)
}

// trimApplied trims a document's buffered write up to last (0: nothing)
// and returns cause.
func (a *Applier) trimApplied(ctx context.Context, w store.Write, last int64, cause error) error {
	if last > 0 {
		ref := buffer.DocRef{Part: w.Partition, Member: buffer.Member(w.Collection, w.ID)}
		if _, err := a.buf.Trim(ctx, []buffer.Applied{{DocRef: ref, LastSeq: last}}); err != nil {
			return err
		}
	}
	return cause
}

// deadLetter moves one change the store rejected out of the way, with the
// store's error. The changes before it in the buffered write were applied
// (isolate applies them one by one first), so popping the prefix up to it
// loses nothing.
// reason is the dead letters counter's (metrics.DeadPermanent,
// metrics.DeadRetries).
func (a *Applier) deadLetter(ctx context.Context, w store.Write, c change.Change, cause error, reason string) error {
	body, _ := json.Marshal([]string{strconv.FormatInt(c.Seq, 10) + "|0|" + string(change.Encode(c))})
	dl := &buffer.DeadLetter{Collection: w.Collection, ID: w.ID, Seq: c.Seq, Error: cause.Error(), At: time.Now().UTC(), Changes: body}
	if _, err := a.buf.Reject(ctx, w.Collection, w.ID, c.Seq, dl); err != nil {
		return err
	}
	a.m.DeadLettered.WithLabelValues(reason).Inc()
	a.log.Error("dead-lettered a buffered change the store rejected", "collection", w.Collection, "id", w.ID, "seq", c.Seq, "reason", reason, "err", cause)
	return nil
}

// deadError returns the store's error if the change (coll, id, seq) is a
// dead letter, and nil if it was applied.
func (a *Applier) deadError(ctx context.Context, coll, id string, seq int64) error {
	dls, err := a.buf.DeadLetters(ctx, 1<<20)
	if err != nil {
		return err
	}
	for _, d := range dls {
		if d.Collection == coll && d.ID == id && d.Seq == seq {
			return &store.Error{Permanent: true, Err: errors.New(d.Error)}
		}
	}
	return nil
}

// stop dead-letters a queue's head session: the queue stops until an
// operator replays or drops it. reason is the dead letters counter's
// (metrics.DeadPermanent, metrics.DeadRetries).
func (a *QueueApplier) stop(ctx context.Context, pd session.Pending, cause error, reason string) error {
	ok, err := a.q.Stop(ctx, pd, cause)
	if err != nil {
		return err
	}
	if ok {
		a.m.DeadLettered.WithLabelValues(reason).Inc()
		a.log.Error("the store rejected a session; its queue is stopped until it is replayed or dropped (writeback sessions deadletters)",
			"queue", pd.Object.Queue, "session", pd.Object.ID, "seq", pd.Seq, "reason", reason, "err", cause)
	}
	return nil
}

// isolate handles a batch of a queue's sessions, head, that the store
// rejected for good (err): it applies the sessions before the rejected one
// on their own, then stops the queue at it. It returns how many sessions
// it applied.
func (a *QueueApplier) isolate(ctx context.Context, f *session.Family, queue string, head []session.Pending, err error) (applied int, _ error) {
	i, ok := store.FailedSession(err)
	if !ok {
		// Not attributed to a session: find it by applying them one by one.
		for j := range head {
			k, err1 := a.applyBatch(ctx, f, queue, head[j:j+1])
			applied += k
			if err1 == nil {
				continue
			}
			if !store.IsPermanent(err1) {
				return applied, err1
			}
			return applied, a.stop(ctx, head[j], err1, metrics.DeadPermanent)
		}
		return applied, nil
	}
	if i > 0 {
		k, err1 := a.applyBatch(ctx, f, queue, head[:i])
		applied += k
		if err1 != nil {
			return applied, err1
		}
	}
	return applied, a.stop(ctx, head[i], err, metrics.DeadPermanent)
}
