// Package bgt runs the appliers (the paper's background threads): it owns
// partitions of the pending index through renewable ownership leases,
// applies their buffered writes to the stores in batches, exactly once, and
// trims what was applied. It also serves synchronous applies (write-through,
// flush).
package bgt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/fault"
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
	MaxRetries   int           // consecutive failures before a batch is split to find the culprit
	RetryBackoff time.Duration // first backoff; doubles up to MaxBackoff, with jitter
	CompactEvery time.Duration // applied-records compaction period (at least MinCompactEvery)
	// BatchTimeout bounds one round (default and most: 30 s). A round
	// that outlives it is retried smaller (see shrink).
	BatchTimeout time.Duration
}

// MinCompactEvery is the shortest applied-records compaction period: more
// than twice the longest request (api.RequestTimeout, 30 s) and batch.
const MinCompactEvery = 2 * time.Minute

// batchTimeout bounds one batch: reading it, the store transaction, the trim.
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
	parts []sync.Mutex

	work []chan []int  // per worker: the partitions of its next round
	kick chan struct{} // a worker found more work than one round took

	owned owned // the partitions this sidecar owns

	mu       sync.Mutex // guards busy, failures, retryAt, shrunk, live, idle, warned
	busy     []bool     // per worker: a round is in flight
	failures map[int]int
	retryAt  map[int]time.Time
	shrunk   shrinks[int] // partitions whose rounds are smaller than configured
	live     int
	idle     map[store.AppliedRecord]bool // applied records idle at the last compaction round
	warned   time.Time                    // last warning about unknown collections
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
	if cfg.MaxRetries <= 0 {
		cfg.MaxRetries = 5
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
		parts:    make([]sync.Mutex, buf.Partitions()),
		work:     make([]chan []int, cfg.Workers),
		kick:     make(chan struct{}, 1),
		busy:     make([]bool, cfg.Workers),
		failures: map[int]int{},
		retryAt:  map[int]time.Time{},
	}
	a.shrunk = newShrinks[int](func(div int) bool {
		docs, perDoc := a.roundSize(div)
		return docs == 1 && perDoc == 1
	})
	for i := range a.work {
		a.work[i] = make(chan []int, 1)
	}
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

// Prepare raises every partition's sequence above the highest seq any store
// recorded as applied, for any document. Without it, a Redis that lost its
// counters would hand out sequence numbers the applied records already
// cover, and their changes would be skipped as duplicates. The floor is the
// global maximum, not each partition's own: after a change of α a document
// moves to another partition, whose counter must still exceed the
// document's record.
func (a *Applier) Prepare(ctx context.Context) error {
	var floor int64
	for name, st := range a.stores() {
		m, err := st.AppliedMax(ctx)
		if err != nil {
			return fmt.Errorf("bgt: reading applied records of store %s: %w", name, err)
		}
		for _, s := range m {
			floor = max(floor, s)
		}
	}
	// Every partition's sequence is created here, even at 0: from now on a
	// missing one means Redis lost it (see buffer.Buffer.Reseed).
	for p := range a.buf.Partitions() {
		if err := a.buf.RaiseSeq(ctx, p, floor); err != nil {
			return fmt.Errorf("bgt: raising sequence of partition %d: %w", p, err)
		}
	}
	return nil
}

// Owned returns the partitions this applier owns, sorted.
func (a *Applier) Owned() []int { return a.owned.list() }

// Sidecars is the number of live sidecars sharing the partitions, as last
// seen.
func (a *Applier) Sidecars() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.live
}

// Run keeps ownership and applies owned partitions until ctx is done, then
// releases every partition it owns so another sidecar takes over at once.
func (a *Applier) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for w := range a.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.worker(ctx, w)
		}()
	}
	a.tickOwnership(ctx)
	own := time.NewTicker(a.cfg.OwnerLease / 3)
	poll := time.NewTicker(a.cfg.PollInterval)
	compact := time.NewTicker(a.cfg.CompactEvery)
	defer own.Stop()
	defer poll.Stop()
	defer compact.Stop()
	idle, skip := 0, 0
	var compacting sync.Mutex // held while a compaction runs
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-own.C:
			a.tickOwnership(ctx)
		case <-poll.C:
			// Idle partitions are polled less and less often (down to one
			// tick in 8): polling all of them every tick costs CPU for
			// nothing, and write-back has no deadline to apply.
			if skip > 0 {
				skip--
				continue
			}
			if a.dispatch(ctx) {
				idle = 0
			} else {
				idle = min(idle+1, 7)
				skip = idle
			}
		case <-a.kick:
			a.dispatch(ctx)
			idle, skip = 0, 0
		case <-compact.C:
			// In its own goroutine: a long compaction must not delay the
			// ownership renewals and dispatches of this loop.
			if a.owned.has(0) && compacting.TryLock() {
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer compacting.Unlock()
					a.compactApplied(ctx)
				}()
			}
		}
	}
	wg.Wait()
	a.releaseAll()
	return nil
}

// releaseAll gives every owned partition back; called on shutdown with a
// fresh context since the run's is done.
func (a *Applier) releaseAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, p := range a.Owned() {
		if err := a.buf.Release(ctx, p, a.cfg.InstanceID); err != nil {
			a.log.Warn("releasing partition", "partition", p, "err", err)
		}
	}
	if err := a.buf.Leave(ctx, a.cfg.InstanceID); err != nil {
		a.log.Warn("leaving the sidecar registry", "err", err)
	}
	a.owned.clear()
	a.m.OwnedPartitions.Set(0)
}

// tickOwnership renews owned partitions and moves towards this sidecar's
// fair share, ceil(α / live sidecars): it releases extras (so a newcomer
// finds free partitions) and takes free ones (so a dead sidecar's
// partitions are taken over once their leases expire).
func (a *Applier) tickOwnership(ctx context.Context) {
	live, err := a.buf.Heartbeat(ctx, a.cfg.InstanceID, a.cfg.OwnerLease)
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn("sidecar heartbeat", "err", err)
		}
		return
	}
	for _, p := range rebalance(ctx, a.buf, a.cfg.InstanceID, a.cfg.OwnerLease, a.buf.Partitions(), live, a.Owned(), a.owned.set) {
		a.log.Info("lost ownership of partition", "partition", p)
	}
	a.mu.Lock()
	a.live = live
	a.mu.Unlock()
	a.m.OwnedPartitions.Set(float64(len(a.Owned())))
	a.m.Sidecars.Set(float64(live))
}

// dispatch hands each idle worker the owned partitions it serves that have
// pending documents. It reports whether any partition had work.
func (a *Applier) dispatch(ctx context.Context) bool {
	now := time.Now()
	owned := a.Owned()
	a.mu.Lock()
	var parts []int
	for _, p := range owned {
		if !a.busy[p%a.cfg.Workers] && !now.Before(a.retryAt[p]) {
			parts = append(parts, p)
		}
	}
	a.mu.Unlock()
	if len(parts) == 0 {
		return true // every partition with work is being applied
	}
	counts, err := a.buf.PendingCounts(ctx, parts)
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn("polling pending partitions", "err", err)
		}
		return false
	}
	groups := make([][]int, a.cfg.Workers)
	found := false
	for i, p := range parts {
		if counts[i] > 0 {
			found = true
			groups[p%a.cfg.Workers] = append(groups[p%a.cfg.Workers], p)
		}
	}
	for w, g := range groups {
		if len(g) == 0 {
			continue
		}
		a.mu.Lock()
		idle := !a.busy[w]
		a.busy[w] = true
		a.mu.Unlock()
		if idle {
			a.work[w] <- g // capacity 1 and the busy mark make this never block
		}
	}
	return found
}
func (a *Applier) worker(ctx context.Context, w int) {
	for {
		select {
		case <-ctx.Done():
			return
		case parts := <-a.work[w]:
			// A round that has started finishes even if shutdown begins
			// meanwhile (bounded), so that a SIGTERM does not turn into
			// replays for the sidecar that takes the partitions over.
			div := a.divisor(parts)
			bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.BatchTimeout)
			n, full, err := a.ApplyRound(bctx, parts)
			timedOut := err != nil && errors.Is(bctx.Err(), context.DeadlineExceeded)
			cancel()
			a.mu.Lock()
			a.busy[w] = false
			for _, p := range parts {
				if err != nil {
					a.failures[p]++
					a.retryAt[p] = time.Now().Add(Backoff(a.cfg.RetryBackoff, a.failures[p]))
				} else {
					delete(a.failures, p)
					delete(a.retryAt, p)
				}
			}
			next := a.shrunk.resize(parts, div, timedOut, err == nil)
			a.mu.Unlock()
			if timedOut {
				docs, perDoc := a.roundSize(next)
				a.log.Warn("an apply round outlived its timeout; the next rounds of its partitions are smaller",
					"partitions", parts, "timeout", a.cfg.BatchTimeout, "documents", docs, "changes_per_document", perDoc)
			}
			if err != nil && ctx.Err() == nil {
				a.log.Warn("applying buffered writes", "partitions", parts, "err", err)
			}
			if err == nil && full && n > 0 {
				select { // more waiting: go on without waiting for the next poll
				case a.kick <- struct{}{}:
				default:
				}
			}
		}
	}
}

// divisor returns the shrink divisor of a round of parts: the largest of
// theirs.
func (a *Applier) divisor(parts []int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.shrunk.divisor(parts...)
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
	size, perDoc := a.roundSize(a.divisor(parts))
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
	fails := a.maxFailures(parts) + 1
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
	a.mu.Lock()
	due := time.Since(a.warned) > time.Minute
	if due {
		a.warned = time.Now()
	}
	a.mu.Unlock()
	if due {
		a.log.Warn("pending documents belong to collections this sidecar does not serve; configure them or flush them from a sidecar that does", "documents", n)
	}
}

func (a *Applier) maxFailures(parts []int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := 0
	for _, p := range parts {
		m = max(m, a.failures[p])
	}
	return m
}

// applyWrites applies writes to one store in one transaction. When the
// store rejects the batch for good (a permanent error), the batch is split
// to find the culprits: documents are applied one by one, and a document the
// store rejects is applied change by change, so that only the changes the
// store refuses become dead letters — never the valid changes around them,
// never changes an earlier attempt already applied. Transient errors (the
// store down, read-only, timing out …) never dead-letter anything: the
// round fails and is retried with backoff until the store recovers.
func (a *Applier) applyWrites(ctx context.Context, storeName string, writes []store.Write, fails int) (int, []buffer.Applied, error) {
	st := a.colls[writes[0].Collection].Store
	results, err := a.apply(ctx, st, writes)
	if err == nil {
		return a.account(writes, results)
	}
	a.m.ApplyErrors.WithLabelValues(errKind(err)).Inc()
	if !store.IsPermanent(err) || ctx.Err() != nil {
		if fails == a.cfg.MaxRetries {
			a.log.Error("the store keeps failing; buffered writes wait and are retried with backoff", "store", storeName, "failures", fails, "err", err)
		}
		return 0, nil, fmt.Errorf("store %s: %w", storeName, err)
	}
	var applied int
	var done []buffer.Applied
	for _, w := range writes {
		res, err := a.apply(ctx, st, []store.Write{w})
		if err == nil {
			n, d, _ := a.account([]store.Write{w}, res)
			applied += n
			done = append(done, d...)
			continue
		}
		a.m.ApplyErrors.WithLabelValues(errKind(err)).Inc()
		if !store.IsPermanent(err) {
			return applied, done, fmt.Errorf("store %s: %w", storeName, err)
		}
		n, _, err := a.isolate(ctx, st, w)
		applied += n
		if err != nil {
			return applied, done, fmt.Errorf("store %s: %w", storeName, err)
		}
	}
	return applied, done, nil
}

// isolate applies a document's changes one at a time, each in its own
// transaction, and dead-letters each change the store rejects for good.
// Every change it handles is trimmed (applied ones by the dead-letter
// script's pop, which removes the prefix up to a rejected change). It
// returns how many changes it applied and the seqs it dead-lettered.
func (a *Applier) isolate(ctx context.Context, st store.Store, w store.Write) (applied int, dead []int64, err error) {
	var lastApplied int64
	for _, c := range w.Changes {
		one := w
		one.Changes = []change.Change{c}
		res, err := a.apply(ctx, st, []store.Write{one})
		if err == nil {
			n, _, _ := a.account([]store.Write{one}, res)
			applied += n
			lastApplied = c.Seq
			continue
		}
		a.m.ApplyErrors.WithLabelValues(errKind(err)).Inc()
		if !store.IsPermanent(err) {
			return applied, dead, a.trimApplied(ctx, w, lastApplied, err)
		}
		if err := a.deadLetter(ctx, w, c, err); err != nil {
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

func errKind(err error) string {
	if store.IsPermanent(err) {
		return "permanent"
	}
	return "transient"
}

func (a *Applier) apply(ctx context.Context, st store.Store, writes []store.Write) ([]store.Result, error) {
	cv, converting := st.(store.Converter)
	if !converting {
		fault.Hit(fault.BeforeCommit)
		start := time.Now()
		res, err := st.Apply(ctx, writes)
		if err == nil {
			a.m.ApplyDuration.Observe(time.Since(start).Seconds())
			a.m.ApplyBatchSize.Observe(float64(len(writes)))
		}
		return res, err
	}
	todo, idx, results, err := a.convert(ctx, cv, writes)
	if err != nil {
		return nil, err
	}
	fault.Hit(fault.BeforeCommit)
	if len(todo) == 0 {
		return results, nil
	}
	start := time.Now()
	res, err := st.Apply(ctx, todo)
	if err != nil {
		return nil, err
	}
	a.m.ApplyDuration.Observe(time.Since(start).Seconds())
	a.m.ApplyBatchSize.Observe(float64(len(todo)))
	for k, i := range idx {
		results[i].Applied += res[k].Applied
		results[i].Missing = results[i].Missing || res[k].Missing
	}
	return results, nil
}

// convert is the paper's Algorithm 2 for a store without transactions
// (see store.Converter), for a batch: it reads the batch's documents with
// their stamps, drops the changes the stamps say were applied (a replay
// after a crash before the trim), compacts the rest (RMW compaction),
// converts them into idempotent changes computed from the stored
// documents, persists the conversions in the buffered writes — waiting
// for the replicas, as a buffered write does — and returns the writes to
// apply (todo, from writes[idx[k]]) and results carrying the skipped
// counts. A change that cannot apply to its stored document ($inc of a
// string …) is a permanent error, which the caller isolates into a dead
// letter. A conversion that finds its buffered write trimmed meanwhile (a
// write-through or flush applied it) fails the batch, to be read again.
func (a *Applier) convert(ctx context.Context, cv store.Converter, writes []store.Write) (todo []store.Write, idx []int, results []store.Result, err error) {
	results = make([]store.Result, len(writes))
	stored := make([]map[string]store.Stored, len(writes))
	byTable := map[*store.Table][]int{}
	for i, w := range writes {
		byTable[w.Table] = append(byTable[w.Table], i)
	}
	for t, is := range byTable {
		ids := make([]string, len(is))
		for k, i := range is {
			ids[k] = writes[i].ID
		}
		m, err := cv.ReadMany(ctx, t, ids)
		if err != nil {
			return nil, nil, nil, err
		}
		for _, i := range is {
			stored[i] = m
		}
	}
	var convs []buffer.Conversion
	for i, w := range writes {
		st := stored[i][w.ID]
		results[i].LastSeq = w.Changes[len(w.Changes)-1].Seq
		k := 0
		for k < len(w.Changes) && w.Changes[k].Seq <= st.Seq {
			k++
		}
		results[i].Skipped = k
		rest := w.Changes[k:]
		if len(rest) == 0 {
			continue
		}
		conv, err := Convert(st.Doc, rest)
		if err != nil {
			return nil, nil, nil, &store.Error{Permanent: true, Err: fmt.Errorf("document %s: %w", w.ID, err)}
		}
		if len(conv) != len(rest) || !allIdempotent(rest) {
			ref := buffer.DocRef{Part: w.Partition, Member: buffer.Member(w.Collection, w.ID)}
			// The replacement starts at the head read, so the changes the
			// stamp says were applied (a crash before their trim) go too.
			convs = append(convs, buffer.Conversion{DocRef: ref, First: w.Changes[0].Seq, Last: results[i].LastSeq, Changes: conv})
		}
		c := w
		c.Changes = conv
		todo = append(todo, c)
		idx = append(idx, i)
	}
	ok, err := a.buf.Convert(ctx, convs)
	if err != nil {
		return nil, nil, nil, err
	}
	for i, done := range ok {
		if !done {
			return nil, nil, nil, fmt.Errorf("bgt: the buffered write of %s changed while it was converted; it is read again", convs[i].Member)
		}
	}
	a.m.ConvertedWrites.Add(float64(len(convs)))
	fault.Hit(fault.AfterConvert)
	return todo, idx, results, nil
}

// Convert compacts a document's pending changes and makes them idempotent
// against its stored value doc (nil: no document), as Algorithm 2 does
// before applying: a patch that finds no document does nothing (MongoDB's
// update matches nothing), so it becomes an empty patch; a change that
// cannot apply to the value it meets is an error wrapping *change.TypeError.
func Convert(doc change.Doc, changes []change.Change) ([]change.Change, error) {
	compacted := change.CompactDoc(changes)
	out := make([]change.Change, len(compacted))
	live := make([]change.Change, 0, len(compacted)) // the changes that do something
	var at []int                                     // their positions in out
	cur := doc
	for j, c := range compacted {
		next, err := change.Apply(cur, c)
		switch {
		case errors.Is(err, change.ErrNotFound):
			out[j] = change.Change{Seq: c.Seq, Kind: change.Patch}
		case err != nil:
			return nil, fmt.Errorf("change seq %d: %w", c.Seq, err)
		default:
			cur = next
			live = append(live, c)
			at = append(at, j)
		}
	}
	conv, err := change.Idempotent(doc, live)
	if err != nil {
		return nil, err
	}
	for k, j := range at {
		out[j] = conv[k]
	}
	return out, nil
}

func allIdempotent(cs []change.Change) bool {
	for _, c := range cs {
		if !change.IsIdempotent(c) {
			return false
		}
	}
	return true
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

// deadLetter moves one change the store rejected out of the way, with the
// store's error. The changes before it in the buffered write were applied
// (isolate applies them one by one first), so popping the prefix up to it
// loses nothing.
func (a *Applier) deadLetter(ctx context.Context, w store.Write, c change.Change, cause error) error {
	body, _ := json.Marshal([]string{strconv.FormatInt(c.Seq, 10) + "|0|" + string(change.Encode(c))})
	dl := &buffer.DeadLetter{Collection: w.Collection, ID: w.ID, Seq: c.Seq, Error: cause.Error(), At: time.Now().UTC(), Changes: body}
	if _, err := a.buf.Reject(ctx, w.Collection, w.ID, c.Seq, dl); err != nil {
		return err
	}
	a.log.Error("dead-lettered a buffered change the store rejected", "collection", w.Collection, "id", w.ID, "seq", c.Seq, "err", cause)
	return nil
}

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
	a.parts[ref.Part].Lock()
	defer a.parts[ref.Part].Unlock()
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
		res, err := a.apply(ctx, c.Store, []store.Write{w})
		if err != nil {
			a.m.ApplyErrors.WithLabelValues(errKind(err)).Inc()
			if !store.IsPermanent(err) {
				return err
			}
			_, dead, ierr := a.isolate(ctx, c.Store, w)
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
	all := make([]int, a.buf.Partitions())
	for i := range all {
		all[i] = i
	}
	attempt := 0
	lastTotal := int64(-1)
	for {
		counts, err := a.buf.PendingCounts(ctx, all)
		if err != nil {
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
		var (
			mu      sync.Mutex // guards lastErr and res.Applied
			lastErr error
			wg      sync.WaitGroup
		)
		n := min(a.cfg.Workers*2, len(todo))
		for g := range n {
			var chunk []int
			for i := g; i < len(todo); i += n {
				chunk = append(chunk, todo[i])
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					k, full, err := a.ApplyRound(ctx, chunk)
					mu.Lock()
					res.Applied += int64(k)
					if err != nil {
						lastErr = err
					}
					mu.Unlock()
					if err != nil || !full {
						break
					}
				}
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			st, _ := a.buf.Stats(context.Background())
			res.Pending = st.PendingChanges
			return res, nil
		}
		if lastErr != nil {
			attempt++
			select {
			case <-ctx.Done():
			case <-time.After(Backoff(a.cfg.RetryBackoff, attempt)):
			}
			continue
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
	a.mu.Lock()
	prev := a.idle
	a.mu.Unlock()
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
	a.mu.Lock()
	a.idle = next
	a.mu.Unlock()
}
