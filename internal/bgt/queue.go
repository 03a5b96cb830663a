package bgt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/fault"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/session"
	"github.com/writeback/writeback/internal/store"
)

// Fault points of the queue appliers (see package fault).
const (
	// FaultQueueBeforeCommit is reached after a batch of sessions was read,
	// before the store transaction.
	FaultQueueBeforeCommit = "bgt.queue-before-commit"
	// FaultQueueAfterCommit is reached after the store committed a batch of
	// sessions and before they are popped from their queue.
	FaultQueueAfterCommit = "bgt.queue-after-commit"
)

// QueueConfig tunes the queue appliers.
type QueueConfig struct {
	InstanceID   string
	Workers      int
	BatchSize    int           // sessions per store transaction
	OwnerLease   time.Duration // ownership lease of a queue partition
	PollInterval time.Duration
	MaxRetries   int           // consecutive failures before the store's failure is logged at error level
	RetryBackoff time.Duration // first backoff after a store error
	CompactEvery time.Duration // applied-sessions compaction period (at least MinSessionCompactEvery)
	// BatchTimeout bounds the apply of one batch of a queue (default and
	// most: 30 s). A batch that outlives it is retried smaller (see
	// shrink).
	BatchTimeout time.Duration
}

// MinSessionCompactEvery is the shortest applied-sessions compaction
// period: twice the longest apply of a batch of sessions (BatchTimeout,
// at most batchTimeout, bounds every one, whoever runs it), see
// CompactApplied.
const MinSessionCompactEvery = 2 * batchTimeout

// QueueApplier applies Design 2's queues: it owns queue partitions through
// renewable ownership leases (a fair share of them, like the document
// appliers), and applies each queue of its partitions strictly in commit
// order, up to BatchSize sessions per store transaction, exactly once
// (store.SessionStore.ApplySessions), then pops what the store committed.
// A session the store rejects for good stops its queue (a dead letter)
// without blocking other queues. A batch that outlives BatchTimeout is
// retried smaller (see shrink), whoever applies it. Misses apply a queue's
// prefix through ApplyThrough, and Flush drains everything.
type QueueApplier struct {
	cfg  QueueConfig
	q    *session.Queues
	buf  *buffer.Buffer // the sidecar registry (heartbeats) shared with the document appliers
	fams map[string]*session.Family
	m    *metrics.Sessions
	log  *slog.Logger

	locks sync.Map // queue name → *sync.Mutex: one apply of a queue at a time in this process

	owned owned // the queue partitions this sidecar owns

	mu       sync.Mutex // guards live, failures, retryAt, shrunk, idle, warned
	live     int
	failures map[string]int // per queue: consecutive failed applies
	retryAt  map[string]time.Time
	shrunk   shrinks[string] // queues whose batches are smaller than BatchSize
	idle     map[string]bool // applied records whose session was gone at the last compaction round
	warned   time.Time
}

// NewQueueApplier returns the queue appliers over the given families.
func NewQueueApplier(cfg QueueConfig, q *session.Queues, buf *buffer.Buffer, fams map[string]*session.Family, m *metrics.Sessions, log *slog.Logger) *QueueApplier {
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 128
	}
	if cfg.MaxRetries <= 0 {
		cfg.MaxRetries = 5
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = 100 * time.Millisecond
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 100 * time.Millisecond
	}
	if cfg.OwnerLease <= 0 {
		cfg.OwnerLease = 3 * time.Second
	}
	if cfg.CompactEvery == 0 {
		cfg.CompactEvery = MinCompactEvery
	}
	if cfg.CompactEvery < MinSessionCompactEvery {
		cfg.CompactEvery = MinSessionCompactEvery
	}
	if cfg.BatchTimeout <= 0 || cfg.BatchTimeout > batchTimeout {
		// Never longer: CompactApplied's safety assumes batches end within it.
		cfg.BatchTimeout = batchTimeout
	}
	a := &QueueApplier{cfg: cfg, q: q, buf: buf, fams: fams, m: m, log: log,
		failures: map[string]int{}, retryAt: map[string]time.Time{}}
	a.shrunk = newShrinks[string](func(div int) bool { return a.batchSize(div) == 1 })
	return a
}

// batchSize is how many sessions a batch with shrink divisor div takes.
func (a *QueueApplier) batchSize(div int) int { return max(1, a.cfg.BatchSize/div) }

// Prepare creates writeback_applied_sessions in every store a family uses.
func (a *QueueApplier) Prepare(ctx context.Context) error {
	done := map[string]bool{}
	for _, f := range a.fams {
		if done[f.StoreName] {
			continue
		}
		done[f.StoreName] = true
		if err := f.Store.PrepareSessions(ctx); err != nil {
			return fmt.Errorf("store %s: %v", f.StoreName, err)
		}
	}
	return nil
}

// Owned returns the queue partitions this sidecar owns, sorted.
func (a *QueueApplier) Owned() []int { return a.owned.list() }

// Run keeps ownership of a fair share of the queue partitions and applies
// their queues until ctx is done, then releases them.
func (a *QueueApplier) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for w := range a.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.worker(ctx, w)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.compactLoop(ctx)
	}()
	a.tickOwnership(ctx)
	t := time.NewTicker(a.cfg.OwnerLease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			a.releaseAll()
			return nil
		case <-t.C:
			a.tickOwnership(ctx)
		}
	}
}

// tickOwnership renews owned partitions and moves towards this sidecar's
// fair share (see Applier.tickOwnership).
func (a *QueueApplier) tickOwnership(ctx context.Context) {
	live, err := a.buf.Heartbeat(ctx, a.cfg.InstanceID, a.cfg.OwnerLease)
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn("sidecar heartbeat", "err", err)
		}
		return
	}
	for _, p := range rebalance(ctx, a.q, a.cfg.InstanceID, a.cfg.OwnerLease, a.q.Keys().Partitions(), live, a.Owned(), a.owned.set) {
		a.log.Info("lost ownership of queue partition", "partition", p)
	}
	a.mu.Lock()
	a.live = live
	a.mu.Unlock()
	a.m.OwnedPartitions.Set(float64(len(a.Owned())))
}

func (a *QueueApplier) releaseAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, p := range a.Owned() {
		if err := a.q.Release(ctx, p, a.cfg.InstanceID); err != nil {
			a.log.Warn("releasing queue partition", "partition", p, "err", err)
		}
	}
	a.owned.clear()
	a.m.OwnedPartitions.Set(0)
}

// worker applies the queues of the owned partitions p with p % Workers ==
// w, one batch per queue per round; idle, it polls less and less often
// (down to one tick in 8).
func (a *QueueApplier) worker(ctx context.Context, w int) {
	t := time.NewTicker(a.cfg.PollInterval)
	defer t.Stop()
	idle, skip := 0, 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if skip > 0 {
			skip--
			continue
		}
		for {
			var parts []int
			for _, p := range a.Owned() {
				if p%a.cfg.Workers == w {
					parts = append(parts, p)
				}
			}
			n, more := a.round(ctx, parts)
			if n > 0 {
				idle = 0
			} else {
				idle = min(idle+1, 7)
			}
			skip = idle
			if !more || ctx.Err() != nil {
				break
			}
		}
	}
}

// round applies one batch of each queue of parts that is neither stopped
// nor backing off. more reports that a queue had more than a batch. Each
// batch has its own timeout: a round of many queues takes as long as they
// need. Once ctx is done no batch starts, but one that started finishes
// (bounded), so that SIGTERM does not turn into replays.
func (a *QueueApplier) round(ctx context.Context, parts []int) (applied int, more bool) {
	if len(parts) == 0 {
		return 0, false
	}
	reg, err := a.q.Registered(ctx, parts)
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn("polling queues", "err", err)
		}
		return 0, false
	}
	if len(reg) == 0 {
		return 0, false
	}
	stopped, err := a.q.Stopped(ctx, parts)
	if err != nil {
		return 0, false
	}
	now := time.Now()
	for _, p := range parts {
		for _, queue := range reg[p] {
			if stopped[queue] {
				continue
			}
			if ctx.Err() != nil {
				return applied, false
			}
			a.mu.Lock()
			wait := now.Before(a.retryAt[queue])
			a.mu.Unlock()
			if wait {
				continue
			}
			n, full, err := a.applyQueue(context.WithoutCancel(ctx), queue, 0)
			applied += n
			a.noteResult(queue, err)
			more = more || (full && err == nil)
		}
	}
	return applied, more
}

// noteResult keeps a queue's failure count and backoff.
func (a *QueueApplier) noteResult(queue string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err == nil {
		delete(a.failures, queue)
		delete(a.retryAt, queue)
		return
	}
	a.failures[queue]++
	n := a.failures[queue]
	a.retryAt[queue] = time.Now().Add(Backoff(a.cfg.RetryBackoff, n))
	if n == a.cfg.MaxRetries {
		a.log.Error("the store keeps failing; the queue's sessions wait and are retried with backoff", "queue", queue, "failures", n, "err", err)
	} else {
		a.log.Warn("applying a queue", "queue", queue, "err", err)
	}
}

// family returns the family of a queue, or nil when it is not configured
// here.
func (a *QueueApplier) family(queue string) *session.Family {
	name, _, _ := strings.Cut(queue, "/")
	return a.fams[name]
}

func (a *QueueApplier) lock(queue string) *sync.Mutex {
	v, _ := a.locks.LoadOrStore(queue, &sync.Mutex{})
	return v.(*sync.Mutex)
}

// applyQueue applies one batch from the head of queue: up to BatchSize
// sessions (fewer while the queue's batches are shrunk), and only those
// with seq <= through when through > 0. full reports that the batch was
// full.
func (a *QueueApplier) applyQueue(ctx context.Context, queue string, through int64) (applied int, full bool, err error) {
	mu := a.lock(queue)
	mu.Lock()
	defer mu.Unlock()
	f := a.family(queue)
	if f == nil {
		a.warnUnknown(queue)
		return 0, false, nil
	}
	a.mu.Lock()
	div := a.shrunk.divisor(queue)
	a.mu.Unlock()
	// Bounded, whoever calls (the compaction's safety depends on it).
	bctx, cancel := context.WithTimeout(ctx, a.cfg.BatchTimeout)
	defer cancel()
	applied, full, err = a.applyHead(bctx, f, queue, a.batchSize(div), through)
	// A batch that outlived its own timeout, not its caller's, is
	// retried smaller.
	timedOut := err != nil && errors.Is(bctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	a.mu.Lock()
	next := a.shrunk.resize([]string{queue}, div, timedOut, err == nil)
	a.mu.Unlock()
	if timedOut {
		a.log.Warn("applying a batch of a queue outlived its timeout; the queue's next batches are smaller",
			"queue", queue, "timeout", a.cfg.BatchTimeout, "sessions", a.batchSize(next))
	}
	return applied, full, err
}

// applyHead applies up to size sessions from the head of queue (see
// applyQueue).
func (a *QueueApplier) applyHead(ctx context.Context, f *session.Family, queue string, size int, through int64) (applied int, full bool, err error) {
	head, err := a.q.Head(ctx, queue, size)
	if err != nil {
		return 0, false, err
	}
	full = len(head) == size
	if through > 0 {
		k := sort.Search(len(head), func(i int) bool { return head[i].Seq > through })
		full = full && k == len(head)
		head = head[:k]
	}
	if len(head) == 0 {
		return 0, false, nil
	}
	// A session without its object cannot be applied: stop the queue
	// there rather than skip it.
	for i, pd := range head {
		if pd.Missing {
			if i == 0 {
				return 0, false, a.stop(ctx, pd, errors.New("the session object is missing from Redis"))
			}
			head, full = head[:i], false
			break
		}
	}
	n, err := a.applyBatch(ctx, f, queue, head)
	if err == nil || !store.IsPermanent(err) || ctx.Err() != nil {
		return n, full, err
	}
	// The store rejected a session for good: apply the sessions before it
	// on their own, then stop the queue at it.
	i, ok := store.FailedSession(err)
	if !ok {
		// Not attributed to a session: find it by applying them one by one.
		for j := range head {
			k, err1 := a.applyBatch(ctx, f, queue, head[j:j+1])
			n += k
			if err1 == nil {
				continue
			}
			if !store.IsPermanent(err1) {
				return n, false, err1
			}
			return n, false, a.stop(ctx, head[j], err1)
		}
		return n, false, nil
	}
	if i > 0 {
		k, err1 := a.applyBatch(ctx, f, queue, head[:i])
		n += k
		if err1 != nil {
			return n, false, err1
		}
	}
	return n, false, a.stop(ctx, head[i], err)
}

// applyBatch runs sessions in one store transaction and pops them.
func (a *QueueApplier) applyBatch(ctx context.Context, f *session.Family, queue string, head []session.Pending) (int, error) {
	sessions := make([]store.Session, len(head))
	for i, pd := range head {
		sessions[i] = store.Session{ID: pd.Object.ID, Queue: queue, Seq: pd.Seq, Statements: pd.Object.Statements}
	}
	fault.Hit(FaultQueueBeforeCommit)
	start := time.Now()
	applied, err := f.Store.ApplySessions(ctx, sessions)
	if err != nil {
		kind := metrics.ErrorTransient
		if store.IsPermanent(err) {
			kind = metrics.ErrorPermanent
		}
		a.m.ApplyErrors.WithLabelValues(kind).Inc()
		return 0, fmt.Errorf("store %s: %w", f.StoreName, err)
	}
	a.m.ApplyDuration.Observe(time.Since(start).Seconds())
	a.m.ApplyBatchSize.Observe(float64(len(sessions)))
	fault.Hit(FaultQueueAfterCommit)
	n := 0
	for _, ok := range applied {
		if ok {
			n++
		} else {
			a.m.DuplicatesSkipped.Inc()
		}
	}
	a.m.Applied.WithLabelValues(f.Name).Add(float64(n))
	if _, err := a.q.Pop(ctx, queue, head); err != nil {
		return n, err
	}
	return n, nil
}

// stop dead-letters a queue's head session: the queue stops until an
// operator replays or drops it.
func (a *QueueApplier) stop(ctx context.Context, pd session.Pending, cause error) error {
	ok, err := a.q.Stop(ctx, pd, cause)
	if err != nil {
		return err
	}
	if ok {
		a.log.Error("the store rejected a session; its queue is stopped until it is replayed or dropped (writeback sessions deadletters)",
			"queue", pd.Object.Queue, "session", pd.Object.ID, "seq", pd.Seq, "err", cause)
	}
	return nil
}

func (a *QueueApplier) warnUnknown(queue string) {
	a.mu.Lock()
	due := time.Since(a.warned) > time.Minute
	if due {
		a.warned = time.Now()
	}
	a.mu.Unlock()
	if due {
		a.log.Warn("a queue's family is not configured here; configure it or apply it from a sidecar that does", "queue", queue)
	}
}

// applyThroughAttempts bounds the transient failures a miss rides out
// while applying a queue prefix (a racing applier's commit, a deadlock).
const applyThroughAttempts = 5

// ApplyThrough applies queue's sessions up to and including seq (a miss on
// a key whose mapping names seq). A stopped queue in the way is a
// *session.QueueStoppedError.
func (a *QueueApplier) ApplyThrough(ctx context.Context, queue string, seq int64) error {
	failures := 0
	for {
		stopped, err := a.q.IsStopped(ctx, queue)
		if err != nil {
			return err
		}
		head, err := a.q.Head(ctx, queue, 1)
		if err != nil {
			return err
		}
		if len(head) == 0 || head[0].Seq > seq {
			return nil
		}
		if stopped {
			return &session.QueueStoppedError{Queue: queue}
		}
		if a.family(queue) == nil {
			return fmt.Errorf("bgt: queue %s is not configured here", queue)
		}
		if _, _, err := a.applyQueue(ctx, queue, seq); err != nil {
			if failures++; failures >= applyThroughAttempts || ctx.Err() != nil {
				return err
			}
			if err := sleepCtx(ctx, Backoff(a.cfg.RetryBackoff/4, failures)); err != nil {
				return err
			}
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// QueueFlushResult counts what FlushQueues did.
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
	all := make([]int, a.q.Keys().Partitions())
	for i := range all {
		all[i] = i
	}
	failures := 0
	for ctx.Err() == nil {
		reg, err := a.q.Registered(ctx, all)
		if err != nil {
			return res, err
		}
		stopped, err := a.q.Stopped(ctx, all)
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
		var (
			mu      sync.Mutex // guards res.Applied and lastErr
			lastErr error
			wg      sync.WaitGroup
			next    = make(chan string)
		)
		for range min(a.cfg.Workers*2, len(todo)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for queue := range next {
					for ctx.Err() == nil {
						n, full, err := a.applyQueue(ctx, queue, 0)
						mu.Lock()
						res.Applied += int64(n)
						if err != nil {
							lastErr = err
						}
						mu.Unlock()
						if err != nil || !full {
							break
						}
					}
				}
			}()
		}
		for _, q := range todo {
			next <- q
		}
		close(next)
		wg.Wait()
		if lastErr != nil {
			failures++
			if err := sleepCtx(ctx, Backoff(a.cfg.RetryBackoff, failures)); err != nil {
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
