package groupcommit

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// negate is a flush whose results are its items negated: a caller that
// got another's results, or its own out of order, sees it.
func negate(items []int) []int {
	out := make([]int, len(items))
	for i, x := range items {
		out[i] = -x
	}
	return out
}

// Many concurrent callers each get exactly their own results, in order;
// no round carries more than maxItems items unless it is one call, no
// more than maxRounds run at once, and every round gives its slot back.
func TestCallersGetTheirOwnResults(t *testing.T) {
	const maxRounds, maxItems, callers, each = 2, 8, 32, 300
	var running, most, calls, items atomic.Int64
	var overfull atomic.Value
	g := New(maxRounds, maxItems, time.Minute, func(ctx context.Context, xs []int, n int) []int {
		for r := running.Add(1); ; {
			if m := most.Load(); r <= m || most.CompareAndSwap(m, r) {
				break
			}
		}
		if len(xs) > maxItems && n != 1 {
			overfull.Store(slices.Clone(xs))
		}
		calls.Add(int64(n))
		items.Add(int64(len(xs)))
		runtime.Gosched() // let other rounds start while this one runs
		running.Add(-1)
		return negate(xs)
	})
	var wg sync.WaitGroup
	var sent atomic.Int64
	for c := range callers {
		wg.Go(func() {
			for i := range each {
				xs := make([]int, 1+(c+i)%(maxItems+3)) // some larger than a round
				for j := range xs {
					xs[j] = c*1_000_000 + i*100 + j
				}
				sent.Add(int64(len(xs)))
				got := g.Do(context.Background(), xs)
				if !slices.Equal(got, negate(xs)) {
					t.Errorf("caller %d call %d got %v for %v", c, i, got, xs)
					return
				}
				if cap(got) != len(got) {
					t.Errorf("caller %d got results with room for %d more: appending would overwrite another caller's", c, cap(got)-len(got))
					return
				}
			}
		})
	}
	returned := make(chan struct{})
	go func() { wg.Wait(); close(returned) }()
	select {
	case <-returned:
	case <-time.After(time.Minute):
		t.Fatal("callers still wait for their rounds after a minute")
	}
	if m := most.Load(); m > maxRounds {
		t.Errorf("%d rounds ran at once, want at most %d", m, maxRounds)
	}
	if xs := overfull.Load(); xs != nil {
		t.Errorf("a round of several calls carried %d items, more than %d", len(xs.([]int)), maxItems)
	}
	if calls.Load() != callers*each || items.Load() != sent.Load() {
		t.Errorf("rounds carried %d calls and %d items, want %d and %d", calls.Load(), items.Load(), callers*each, sent.Load())
	}
	if most.Load() < 2 {
		t.Error("no two rounds ran at once: the test did not check the bound")
	}
	idle(t, g)
}

// held is a Group whose flush reports each round it starts and holds it
// until a release, so that a test knows which rounds run and which calls
// wait.
type held struct {
	*Group[int, int]
	started chan round
	release chan struct{}
	calls   sync.WaitGroup // the goroutines of do
}

// round is what a held flush was given.
type round struct {
	ctx   context.Context
	items []int
	calls int
}

func newHeld(maxRounds, maxItems int, timeout time.Duration) *held {
	h := &held{started: make(chan round), release: make(chan struct{})}
	h.Group = New(maxRounds, maxItems, timeout, func(ctx context.Context, items []int, calls int) []int {
		h.started <- round{ctx, items, calls}
		<-h.release
		return negate(items)
	})
	return h
}

// do calls Do with items on a goroutine of its own, and checks the results.
func (h *held) do(t *testing.T, ctx context.Context, items ...int) {
	h.calls.Go(func() {
		if got := h.Do(ctx, items); !slices.Equal(got, negate(items)) {
			t.Errorf("Do(%v) = %v", items, got)
		}
	})
}

// next is the next round to start.
func (h *held) next(t *testing.T) round {
	t.Helper()
	select {
	case r := <-h.started:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no round started")
		return round{}
	}
}

// holdTwo starts two rounds, of 1 and of 2, and leaves them held.
func (h *held) holdTwo(t *testing.T) {
	t.Helper()
	h.do(t, context.Background(), 1)
	h.next(t)
	h.do(t, context.Background(), 2)
	h.next(t)
}

// finish releases every round and waits until every call has returned
// and every round has given its slot back.
func (h *held) finish(t *testing.T) {
	t.Helper()
	close(h.release)
	h.calls.Wait()
	idle(t, h.Group)
}

// wait waits until g has the given rounds in flight and calls waiting.
func wait(t *testing.T, g *Group[int, int], rounds, waiting int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		r, w := g.Pending()
		if r == rounds && w == waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rounds in flight and %d calls waiting, want %d and %d", r, w, rounds, waiting)
		}
	}
}

// idle waits until every round of g has given its slot back; a slot
// leaked would stop g's rounds for good.
func idle(t *testing.T, g *Group[int, int]) {
	t.Helper()
	wait(t, g, 0, 0)
}

// While maxRounds rounds run, the callers that arrive wait, and then go
// together in the next round.
func TestAtMostMaxRoundsInFlight(t *testing.T) {
	h := newHeld(2, 8, time.Minute)
	h.holdTwo(t)
	for i := 3; i <= 5; i++ {
		h.do(t, context.Background(), i)
		wait(t, h.Group, 2, i-2)
	}
	h.release <- struct{}{}
	if r := h.next(t); !slices.Equal(r.items, []int{3, 4, 5}) || r.calls != 3 {
		t.Errorf("the round after the first ended carried %v in %d calls, want the 3 waiting calls [3 4 5]", r.items, r.calls)
	}
	h.finish(t)
}

// A round takes the waiting calls in order while they fit in maxItems; a
// call larger than that still goes, alone in its round.
func TestLargeCallGoesAlone(t *testing.T) {
	h := newHeld(2, 4, time.Minute)
	h.holdTwo(t)
	waiting := [][]int{{10}, {20, 21, 22, 23, 24, 25}, {30, 31}, {40, 41}, {50}}
	for i, items := range waiting {
		h.do(t, context.Background(), items...)
		wait(t, h.Group, 2, i+1)
	}
	for _, want := range []round{
		{items: []int{10}, calls: 1},                     // {10} and the large call exceed 4
		{items: []int{20, 21, 22, 23, 24, 25}, calls: 1}, // the large call, alone
		{items: []int{30, 31, 40, 41}, calls: 2},         // exactly 4
		{items: []int{50}, calls: 1},
	} {
		h.release <- struct{}{}
		if r := h.next(t); !slices.Equal(r.items, want.items) || r.calls != want.calls {
			t.Errorf("a round carried %v in %d calls, want %v in %d", r.items, r.calls, want.items, want.calls)
		}
	}
	h.finish(t)
}

// A round runs under its leader's context without its cancellation, and
// under the Group's timeout: a leader whose context ends fails none of the
// callers its round, or the rounds it hands the lead to, serve.
func TestCancelledLeaderDoesNotCancelTheRound(t *testing.T) {
	const timeout = time.Minute
	h := newHeld(1, 8, timeout)
	ctx, cancel := context.WithCancel(context.Background())
	h.do(t, ctx, 1)
	first := h.next(t)
	h.do(t, context.Background(), 2)
	wait(t, h.Group, 1, 1)
	cancel()
	check := func(r round) {
		t.Helper()
		if err := r.ctx.Err(); err != nil {
			t.Errorf("the round carrying %v ended with its leader's context: %v", r.items, err)
		}
		if d, ok := r.ctx.Deadline(); !ok || time.Until(d) > timeout {
			t.Errorf("the round carrying %v has deadline %v (set: %v), want one within %v", r.items, d, ok, timeout)
		}
	}
	check(first)
	h.release <- struct{}{}
	check(h.next(t)) // led on from the first round, under its context
	h.finish(t)
}

// A round that finds no call waiting ends at once and gives its slot
// back. Two rounds that end together may both see the one call waiting
// and both hand the lead on: one of the rounds they start takes the call,
// and the other finds none — within 500 tries, every time so far.
func TestEmptyRoundGivesItsSlotBack(t *testing.T) {
	for range 500 {
		h := newHeld(2, 8, time.Minute)
		h.holdTwo(t)
		h.do(t, context.Background(), 3)
		wait(t, h.Group, 2, 1)
		close(h.release)
		h.next(t)
		h.calls.Wait()
		idle(t, h.Group)
	}
}
