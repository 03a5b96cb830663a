package buffer

import (
	"context"
	"sync"
	"time"

	"github.com/writeback/writeback/internal/gopool"
)

// maxCombined bounds the writes one combined round carries.
const maxCombined = 256

// combineTimeout bounds a combined round: it serves several requests, so
// it runs under none of their contexts.
const combineTimeout = 10 * time.Second

// maxRounds bounds the rounds in flight at once. One round at a time makes
// a write that arrives during a round wait for all of it before its own
// starts; with two, it starts at once unless two are already running, and
// the writes that arrive meanwhile still share the next round. Redis runs
// the rounds one after the other either way; a second round in flight
// hides the round trip, not Redis's time.
const maxRounds = 2

// combiner merges the WriteBatch calls of concurrent requests into shared
// rounds (group commit): while maxRounds rounds are in Redis, the calls
// that arrive wait and then go together in the next, one round trip and a
// few script calls for all of them instead of one each.
type combiner struct {
	mu      sync.Mutex
	waiting []*combinedCall
	rounds  int // rounds running or about to
}

// combinedCall is one WriteBatch call waiting for its round.
type combinedCall struct {
	reqs    []WriteRequest
	results []WriteResult
	errs    []error
	done    chan struct{}
}

// combined runs reqs in a shared round and returns their results.
func (b *Buffer) combined(ctx context.Context, reqs []WriteRequest) ([]WriteResult, []error) {
	c := &combinedCall{reqs: reqs, done: make(chan struct{})}
	b.comb.mu.Lock()
	b.comb.waiting = append(b.comb.waiting, c)
	lead := b.comb.rounds < maxRounds
	if lead {
		b.comb.rounds++
	}
	b.comb.mu.Unlock()
	if lead {
		b.round(context.WithoutCancel(ctx))
	}
	<-c.done
	return c.results, c.errs
}

// round runs the waiting calls (up to maxCombined writes) as one batch,
// hands each its results, and passes the lead on to a new goroutine while
// calls are still waiting, so that no request's answer waits for rounds
// after its own. A round may find no call waiting (another round took
// them); it ends at once.
func (b *Buffer) round(ctx context.Context) {
	b.comb.mu.Lock()
	var calls []*combinedCall
	n := 0
	for len(b.comb.waiting) > 0 && (n == 0 || n+len(b.comb.waiting[0].reqs) <= maxCombined) {
		c := b.comb.waiting[0]
		b.comb.waiting = b.comb.waiting[1:]
		calls = append(calls, c)
		n += len(c.reqs)
	}
	b.comb.mu.Unlock()
	if len(calls) == 0 {
		b.endRound(ctx)
		return
	}

	reqs := make([]WriteRequest, 0, n)
	for _, c := range calls {
		reqs = append(reqs, c.reqs...)
	}
	rctx, cancel := context.WithTimeout(ctx, combineTimeout)
	results, errs := b.writeBatch(rctx, reqs)
	cancel()
	for _, c := range calls {
		k := len(c.reqs)
		c.results, c.errs = results[:k:k], errs[:k:k]
		results, errs = results[k:], errs[k:]
		close(c.done)
	}
	b.endRound(ctx)
}

// endRound ends a round: the next starts at once while calls are waiting.
func (b *Buffer) endRound(ctx context.Context) {
	b.comb.mu.Lock()
	more := len(b.comb.waiting) > 0
	if !more {
		b.comb.rounds--
	}
	b.comb.mu.Unlock()
	if more {
		gopool.Go(func() { b.round(ctx) })
	}
}
