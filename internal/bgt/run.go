package bgt

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// rounds is what an applier does with the partitions it owns (the pending
// index's for the document applier, the session queues' for the queue
// applier); a scheduler decides when, and on which worker.
//
// ready is given owned partitions whose worker is idle and returns those to
// apply now: with work that is not backing off after a failure. held
// reports that it found nothing to apply only because everything it would
// look at backs off: such partitions are not idle, and the scheduler keeps
// polling at full rate so that their retry is not late. An error means the
// poll failed; the scheduler logs it and tries again at the next tick.
//
// round applies one round of parts (ready's, all served by one worker) and
// reports that more may be waiting (more than it took; for queues, also
// whatever was committed while it applied): the scheduler then hands its
// partitions back to the worker at once (redispatch) instead of at the
// next poll. ctx is the run's: a round that
// started finishes even once it is done, bounded by the batch timeout (see
// scheduler.bounded), so that a SIGTERM does not turn into replays for the
// sidecar that takes the partitions over. round notes its own failures
// (scheduler.note): it alone knows what failed, its partitions or one queue
// of them.
//
// compact runs one compaction round of the applied records; the scheduler
// calls it every CompactEvery on the sidecar that owns partition 0 (one
// compactor among the sidecars), outside its loop, never two at once.
type rounds interface {
	ready(ctx context.Context, parts []int) (todo []int, held bool, err error)
	round(ctx context.Context, parts []int) (more bool)
	compact(ctx context.Context)
}

// registry is the sidecar registry the appliers heartbeat into; the live
// sidecars it counts set each one's fair share of the partitions.
type registry interface {
	Heartbeat(ctx context.Context, id string, lifetime time.Duration) (live int, err error)
	Leave(ctx context.Context, id string) error
}

// plan is what a scheduler needs to know of its applier besides its rounds.
type plan struct {
	id           string        // this sidecar's instance id
	workers      int           // partition p is served by worker p % workers
	ownerLease   time.Duration // ownership lease lifetime, renewed every third of it
	poll         time.Duration // how often owned partitions are polled for work
	compactEvery time.Duration
	batchTimeout time.Duration
	retryBackoff time.Duration // first backoff after a failed batch

	registry registry
	leave    bool   // on shutdown, leave the registry too (one applier does, for both)
	leases   leases // the partitions' ownership leases
	parts    int    // how many partitions there are

	what     string // the partitions, in log messages: "partition", "queue partition"
	polled   string // what ready polls, in log messages
	timedOut string // the warning after a batch outlived its timeout

	size    func(div int) []any // a batch taken with shrink divisor div, as log attributes
	minimal func(div int) bool  // a batch with divisor div takes one of everything

	setOwned    func(n int) // sets the owned partitions gauge
	setSidecars func(n int) // sets the live sidecars gauge; nil: none
	// timeouts counts batches that outlived the batch timeout, shrinks
	// those after which their keys' batches got smaller.
	timeouts, shrinks prometheus.Counter
}

// scheduler keeps an applier's fair share of the partitions and runs its
// rounds on them: one loop renews the ownership leases, polls the owned
// partitions and hands each idle worker those it serves that have work. Per
// key K of the applier's batches (a partition, a queue) it keeps the
// consecutive failures and their backoff, and how much smaller than
// configured the batches are (see shrink).
type scheduler[K comparable] struct {
	plan   plan
	rounds rounds
	log    *slog.Logger

	owned owned         // the partitions this sidecar owns
	work  []chan []int  // per worker: the partitions of its next round
	kick  chan struct{} // a round found more work than it took (again)

	mu       sync.Mutex // guards busy, again, live, failures, retryAt, shrunk
	busy     []bool     // per worker: a round is in flight
	again    []int      // partitions whose last round left more work
	live     int        // live sidecars, as last seen
	failures map[K]int  // consecutive failed batches
	retryAt  map[K]time.Time
	shrunk   shrinks[K] // keys whose batches are smaller than configured
}

func newScheduler[K comparable](p plan, r rounds, log *slog.Logger) *scheduler[K] {
	s := &scheduler[K]{
		plan: p, rounds: r, log: log,
		work:     make([]chan []int, p.workers),
		kick:     make(chan struct{}, 1),
		busy:     make([]bool, p.workers),
		failures: map[K]int{},
		retryAt:  map[K]time.Time{},
		shrunk:   newShrinks[K](p.minimal),
	}
	for i := range s.work {
		s.work[i] = make(chan []int, 1)
	}
	return s
}

// Owned returns the partitions this applier owns, sorted.
func (s *scheduler[K]) Owned() []int { return s.owned.list() }

// sidecars is the number of live sidecars, as last seen.
func (s *scheduler[K]) sidecars() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live
}

// run keeps ownership and runs rounds on the owned partitions until ctx is
// done, then releases every partition it owns so another sidecar takes
// over at once.
func (s *scheduler[K]) run(ctx context.Context) {
	var wg sync.WaitGroup
	for w := range s.plan.workers {
		wg.Go(func() { s.worker(ctx, w) })
	}
	s.tick(ctx)
	own := time.NewTicker(s.plan.ownerLease / 3)
	poll := time.NewTicker(s.plan.poll)
	compact := time.NewTicker(s.plan.compactEvery)
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
			s.tick(ctx)
		case <-poll.C:
			// Idle partitions are polled less and less often (down to one
			// tick in 8): polling all of them every tick costs CPU for
			// nothing, and write-back has no deadline to apply.
			if skip > 0 {
				skip--
				continue
			}
			if s.dispatch(ctx) {
				idle = 0
			} else {
				idle = min(idle+1, 7)
				skip = idle
			}
		case <-s.kick:
			s.redispatch()
			idle, skip = 0, 0
		case <-compact.C:
			// In its own goroutine: a long compaction must not delay the
			// ownership renewals and dispatches of this loop.
			if s.owned.has(0) && compacting.TryLock() {
				wg.Go(func() {
					defer compacting.Unlock()
					s.rounds.compact(ctx)
				})
			}
		}
	}
	wg.Wait()
	s.releaseAll()
}

// tick renews the owned partitions and moves towards this sidecar's fair
// share, ceil(partitions / live sidecars): it releases extras (so a
// newcomer finds free partitions) and takes free ones (so a dead sidecar's
// partitions are taken over once their leases expire).
func (s *scheduler[K]) tick(ctx context.Context) {
	live, err := s.plan.registry.Heartbeat(ctx, s.plan.id, s.plan.ownerLease)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("sidecar heartbeat", "err", err)
		}
		return
	}
	for _, p := range rebalance(ctx, s.plan.leases, s.plan.id, s.plan.ownerLease, s.plan.parts, live, s.Owned(), s.owned.set) {
		s.log.Info("lost ownership of "+s.plan.what, "partition", p)
	}
	s.mu.Lock()
	s.live = live
	s.mu.Unlock()
	s.plan.setOwned(len(s.Owned()))
	if s.plan.setSidecars != nil {
		s.plan.setSidecars(live)
	}
}

// releaseAll gives every owned partition back; called on shutdown with a
// fresh context since the run's is done.
func (s *scheduler[K]) releaseAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, p := range s.Owned() {
		if err := s.plan.leases.Release(ctx, p, s.plan.id); err != nil {
			s.log.Warn("releasing "+s.plan.what, "partition", p, "err", err)
		}
	}
	if s.plan.leave {
		if err := s.plan.registry.Leave(ctx, s.plan.id); err != nil {
			s.log.Warn("leaving the sidecar registry", "err", err)
		}
	}
	s.owned.clear()
	s.plan.setOwned(0)
}

// dispatch hands each idle worker the owned partitions it serves that have
// work (rounds.ready). It reports whether any partition had work.
func (s *scheduler[K]) dispatch(ctx context.Context) bool {
	owned := s.Owned()
	s.mu.Lock()
	var parts []int
	for _, p := range owned {
		if !s.busy[p%s.plan.workers] {
			parts = append(parts, p)
		}
	}
	s.mu.Unlock()
	if len(parts) == 0 {
		return true // every partition with work is being applied
	}
	todo, held, err := s.rounds.ready(ctx, parts)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("polling "+s.plan.polled, "err", err)
		}
		return false
	}
	groups := make([][]int, s.plan.workers)
	for _, p := range todo {
		groups[p%s.plan.workers] = append(groups[p%s.plan.workers], p)
	}
	s.hand(groups)
	return held || len(todo) > 0
}

// hand gives each idle worker w its partitions groups[w] and marks it
// busy; the groups of busy workers are left to their rounds or the next
// poll.
func (s *scheduler[K]) hand(groups [][]int) {
	s.mu.Lock()
	for w, g := range groups {
		if len(g) == 0 || s.busy[w] {
			groups[w] = nil
			continue
		}
		s.busy[w] = true
	}
	s.mu.Unlock()
	for w, g := range groups {
		if len(g) > 0 {
			// Never blocks: only the run loop marks a worker busy, and it
			// sends only to one it found idle, whose channel (capacity 1)
			// the worker emptied before it could be marked idle again.
			s.work[w] <- g
		}
	}
}

// redispatch hands each idle worker the partitions in again that it
// serves and this sidecar still owns, without polling them: the round
// reads what is due itself, and finds nothing when another round took it.
// Only those partitions: polling every owned partition whenever a round
// had more would cost a scan of them all per batch of a busy queue; the
// others are found by the next poll, due within one poll interval now.
// A partition whose worker is busy is left to that round or the poll.
func (s *scheduler[K]) redispatch() {
	s.mu.Lock()
	groups := make([][]int, s.plan.workers)
	for _, p := range s.again {
		w := p % s.plan.workers
		if s.owned.has(p) && !slices.Contains(groups[w], p) {
			groups[w] = append(groups[w], p)
		}
	}
	s.again = s.again[:0]
	s.mu.Unlock()
	s.hand(groups)
}

// worker runs the rounds dispatch hands worker w, one at a time. A round
// goes on when a tick meanwhile lost one of its partitions: the new owner
// may apply the same documents or queues at once, and the applied records
// in the store make whichever commits second skip what the first applied.
func (s *scheduler[K]) worker(ctx context.Context, w int) {
	for {
		select {
		case <-ctx.Done():
			return
		case parts := <-s.work[w]:
			more := s.rounds.round(ctx, parts)
			// Idle only now that the round noted its failures: marked idle
			// before, a dispatch in between would find the failed keys not
			// yet backing off and hand them out again at once.
			s.mu.Lock()
			s.busy[w] = false
			s.mu.Unlock()
			if more {
				s.mu.Lock()
				s.again = append(s.again, parts...)
				s.mu.Unlock()
				select { // more waiting: go on without waiting for the next poll
				case s.kick <- struct{}{}:
				default:
				}
			}
		}
	}
}

// waiting reports that k backs off after a failure at time now.
func (s *scheduler[K]) waiting(k K, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return now.Before(s.retryAt[k])
}

// note records the outcome of a batch of keys: a success clears their
// failures, a failure counts one more for each and backs it off
// (Backoff). It returns the most failures in a row of any of them.
func (s *scheduler[K]) note(keys []K, err error) (failures int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		if err == nil {
			delete(s.failures, k)
			delete(s.retryAt, k)
			continue
		}
		s.failures[k]++
		s.retryAt[k] = time.Now().Add(Backoff(s.plan.retryBackoff, s.failures[k]))
		failures = max(failures, s.failures[k])
	}
	return failures
}

// failed returns the most failures in a row of any of keys.
func (s *scheduler[K]) failed(keys []K) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := 0
	for _, k := range keys {
		m = max(m, s.failures[k])
	}
	return m
}

// divisor returns the shrink divisor of a batch of keys: the largest of
// theirs.
func (s *scheduler[K]) divisor(keys ...K) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.shrunk.divisor(keys...)
}

// bounded runs apply, one batch of keys, with a context bounded by the
// batch timeout and the keys' shrink divisor. A batch that outlived its own
// timeout — not its caller's — makes the next batches of its keys smaller
// (see shrink), with a warning that attrs name the batch in; one that
// succeeds lets them grow back.
func (s *scheduler[K]) bounded(ctx context.Context, keys []K, apply func(ctx context.Context, div int) error, attrs ...any) error {
	div := s.divisor(keys...)
	bctx, cancel := context.WithTimeout(ctx, s.plan.batchTimeout)
	err := apply(bctx, div)
	timedOut := err != nil && errors.Is(bctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	cancel()
	s.mu.Lock()
	next := s.shrunk.resize(keys, div, timedOut, err == nil)
	s.mu.Unlock()
	if timedOut {
		s.plan.timeouts.Inc()
		if next > div {
			s.plan.shrinks.Inc()
		}
		s.log.Warn(s.plan.timedOut, slices.Concat(attrs, []any{"timeout", s.plan.batchTimeout}, s.plan.size(next))...)
	}
	return err
}

// throttle lets a warning through at most once a period; safe for
// concurrent use.
type throttle struct {
	mu   sync.Mutex // guards last
	last time.Time
}

// due reports whether a period has passed since it last did.
func (t *throttle) due(period time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if time.Since(t.last) <= period {
		return false
	}
	t.last = time.Now()
	return true
}

// pause waits d, or less when ctx is done first, and returns ctx's error.
func pause(ctx context.Context, d time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	<-wctx.Done()
	return ctx.Err()
}
