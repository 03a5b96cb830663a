package bgt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	PollInterval time.Duration // how often owned partitions are checked for work
	// MaxRetries is how many times in a row a queue's batch may fail with
	// an error outside the permanent list before it is split to find the
	// session that keeps failing (see split); 0: retried forever.
	MaxRetries   int
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
	// The scheduler runs the rounds on the owned queue partitions and
	// keeps each queue's failures and shrink; mu guards them (see
	// scheduler).
	*scheduler[string]

	cfg  QueueConfig
	q    *session.Queues
	fams map[string]*session.Family
	m    *metrics.Sessions
	log  *slog.Logger

	locks sync.Map // queue name → *sync.Mutex: one apply of a queue at a time in this process

	unknown throttle // warnings about queues of families not configured here

	compacting sync.Mutex      // held by a compaction round; guards idle
	idle       map[string]bool // applied records whose session was gone at the last compaction round
}

// NewQueueApplier returns the queue appliers over the given families.
func NewQueueApplier(cfg QueueConfig, q *session.Queues, buf *buffer.Buffer, fams map[string]*session.Family, m *metrics.Sessions, log *slog.Logger) *QueueApplier {
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 128
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
	a := &QueueApplier{cfg: cfg, q: q, fams: fams, m: m, log: log}
	a.scheduler = newScheduler[string](plan{
		id: cfg.InstanceID, workers: cfg.Workers, ownerLease: cfg.OwnerLease, poll: cfg.PollInterval,
		compactEvery: cfg.CompactEvery, batchTimeout: cfg.BatchTimeout, retryBackoff: cfg.RetryBackoff,
		registry: buf, leases: q, parts: q.Keys().Partitions(), // buf: the sidecar registry, shared with the document applier
		what: "queue partition", polled: "queues",
		timedOut: "applying a batch of a queue outlived its timeout; the queue's next batches are smaller",
		size:     func(div int) []any { return []any{"sessions", a.batchSize(div)} },
		minimal:  func(div int) bool { return a.batchSize(div) == 1 },
		setOwned: func(n int) { a.m.OwnedPartitions.Set(float64(n)) },
		timeouts: a.m.BatchTimeouts, shrinks: a.m.BatchShrinks,
	}, a, log)
	return a
}

// batchSize is how many sessions a batch with shrink divisor div takes.
func (a *QueueApplier) batchSize(div int) int { return max(1, a.cfg.BatchSize/div) }

// Prepare creates writeback_applied_sessions in every store a family uses,
// and writeback_session_locks in the MySQL stores of serial families.
func (a *QueueApplier) Prepare(ctx context.Context) error {
	done, locks := map[string]bool{}, map[string]bool{}
	for _, f := range a.fams {
		if !done[f.StoreName] {
			done[f.StoreName] = true
			if err := f.Store.PrepareSessions(ctx); err != nil {
				return fmt.Errorf("store %s: %v", f.StoreName, err)
			}
		}
		if lp, ok := f.Store.(store.SessionLockPreparer); ok && f.Serial && !locks[f.StoreName] {
			locks[f.StoreName] = true
			if err := lp.PrepareSessionLocks(ctx); err != nil {
				return fmt.Errorf("store %s: %v", f.StoreName, err)
			}
		}
	}
	return nil
}

// Run keeps ownership of a fair share of the queue partitions and applies
// their queues until ctx is done, then releases them.
func (a *QueueApplier) Run(ctx context.Context) error {
	a.run(ctx)
	return nil
}

var _ rounds = (*QueueApplier)(nil)

// due returns, by partition, the queues of parts to apply now: registered,
// not stopped, of a family configured here, and not backing off after a
// failure. held reports that none is due only because they all back off.
func (a *QueueApplier) due(ctx context.Context, parts []int) (due map[int][]string, held bool, err error) {
	reg, stopped, err := a.q.Registered(ctx, parts)
	if err != nil || len(reg) == 0 {
		return nil, false, err
	}
	now := time.Now()
	due = map[int][]string{}
	for p, queues := range reg {
		for _, queue := range queues {
			switch {
			case stopped[queue]:
			case a.family(queue) == nil:
				a.warnUnknown(queue)
			case a.waiting(queue, now):
				held = true
			default:
				due[p] = append(due[p], queue)
			}
		}
	}
	return due, held && len(due) == 0, nil
}

// ready returns those of parts with a queue due (see rounds).
func (a *QueueApplier) ready(ctx context.Context, parts []int) (todo []int, held bool, err error) {
	due, held, err := a.due(ctx, parts)
	for _, p := range parts {
		if len(due[p]) > 0 {
			todo = append(todo, p)
		}
	}
	return todo, held, err
}

// round applies one batch of each queue of parts that is due (see rounds).
// more reports that a queue had more than a batch, or lost a race. Each batch has its own
// timeout: a round of many queues takes as long as they need. Once ctx is
// done no batch starts, but one that started finishes (bounded), so that
// SIGTERM does not turn into replays.
func (a *QueueApplier) round(ctx context.Context, parts []int) (more bool) {
	due, _, err := a.due(ctx, parts)
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn("polling queues", "err", err)
		}
		return false
	}
	for _, p := range parts {
		for _, queue := range due[p] {
			if ctx.Err() != nil {
				return false
			}
			_, full, err := a.applyQueue(context.WithoutCancel(ctx), queue, 0)
			a.noteResult(queue, err)
			// A queue whose batch was full is read again at once: it has a
			// backlog. One whose batch was not waits for the next poll, as
			// the document appliers' partitions do, and gathers the sessions
			// committed meanwhile into one batch: a store transaction, its
			// applied records and the pop in Redis cost about as much for
			// eight sessions as for thirty, so a busy queue applied as soon
			// as anything arrives spends several times the work per session
			// (benchmarks/README, session 24). Nothing waits on it: a miss
			// that needs a pending session applies the queue through it
			// itself, a write-through commit applies itself, and Flush
			// drains. After a lost race the queue has moved on: read what is
			// left at once.
			more = more || (full && err == nil) || store.IsConcurrentApply(err)
		}
	}
	return more
}

// noteResult keeps a queue's failure count and backoff, and logs a
// failure: at error level once, when it failed errorLogAt times in a row.
// A lost race with another applier is not a failure: the other applied
// sessions of the queue, and the next round reads what is left at once.
func (a *QueueApplier) noteResult(queue string, err error) {
	if store.IsConcurrentApply(err) {
		a.log.Debug("another applier applied sessions of this queue first; reading its head again", "queue", queue)
		err = nil
	}
	n := a.note([]string{queue}, err)
	if err == nil {
		return
	}
	if n == errorLogAt(a.cfg.MaxRetries) {
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

// lock returns the mutex of queue (see QueueApplier.locks).
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
	// Bounded, whoever calls (the compaction's safety depends on it).
	err = a.bounded(ctx, []string{queue}, func(bctx context.Context, div int) (err error) {
		applied, full, err = a.applyHead(bctx, f, queue, a.batchSize(div), through)
		return err
	}, "queue", queue)
	return applied, full, err
}

// applyHead applies up to size sessions from the head of queue (see
// applyQueue).
func (a *QueueApplier) applyHead(ctx context.Context, f *session.Family, queue string, size int, through int64) (applied int, full bool, err error) {
	head, err := a.q.Head(ctx, queue, size, through)
	if err != nil {
		return 0, false, err
	}
	full = len(head) == size
	if len(head) == 0 {
		return 0, false, nil
	}
	// A session without its object cannot be applied: stop the queue
	// there rather than skip it.
	for i, pd := range head {
		if pd.Missing {
			if i == 0 {
				return 0, false, a.stop(ctx, pd, errors.New("the session object is missing from Redis"), metrics.DeadPermanent)
			}
			head, full = head[:i], false
			break
		}
	}
	n, err := a.applyBatch(ctx, f, queue, head)
	switch {
	case err == nil || ctx.Err() != nil:
		return n, full, err
	case store.IsPermanent(err):
		k, err := a.isolate(ctx, f, queue, head, err)
		return n + k, false, err
	case a.stuck(queue) && store.Isolable(err):
		a.log.Warn("a batch of a queue keeps failing; splitting it to find the session the store refuses",
			"queue", queue, "sessions", len(head), "err", err)
		k, err := a.split(ctx, f, queue, head, err)
		return n + k, false, err
	}
	a.m.ApplyRetries.Inc()
	return n, full, err
}

// applyBatch runs sessions in one store transaction and pops them.
func (a *QueueApplier) applyBatch(ctx context.Context, f *session.Family, queue string, head []session.Pending) (int, error) {
	lock := ""
	if f.Serial {
		lock = f.Name
	}
	sessions := make([]store.Session, len(head))
	for i, pd := range head {
		sessions[i] = store.Session{ID: pd.Object.ID, Queue: queue, Seq: pd.Seq, Statements: pd.Object.Statements, Role: f.Role, Lock: lock}
	}
	fault.Hit(FaultQueueBeforeCommit)
	start := time.Now()
	applied, err := f.Store.ApplySessions(ctx, sessions)
	if err != nil {
		a.m.ApplyErrors.WithLabelValues(errKind(err)).Inc()
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

// warnUnknown logs, at most once a minute, that a queue's family is not
// configured here.
func (a *QueueApplier) warnUnknown(queue string) {
	if a.unknown.due(time.Minute) {
		a.log.Warn("a queue's family is not configured here; configure it or apply it from a sidecar that does", "queue", queue)
	}
}
