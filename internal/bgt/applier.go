package bgt

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/jitter"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/store"
)

// Collection is what an applier needs to know of a collection.
type Collection struct {
	Name      string
	StoreName string
	Store     store.Store
	Table     *store.Table
}

// Config tunes the appliers.
type Config struct {
	InstanceID   string
	Workers      int
	BatchSize    int           // documents per store transaction
	MaxPerDoc    int           // changes of one document per batch (default 1024)
	OwnerLease   time.Duration // ownership lease lifetime
	PollInterval time.Duration // how often owned partitions are checked for work
	// ApplyDelay is how long a document stays pending before the workers
	// take it: the writes it gets meanwhile reach the store in the same
	// row write (0: at once). Flush, ApplyRound and ApplyDoc do not wait.
	ApplyDelay time.Duration
	// MaxRetries is how many times in a row a batch may fail with an
	// error outside the permanent list before it is split to find what
	// keeps failing (see split); 0: retried forever, never split.
	MaxRetries   int
	RetryBackoff time.Duration // first backoff; doubles up to MaxBackoff, with jitter
	CompactEvery time.Duration // applied-records compaction period (at least MinCompactEvery)
	// BatchTimeout bounds one round (default and most: 30 s). A round
	// that outlives it is retried smaller (see shrink).
	BatchTimeout time.Duration
	// RecordsOnly reads the rounds' batches as documents, each applied
	// with its applied record, instead of as cuts of their partitions
	// that move one floor per collection and partition (see readBatch):
	// for a rolling upgrade from a version that knows no floors.
	RecordsOnly bool
}

// MinCompactEvery is the shortest applied-records compaction period: more
// than twice the longest request (api.RequestTimeout, 30 s) and batch.
const MinCompactEvery = 2 * time.Minute

// batchTimeout bounds one round: reading its batches, their store
// transactions, their trims (a round pipelines up to maxPipelined batches,
// and starts another only while the timeout leaves room for it).
const batchTimeout = 30 * time.Second

// Applier applies buffered writes. Create it with New, call Prepare once,
// then Run.
//
// Each worker serves the owned partitions p with p % Workers == its number,
// and applies all of them in one round: one store transaction per store
// carries up to BatchSize documents drawn from all its partitions. Batching
// per partition alone would not batch at all at moderate rates: α = 64
// partitions polled every 20 ms see less than one document each.
type Applier struct {
	// The scheduler runs the rounds on the owned partitions and keeps
	// their failures and shrinks; mu guards them (see scheduler).
	*scheduler[int]

	cfg   Config
	buf   *buffer.Buffer
	colls map[string]*Collection
	m     *metrics.Metrics
	log   *slog.Logger

	// parts serializes the rounds of each partition in this process: a
	// flush or a write-through must not apply a document while a worker
	// applies it. The SQL stores would serialize them anyway (the applied
	// record's row lock), but a MongoDB document has no such lock, and two
	// appliers converting the same changes from different reads of it
	// could leave the older value last.
	parts []partLock

	floorsMu sync.Mutex
	floors   buffer.Floors // the last Floors read

	unknown throttle // warnings about pending documents of unknown collections

	compacting sync.Mutex                   // held by a compaction round; guards idle
	idle       map[store.AppliedRecord]bool // applied records idle at the last compaction round
}

// partLock is a partition's lock (Applier.parts), and how many callers
// of ApplyDoc wait for it: a round in progress starts no more batches then,
// so that a write-through waits for one batch at most, not a backlog.
type partLock struct {
	sync.Mutex
	waiting atomic.Int32
}

// New returns an applier over the given collections.
func New(cfg Config, buf *buffer.Buffer, colls map[string]*Collection, m *metrics.Metrics, log *slog.Logger) *Applier {
	if cfg.MaxPerDoc <= 0 {
		cfg.MaxPerDoc = 1024
	}
	// compactApplied is safe only if every read finishes well within one
	// period (see its comment): keep the period above twice the longest
	// request.
	if cfg.CompactEvery < MinCompactEvery {
		cfg.CompactEvery = MinCompactEvery
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = 100 * time.Millisecond
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 1
	}
	if cfg.BatchTimeout <= 0 || cfg.BatchTimeout > batchTimeout {
		// Never longer: compactApplied's safety assumes rounds end within it.
		cfg.BatchTimeout = batchTimeout
	}
	a := &Applier{
		cfg: cfg, buf: buf, colls: colls, m: m, log: log,
		parts: make([]partLock, buf.Partitions()),
	}
	a.scheduler = newScheduler[int](plan{
		id: cfg.InstanceID, workers: cfg.Workers, ownerLease: cfg.OwnerLease, poll: cfg.PollInterval,
		compactEvery: cfg.CompactEvery, batchTimeout: cfg.BatchTimeout, retryBackoff: cfg.RetryBackoff,
		registry: buf, leave: true, leases: buf, parts: buf.Partitions(),
		what: "partition", polled: "pending partitions",
		timedOut: "an apply round outlived its timeout; the next rounds of its partitions are smaller",
		size: func(div int) []any {
			docs, perDoc := a.roundSize(div)
			return []any{"documents", docs, "changes_per_document", perDoc}
		},
		minimal: func(div int) bool {
			docs, perDoc := a.roundSize(div)
			return docs == 1 && perDoc == 1
		},
		setOwned:    func(n int) { a.m.OwnedPartitions.Set(float64(n)) },
		setSidecars: func(n int) { a.m.Sidecars.Set(float64(n)) },
		timeouts:    a.m.BatchTimeouts, shrinks: a.m.BatchShrinks,
	}, a, log)
	return a
}

// stores returns each distinct store once.
func (a *Applier) stores() map[string]store.Store {
	out := map[string]store.Store{}
	for _, c := range a.colls {
		out[c.StoreName] = c.Store
	}
	return out
}

// storeCollections returns the names of each store's collections.
func (a *Applier) storeCollections() map[string][]string {
	out := map[string][]string{}
	for _, c := range a.colls {
		out[c.StoreName] = append(out[c.StoreName], c.Name)
	}
	return out
}

// Floors reads the highest seq every store recorded as applied for the
// sidecar's collections, per partition and over all of them (another
// deployment's records in a shared database are not floors of this
// Redis: they would look like a rollback whenever that deployment's
// sequences run ahead). When a store cannot be read it returns
// the error and the floors last read: floors only grow, so older ones still
// catch a rollback below them.
func (a *Applier) Floors(ctx context.Context) (buffer.Floors, error) {
	f := buffer.Floors{Part: map[int]int64{}}
	colls := a.storeCollections()
	for name, st := range a.stores() {
		m, err := st.AppliedMax(ctx, colls[name])
		if err != nil {
			a.floorsMu.Lock()
			defer a.floorsMu.Unlock()
			return a.floors, fmt.Errorf("bgt: reading applied records of store %s: %w", name, err)
		}
		for p, s := range m {
			if p == store.AnyPartition {
				f.AnyPart = max(f.AnyPart, s)
			} else {
				f.Part[p] = max(f.Part[p], s)
			}
			f.Global = max(f.Global, s)
		}
	}
	a.floorsMu.Lock()
	a.floors = f
	a.floorsMu.Unlock()
	return f, nil
}

// Prepare makes every partition's sequence safe to hand out: on every
// Redis node it checks for a node that came back with older data than the
// stores applied (drops its cache entries) and raises the sequences above
// the highest seq any store recorded as applied, for any document
// (buffer.CheckRollback). Without it, a Redis that lost or rolled back its
// counters would hand out sequence numbers the applied records already
// cover, and their changes would be skipped as duplicates. The floor is the
// global maximum, not each partition's own: after a change of α a document
// moves to another partition, whose counter must still exceed the
// document's record. Server runs it at start, when a write finds a
// sequence missing, on every new Redis server it connects to, and
// periodically.
func (a *Applier) Prepare(ctx context.Context) error {
	f, err := a.Floors(ctx)
	if err != nil {
		return err
	}
	return a.buf.ForEachNode(ctx, func(ctx context.Context, node redis.Cmdable) error {
		return a.CheckNode(ctx, node, f)
	})
}

// CheckNode is Prepare for one Redis node, with the floors already read.
func (a *Applier) CheckNode(ctx context.Context, node redis.Cmdable, f buffer.Floors) error {
	r, err := a.buf.CheckRollback(ctx, node, f)
	if err != nil {
		return fmt.Errorf("bgt: checking Redis for a rollback: %w", err)
	}
	if r.RolledBack {
		a.m.RedisRollbacks.Inc()
		a.log.Error("Redis came back with older data than the stores applied (restarted from an older snapshot, or failed over to a lagging replica): its cache entries were dropped and its sequences raised; writes buffered after that snapshot and not applied are lost unless redis.replicas was met",
			"partitions", r.Partitions, "raised", r.Raised, "dropped", r.Dropped)
	}
	return nil
}

// Sidecars is the number of live sidecars sharing the partitions, as last
// seen.
func (a *Applier) Sidecars() int { return a.sidecars() }

// Run keeps ownership and applies owned partitions until ctx is done, then
// releases every partition it owns so another sidecar takes over at once.
func (a *Applier) Run(ctx context.Context) error {
	a.run(ctx)
	return nil
}

// roundSize is how many documents, and changes of each, a round with
// divisor div takes.
func (a *Applier) roundSize(div int) (docs, perDoc int) {
	return max(1, a.cfg.BatchSize/div), max(1, a.cfg.MaxPerDoc/div)
}

// MaxBackoff caps the delay between retries of a failing store: short
// enough that a store that comes back is noticed within seconds, long
// enough not to hammer one that is down.
const MaxBackoff = 8 * time.Second

// Backoff is the delay before retry number n (1-based) of a failing store:
// base doubling up to MaxBackoff (jitter.Backoff).
func Backoff(base time.Duration, n int) time.Duration { return jitter.Backoff(base, MaxBackoff, n) }
