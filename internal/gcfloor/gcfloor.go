// Package gcfloor keeps Go's collector from running while the heap is
// small.
//
// The collector starts a cycle when the heap has grown by GOGC percent (100
// by default) over what the last cycle left live. A sidecar's live heap is a
// few megabytes when its near caches are small, while its request path and
// appliers allocate kilobytes per write, so it would collect every few
// milliseconds: BenchmarkDrain measured a collection every ~350 applied
// changes and half the appliers' CPU time in the collector and in the
// scavenger returning the freed pages to the kernel, only for the next
// cycle to fault them in again. Go has a ceiling on the heap (GOMEMLIMIT)
// but no floor; this package adds one, as a sidecar with a memory budget
// wants it: after every cycle it sets the GC percentage so that the next
// cycle starts at max(floor, live × (1 + GOGC/100)). A heap whose live part
// is above the floor is collected exactly as GOGC says; one below it costs
// at most the floor in memory. The runtime sets each goal as a cycle ends,
// with the percentage then in force; the floor's cleanup runs just after
// (on the runtime's cleanup goroutine) and sets the goal again from the new
// live heap, so a heap that grew a lot in one cycle follows the previous
// percentage only for that moment.
package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// liveMetric is the heap the last cycle found live: the runtime's own base
// for the next cycle's goal.
const liveMetric = "/gc/heap/live:bytes"

// Floor raises the collector's goal to a floor; Start creates one.
type Floor struct {
	floor uint64
	base  int // the GC percentage in force before Start: GOGC's

	mu      sync.Mutex // guards the fields below and SetGCPercent's calls
	percent int        // the percentage last set
	stopped bool
	sample  [1]metrics.Sample
}

// sentinel is the object whose cleanup runs once per collection: it is
// unreachable as soon as it is made. It holds a pointer so that the
// allocator never packs it with other small objects (a tiny object can
// outlive its cycle).
type sentinel struct{ _ *int }

// MaxFloor is the largest floor Start takes; a larger one is MaxFloor.
const MaxFloor = 1 << 40

// Start sets the collector's goal to at least floor bytes of heap, from the
// next cycle on (Start sets the first goal itself), until Stop. A floor of
// 0, or GOGC=off (the collector then runs only at GOMEMLIMIT), leaves the
// collector as it is; GOMEMLIMIT still bounds the goal from above.
func Start(floor uint64) *Floor {
	floor = min(floor, MaxFloor)
	base := debug.SetGCPercent(100)
	debug.SetGCPercent(base)
	f := &Floor{floor: floor, base: base, percent: base}
	f.sample[0].Name = liveMetric
	if floor == 0 || base < 0 {
		f.stopped = true
		return f
	}
	f.tune()
	f.arm()
	return f
}

// Stop restores the GC percentage Start found.
func (f *Floor) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return
	}
	f.stopped = true
	debug.SetGCPercent(f.base)
}

// arm registers a cleanup that runs after the next collection: it tunes
// the percentage for the cycle after, and arms itself again.
func (f *Floor) arm() {
	runtime.AddCleanup(new(sentinel), func(f *Floor) {
		if f.tune() {
			f.arm()
		}
	}, f)
}

// tune sets the GC percentage from the live heap: the smallest that puts
// the goal at the floor, and never below GOGC's. It reports false once the
// floor is stopped.
func (f *Floor) tune() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return false
	}
	metrics.Read(f.sample[:])
	percent := f.base
	if s := f.sample[0].Value; s.Kind() == metrics.KindUint64 {
		percent = max(percent, floorPercent(f.floor, s.Uint64()))
	}
	if percent != f.percent {
		debug.SetGCPercent(percent)
		f.percent = percent
	}
	return true
}

// runtimeMinimum is the runtime's smallest goal at GOGC=100 (its
// defaultHeapMinimum); it scales with the percentage.
const runtimeMinimum = 4 << 20

// floorPercent returns the smallest GC percentage that puts the runtime's
// next goal at floor bytes, given the live heap. The runtime's goal is the
// larger of live × (1 + percent/100) and runtimeMinimum × percent/100, so
// the percentage is the smaller of the two that reach the floor. Both are
// bounded: the floor is at most MaxFloor and live counts as at least 1 MiB.
func floorPercent(floor, live uint64) int {
	live = max(live, 1<<20)
	if live >= floor {
		return 0
	}
	byLive := (floor - live) * 100 / live
	byMinimum := floor * 100 / runtimeMinimum
	return int(min(byLive, byMinimum)) + 1
}
