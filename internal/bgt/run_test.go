package bgt

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"
)

// countingRounds is a rounds whose partition busy has more work for
// chain rounds in a row; it counts the polls (ready) and the rounds.
type countingRounds struct {
	busy, chain int

	mu     sync.Mutex
	polls  int
	rounds int
	done   chan struct{}
}

func (r *countingRounds) ready(_ context.Context, parts []int) ([]int, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.polls++
	if slices.Contains(parts, r.busy) && r.rounds < r.chain {
		return []int{r.busy}, false, nil
	}
	return nil, false, nil
}

func (r *countingRounds) round(_ context.Context, parts []int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !slices.Contains(parts, r.busy) || r.rounds >= r.chain {
		return false
	}
	r.rounds++
	if r.rounds == r.chain {
		close(r.done)
	}
	return r.rounds < r.chain
}

func (r *countingRounds) compact(context.Context) {}

type oneSidecar struct{}

func (oneSidecar) Heartbeat(context.Context, string, time.Duration) (int, error) { return 1, nil }
func (oneSidecar) Leave(context.Context, string) error                           { return nil }
func (oneSidecar) Acquire(context.Context, int, string, time.Duration) (bool, error) {
	return true, nil
}
func (oneSidecar) Release(context.Context, int, string) error { return nil }

// A round that leaves more work is followed at once by another on its
// partitions, without a poll of every owned partition in between: a busy
// queue's stream of batches costs one read of its partition per batch, not
// a scan of all of them.
func TestMoreWorkIsRedispatchedWithoutPolling(t *testing.T) {
	const chain = 50
	r := &countingRounds{busy: 5, chain: chain, done: make(chan struct{})}
	s := newScheduler[int](plan{
		id: "a", workers: 4, ownerLease: time.Hour, poll: 100 * time.Millisecond, compactEvery: time.Hour,
		registry: oneSidecar{}, leases: oneSidecar{}, parts: 64,
		setOwned: func(int) {},
	}, r, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		s.run(ctx)
	}()
	defer func() { cancel(); <-stopped }()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%d of %d rounds after 10s", r.rounds, chain)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// The first poll finds the work; the rounds after it need none. A few
	// more polls may tick on a slow machine, never one per round.
	if r.polls > 5 {
		t.Errorf("%d polls for a chain of %d rounds on one partition, want the first poll only", r.polls, chain)
	}
}
