package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/writeback/writeback/internal/lease"
	"github.com/writeback/writeback/internal/metrics"
)

// DefaultLeaseWait bounds how long a session waits for a lease another
// session holds (writeback.leaseWait) when Config leaves it zero.
const DefaultLeaseWait = time.Second

// maxPoll is the longest pause between two tries of a waiting request. A
// release by a session of this process wakes its waiters at once
// (wakeups); the poll is for releases elsewhere (another sidecar, a lease
// that expired), so it bounds their extra latency. Measured on TPC-C with
// one sidecar, every hand-over is a wake-up; with several, a waiter costs
// at most one script call per maxPoll.
const maxPoll = 8 * time.Millisecond

// wakeups lets a session that releases leases wake the requests of this
// process waiting for them, instead of their polling Redis hard.
//
// A waiter takes the key's channel before it runs its request script, and
// sleeps on it after a "wait" answer. A release closes the channel after
// its script ran. So a release that lands between the waiter's script and
// its sleep finds the channel the waiter holds and closes it: the waiter
// does not sleep through it.
type wakeups struct {
	mu sync.Mutex // guards ch
	ch map[string]chan struct{}
}

// watch returns the channel closed at the next release of lease record
// key.
func (w *wakeups) watch(key string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = map[string]chan struct{}{}
	}
	c, ok := w.ch[key]
	if !ok {
		c = make(chan struct{})
		w.ch[key] = c
	}
	return c
}

// wake wakes the waiters of the lease records keys.
func (w *wakeups) wake(keys ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range keys {
		if c, ok := w.ch[k]; ok {
			close(c)
			delete(w.ch, k)
		}
	}
}

// pause sleeps until woke is closed, the n-th poll interval passes or ctx
// is done.
func pause(ctx context.Context, woke <-chan struct{}, n int) error {
	t := time.NewTimer(lease.Backoff(time.Millisecond, maxPoll, n))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-woke:
		return nil
	case <-t.C:
		return nil
	}
}

// waitPlan is what a session's record says of one lease request: its age
// and how long it may wait.
type waitPlan struct {
	start    int64 // the session's start (µs, its age)
	deadline int64 // ms on Redis's clock
	first    bool  // the session's first lease: its record's "f" is now
	notes    int64 // the record's count of notes, this one included
}

// note records keys and the lease mode asked for on each in the session's
// record and returns the requests' wait plan (recordScript). begin, when
// not zero, is the start of a session note begins (its id new).
func (s *Service) note(ctx context.Context, id string, begin int64, mode string, keys ...string) (waitPlan, error) {
	return notePlan(recordScript.Run(ctx, s.rdb, []string{s.keys.Record(id)}, s.noteArgs(begin, mode, keys)...).Result())
}

// noteArgs are recordScript's arguments for noting keys in mode.
func (s *Service) noteArgs(begin int64, mode string, keys []string) []any {
	args := make([]any, 0, 4+2*len(keys))
	args = append(args, s.cfg.SessionTimeout.Milliseconds(), s.cfg.LeaseWait.Milliseconds(), s.cfg.LeaseLifetime.Milliseconds(), begin)
	for _, k := range keys {
		args = append(args, "k:"+k, mode)
	}
	return args
}

// notePlan reads recordScript's answer.
func notePlan(v any, err error) (waitPlan, error) {
	if err != nil {
		return waitPlan{}, fmt.Errorf("session: %w", err)
	}
	a, ok := v.([]any)
	if !ok || len(a) < 3 {
		return waitPlan{}, ErrUnknownSession
	}
	st, _ := a[0].(int64)
	dl, _ := a[1].(int64)
	first, _ := a[2].(int64)
	var notes int64
	if len(a) > 3 {
		notes, _ = a[3].(int64)
	}
	return waitPlan{start: st, deadline: dl, first: first == 1, notes: notes}, nil
}

// waited ends a wait that was granted: the record's first-lease time moves
// to the grant if this was the session's first lease (its budget counts
// from there), and the key's other waiters here try again (S waiters
// behind an S are granted together).
func (s *Service) waited(ctx context.Context, id string, wp waitPlan, since time.Time, lkey string) {
	s.endWait(metrics.WaitGranted, since)
	s.wakes.wake(lkey)
	if wp.first {
		if err := s.rdb.HIncrBy(ctx, s.keys.Record(id), "f", time.Since(since).Milliseconds()).Err(); err != nil {
			s.log.Debug("moving a session's first-lease time", "err", err)
		}
	}
}

// endWait counts a wait that ended with outcome (metrics.Wait…).
func (s *Service) endWait(outcome string, since time.Time) {
	s.m.LeaseWaits.WithLabelValues(outcome).Inc()
	s.m.LeaseWaitSeconds.Observe(time.Since(since).Seconds())
}

// leave takes a request that gives up for another reason than its verdict
// out of the key's wait queue.
func (s *Service) leave(ctx context.Context, k lease.Key, w lease.Waiter) {
	if err := s.leases.Leave(context.WithoutCancel(ctx), k, w); err != nil {
		s.log.Debug("leaving a wait queue", "err", err)
	}
}

// errGolden says the X lease a commit waits for is refused by a golden S:
// the commit retries with backoff instead.
var errGolden = errors.New("session: refused by a golden S lease")

// acquireX waits for an X lease on key (partition p) for a commit whose
// script met an older session's X lease there: the key joins the session's
// record (so that its release covers it), then the lease is asked for
// until it is granted, refused by a golden S (errGolden) or the wait is
// over (AbortedError).
func (s *Service) acquireX(ctx context.Context, id string, p int, key string, read map[string]string) error {
	wp, err := s.note(ctx, id, 0, string(lease.Exclusive), key)
	if err != nil {
		return err
	}
	read[key] = string(lease.Exclusive)
	k := s.keys.LeaseKey(p, key)
	w := lease.Waiter{ID: id, Mode: lease.Exclusive, Start: wp.start, Deadline: wp.deadline}
	since := time.Now()
	for n := 1; ; n++ {
		woke := s.wakes.watch(k.Lease)
		j, err := s.leases.Request(ctx, k, w, s.cfg.LeaseLifetime)
		if err != nil {
			s.leave(ctx, k, w)
			return fmt.Errorf("session: commit: %w", err)
		}
		switch j.Verdict {
		case lease.Granted:
			if n > 1 {
				s.waited(ctx, id, wp, since, k.Lease)
			}
			return nil
		case lease.Refused:
			return errGolden
		case lease.TimedOut:
			s.endWait(metrics.WaitTimeout, since)
			return &AbortedError{Reason: ReasonConflict, Conflict: j.Conflict, Key: key, Waited: time.Since(since)}
		}
		if n == 1 {
			s.base.LeaseConflicts.WithLabelValues(string(j.Conflict)).Inc()
		}
		if err := pause(ctx, woke, n); err != nil {
			s.endWait(metrics.WaitCancelled, since)
			s.leave(ctx, k, w)
			return err
		}
	}
}
