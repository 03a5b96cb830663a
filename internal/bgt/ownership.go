package bgt

import (
	"context"
	"hash/crc32"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"
)

// owned is the set of partitions an applier owns, safe for concurrent
// use; the zero value is empty.
type owned struct {
	mu sync.Mutex
	m  map[int]bool
}

// list returns the owned partitions, sorted.
func (o *owned) list() []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Sorted(maps.Keys(o.m))
}

func (o *owned) has(p int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.m[p]
}

// set adds p (on) or removes it.
func (o *owned) set(p int, on bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !on {
		delete(o.m, p)
		return
	}
	if o.m == nil {
		o.m = map[int]bool{}
	}
	o.m[p] = true
}

func (o *owned) clear() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.m = nil
}

// leases are renewable ownership leases of numbered partitions (the
// pending index's, or the session queues').
type leases interface {
	Acquire(ctx context.Context, p int, id string, lifetime time.Duration) (bool, error)
	Release(ctx context.Context, p int, id string) error
}

// rebalance is one ownership tick of instance id among live sidecars: it
// renews the owned partitions, gives up those above the fair share (so a
// newcomer finds free ones) and takes free ones up to it (so a dead
// sidecar's partitions are taken over once their leases expire). set is
// told of every partition gained or given up; lost are the owned ones whose
// lease could not be renewed.
func rebalance(ctx context.Context, l leases, id string, lifetime time.Duration, parts, live int, owned []int, set func(p int, on bool)) (lost []int) {
	want := Share(parts, live)
	keep := make(map[int]bool, len(owned))
	var kept []int
	for _, p := range owned {
		ok, err := l.Acquire(ctx, p, id, lifetime)
		if err != nil || !ok {
			set(p, false)
			if err == nil {
				lost = append(lost, p)
			}
			continue
		}
		keep[p] = true
		kept = append(kept, p)
	}
	for _, p := range Excess(kept, want) {
		if err := l.Release(ctx, p, id); err == nil {
			set(p, false)
		}
	}
	n := len(kept)
	for _, p := range Candidates(parts, id) {
		if n >= want || ctx.Err() != nil {
			break
		}
		if keep[p] {
			continue
		}
		if ok, err := l.Acquire(ctx, p, id, lifetime); err == nil && ok {
			set(p, true)
			n++
		}
	}
	return lost
}

// Share is how many of parts partitions each of live sidecars should own:
// ceil(parts/live). With every sidecar at or under its share and all of
// them taking free partitions up to it, every partition finds an owner.
func Share(parts, live int) int {
	if live < 1 {
		live = 1
	}
	return (parts + live - 1) / live
}

// Excess returns the partitions to give up so that owned fits want: the
// highest-numbered ones, so that the choice is stable between ticks.
func Excess(owned []int, want int) []int {
	if len(owned) <= want {
		return nil
	}
	s := append([]int(nil), owned...)
	sort.Ints(s)
	return s[want:]
}

// Candidates is the order in which instance id tries to take free
// partitions: all of them, starting at a point derived from the id, so that
// sidecars starting together do not all race for partition 0 first.
func Candidates(parts int, id string) []int {
	start := int(crc32.ChecksumIEEE([]byte(id)) % uint32(parts))
	out := make([]int, parts)
	for i := range out {
		out[i] = (start + i) % parts
	}
	return out
}
