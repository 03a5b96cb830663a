package bgt

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/session"
	"github.com/writeback/writeback/internal/store"
)

// ApplyDoc applies a document's buffered writes now, up to at least seq
// (write-through). It returns a permanent store error when the store
// rejected the change with sequence seq itself (that change is then a dead
// letter, and only that one); changes of other clients that the store
// rejects are dead-lettered without failing this one.
func (a *Applier) ApplyDoc(ctx context.Context, coll, id string, seq int64) error {
	c := a.colls[coll]
	if c == nil {
		return fmt.Errorf("bgt: unknown collection %q", coll)
	}
	ref := a.buf.Ref(coll, id)
	pl := &a.parts[ref.Part]
	pl.waiting.Add(1)
	pl.Lock()
	pl.waiting.Add(-1)
	defer pl.Unlock()
	for {
		changes, err := a.buf.Changes(ctx, []buffer.DocRef{ref}, a.cfg.MaxPerDoc)
		if err != nil {
			return err
		}
		cs := changes[0]
		if len(cs) == 0 || cs[0].Seq > seq {
			// Applied — or dead-lettered — by someone else: tell which.
			return a.deadError(ctx, coll, id, seq)
		}
		w := store.Write{Collection: coll, Table: c.Table, ID: id, Partition: ref.Part, Changes: cs}
		res, err := a.apply(ctx, c.Store, []store.Write{w}, nil)
		if err != nil {
			a.m.ApplyErrors.WithLabelValues(errKind(err)).Inc()
			if !store.IsPermanent(err) {
				return err
			}
			_, dead, ierr := a.isolate(ctx, c.Store, w, false)
			if ierr != nil {
				return ierr
			}
			if slices.Contains(dead, seq) {
				return err
			}
			continue
		}
		_, done, _ := a.account([]store.Write{w}, res)
		if _, err := a.buf.Trim(ctx, done); err != nil {
			return err
		}
		if cs[len(cs)-1].Seq >= seq {
			return nil
		}
	}
}

// FlushResult counts what Flush did.
type FlushResult struct {
	Applied int64
	Pending int64 // changes still pending when it returned
	Drained bool
}

// Flush applies everything pending in every partition (owned or not: the
// applied records make a race with another sidecar's applier harmless)
// until nothing is pending or ctx is done.
func (a *Applier) Flush(ctx context.Context) (FlushResult, error) {
	var res FlushResult
	all := partitions(a.buf.Partitions())
	attempt := 0
	lastTotal := int64(-1)
	for {
		if ctx.Err() != nil {
			return a.flushCut(res), nil
		}
		counts, err := a.buf.PendingCounts(ctx, all, 0)
		if err != nil {
			if ctx.Err() != nil {
				return a.flushCut(res), nil
			}
			return res, err
		}
		var todo []int
		var total int64
		for p, n := range counts {
			if n > 0 {
				todo = append(todo, p)
				total += n
			}
		}
		if len(todo) == 0 {
			res.Drained = true
			return res, nil
		}
		before := res.Applied
		// Each of n goroutines applies rounds of every n-th partition.
		n := min(a.cfg.Workers*2, len(todo))
		chunks := make([][]int, n)
		for i, p := range todo {
			chunks[i%n] = append(chunks[i%n], p)
		}
		applied, lastErr := drain(ctx, n, chunks, func(chunk []int) (int, bool, error) {
			return a.ApplyRound(ctx, chunk)
		})
		res.Applied += applied
		if lastErr != nil && ctx.Err() == nil {
			attempt++
			_ = pause(ctx, Backoff(a.cfg.RetryBackoff, attempt))
			continue
		}
		if ctx.Err() != nil {
			return a.flushCut(res), nil
		}
		if res.Applied == before && total == lastTotal {
			// Two passes without progress or error: what is left belongs
			// to collections this sidecar does not serve.
			st, _ := a.buf.Stats(ctx)
			res.Pending = st.PendingChanges
			return res, fmt.Errorf("bgt: %d pending documents belong to collections this sidecar does not serve", st.PendingDocuments)
		}
		lastTotal = total
	}
}

// flushCut is the result of a flush whose time ran out: what it applied,
// and what is still pending (read on a context of its own, since the
// flush's is done). It is not an error: the caller reports the pending
// changes.
func (a *Applier) flushCut(res FlushResult) FlushResult {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, _ := a.buf.Stats(ctx)
	res.Pending = st.PendingChanges
	return res
}

// applyThroughAttempts bounds the transient failures a miss rides out
// while applying a queue prefix (a racing applier's commit, a deadlock).
const applyThroughAttempts = 5

// maxLostRaces bounds the races a miss may lose in a row while applying a
// queue prefix before one more counts as a failure. Each lost race is
// another applier's progress through the same prefix, so the bound is
// only a guard against a store that keeps saying so without it.
const maxLostRaces = 64

// ApplyThrough applies queue's sessions up to and including seq (a miss on
// a key whose mapping names seq). A stopped queue in the way is a
// *session.QueueStoppedError.
func (a *QueueApplier) ApplyThrough(ctx context.Context, queue string, seq int64) error {
	failures, lost := 0, 0
	for {
		first, ok, stopped, err := a.q.First(ctx, queue)
		if err != nil {
			return err
		}
		if !ok || first > seq {
			return nil
		}
		if stopped {
			return &session.QueueStoppedError{Queue: queue}
		}
		if a.family(queue) == nil {
			return fmt.Errorf("bgt: queue %s is not configured here", queue)
		}
		if _, _, err := a.applyQueue(ctx, queue, seq); err != nil {
			// A lost race means another applier applied sessions of the
			// prefix: read the head again at once.
			if store.IsConcurrentApply(err) && ctx.Err() == nil && lost < maxLostRaces {
				lost++
				continue
			}
			if failures++; failures >= applyThroughAttempts || ctx.Err() != nil {
				return err
			}
			if err := pause(ctx, Backoff(a.cfg.RetryBackoff/4, failures)); err != nil {
				return err
			}
		}
	}
}

// QueueFlushResult counts what QueueApplier.Flush did.
type QueueFlushResult struct {
	Applied int64 `json:"applied"`
	Pending int64 `json:"pending"` // sessions still pending
	Stopped int64 `json:"stopped"` // queues stopped by dead letters
	Drained bool  `json:"drained"` // nothing pending but behind dead letters
}

// Flush applies every pending session of every queue partition (owned or
// not: the applied records make a race harmless) until only stopped queues
// hold sessions or ctx is done.
func (a *QueueApplier) Flush(ctx context.Context) (QueueFlushResult, error) {
	var res QueueFlushResult
	all := partitions(a.q.Keys().Partitions())
	failures := 0
	for ctx.Err() == nil {
		reg, stopped, err := a.q.Registered(ctx, all)
		if err != nil {
			return res, err
		}
		var todo []string
		for _, p := range all {
			for _, queue := range reg[p] {
				if !stopped[queue] && a.family(queue) != nil {
					todo = append(todo, queue)
				}
			}
		}
		if len(todo) == 0 {
			break
		}
		applied, lastErr := drain(ctx, min(a.cfg.Workers*2, len(todo)), todo, func(queue string) (int, bool, error) {
			return a.applyQueue(ctx, queue, 0)
		})
		res.Applied += applied
		if lastErr != nil {
			failures++
			if err := pause(ctx, Backoff(a.cfg.RetryBackoff, failures)); err != nil {
				break
			}
		}
	}
	st, err := a.q.Stats(context.WithoutCancel(ctx))
	if err != nil {
		return res, err
	}
	res.Stopped = st.StoppedQueues
	res.Pending = st.PendingSessions
	// Sessions waiting behind a dead letter are the operator's to release.
	res.Drained = ctx.Err() == nil
	return res, nil
}

// drain applies units on up to n goroutines at once: each unit again and
// again while apply reports it full, until it is not, fails or ctx is done.
// It returns how much was applied and the last error.
func drain[T any](ctx context.Context, n int, units []T, apply func(T) (int, bool, error)) (applied int64, lastErr error) {
	var (
		mu   sync.Mutex // guards applied and lastErr
		wg   sync.WaitGroup
		next = make(chan T)
	)
	for range n {
		wg.Go(func() {
			for u := range next {
				for ctx.Err() == nil {
					k, full, err := apply(u)
					mu.Lock()
					applied += int64(k)
					if err != nil {
						lastErr = err
					}
					mu.Unlock()
					if err != nil || !full {
						break
					}
				}
			}
		})
	}
	for _, u := range units {
		next <- u
	}
	close(next)
	wg.Wait()
	return applied, lastErr
}

// partitions returns the partitions 0 … n-1.
func partitions(n int) []int {
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	return all
}
