// Package groupcommit merges the work of concurrent callers into shared
// rounds (group commit): while a Group's rounds are in flight, the callers
// that arrive wait and then go together in the next, one round trip for
// all of them instead of one each.
//
// A Group bounds the rounds in flight at once, to at least two where Redis
// runs them: one round at a time makes a caller that arrives during a
// round wait for all of it before its own starts; with two, it starts at
// once unless two are already running, and the callers that arrive
// meanwhile still share the next round. Redis runs the rounds one after
// the other either way; a second round in flight hides the round trip, not
// Redis's time — on an idle node. Where the caller's process competes for
// the CPUs, a round's answer also waits for its reader to run, and more
// rounds in flight keep Redis busy meanwhile (pipeshare runs four).
//
// The package owns only the rounds: who goes in which, and when each
// caller is answered. What a round does (a pipeline, a batch of script
// calls) is its user's flush.
package groupcommit

import (
	"context"
	"sync"
	"time"

	"github.com/writeback/writeback/internal/gopool"
)

// Group runs the items of concurrent Do calls in shared rounds.
type Group[T, R any] struct {
	maxRounds, maxItems int
	timeout             time.Duration
	flush               func(ctx context.Context, items []T, calls int) []R

	mu      sync.Mutex // guards waiting and rounds
	waiting []*call[T, R]
	rounds  int // rounds running or about to
}

// call is one Do call waiting for its round.
type call[T, R any] struct {
	items   []T
	results []R
	done    chan struct{}
}

// New returns a Group that runs at most maxRounds rounds at once, each of
// at most maxItems items (a larger call goes alone, so that no caller's
// answer waits behind an unbounded round). flush runs a round: the items
// of its calls, each call's contiguous and in its order, and how many
// calls they are; it returns one result per item, in the items' order.
// A round runs under timeout and under none of its callers' contexts,
// since it serves several: no caller's cancellation fails the others'.
func New[T, R any](maxRounds, maxItems int, timeout time.Duration, flush func(ctx context.Context, items []T, calls int) []R) *Group[T, R] {
	return &Group[T, R]{maxRounds: maxRounds, maxItems: maxItems, timeout: timeout, flush: flush}
}

// Do runs items in the next round and returns their results, in order,
// once that round's flush has returned. A caller that finds fewer than
// maxRounds rounds in flight leads a round itself, under ctx without its
// cancellation.
func (g *Group[T, R]) Do(ctx context.Context, items []T) []R {
	c := &call[T, R]{items: items, done: make(chan struct{})}
	g.mu.Lock()
	g.waiting = append(g.waiting, c)
	lead := g.rounds < g.maxRounds
	if lead {
		g.rounds++
	}
	g.mu.Unlock()
	if lead {
		g.round(context.WithoutCancel(ctx))
	}
	<-c.done
	return c.results
}

// Pending returns the rounds running or about to, and the calls waiting
// for one: both are 0 when the Group is idle. For tests and metrics.
func (g *Group[T, R]) Pending() (rounds, waiting int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.rounds, len(g.waiting)
}

// round runs the waiting calls (up to maxItems items) together, hands each
// its results, and passes the lead on to a new goroutine while calls are
// still waiting, so that no caller's answer waits for rounds after its
// own. A round may find no call waiting (another round took them); it
// ends at once and gives its slot back.
func (g *Group[T, R]) round(ctx context.Context) {
	g.mu.Lock()
	var calls []*call[T, R]
	n := 0
	for len(g.waiting) > 0 && (n == 0 || n+len(g.waiting[0].items) <= g.maxItems) {
		c := g.waiting[0]
		g.waiting[0] = nil
		g.waiting = g.waiting[1:]
		calls = append(calls, c)
		n += len(c.items)
	}
	g.mu.Unlock()
	if len(calls) > 0 {
		g.run(ctx, calls, n)
	}

	g.mu.Lock()
	more := len(g.waiting) > 0
	if !more {
		g.rounds--
	}
	g.mu.Unlock()
	if more {
		gopool.Go(func() { g.round(ctx) })
	}
}

// run flushes the n items of calls and answers each call.
func (g *Group[T, R]) run(ctx context.Context, calls []*call[T, R], n int) {
	items := calls[0].items
	if len(calls) > 1 {
		items = make([]T, 0, n)
		for _, c := range calls {
			items = append(items, c.items...)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, g.timeout)
	results := g.flush(rctx, items, len(calls))
	cancel()
	for _, c := range calls {
		k := len(c.items)
		c.results, results = results[:k:k], results[k:]
		close(c.done)
	}
}
