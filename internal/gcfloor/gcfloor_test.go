package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const mib = 1 << 20

func TestFloorPercent(t *testing.T) {
	for _, tc := range []struct {
		floor, live uint64
		want        int
	}{
		// A small live heap: the runtime's minimum (4 MiB × percent/100)
		// reaches the floor first.
		{64 * mib, 2 * mib, 1601},
		{64 * mib, 0, 1601},
		// A live heap near the floor: live × (1 + percent/100) does.
		{64 * mib, 40 * mib, 61},
		// At or above the floor: nothing to raise.
		{64 * mib, 64 * mib, 0},
		{64 * mib, 1 << 30, 0},
		{MaxFloor, 1, int(MaxFloor*100/runtimeMinimum) + 1},
	} {
		got := floorPercent(tc.floor, tc.live)
		assert.Equal(t, tc.want, got, "floor %d, live %d", tc.floor, tc.live)
		if got > 0 {
			live := max(tc.live, mib)
			goal := max(live+live*uint64(got)/100, runtimeMinimum*uint64(got)/100)
			assert.GreaterOrEqual(t, goal, tc.floor, "floor %d, live %d: goal", tc.floor, tc.live)
		}
	}
}

// heapGoal returns the runtime's current heap goal.
func heapGoal() uint64 { return runtimeMetric("/gc/heap/goal:bytes") }

// runtimeMetric reads one of the runtime's uint64 metrics.
func runtimeMetric(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// churn allocates n bytes of garbage in 1 KiB pieces and returns how many
// collections ran meanwhile.
func churn(n int) uint32 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var keep []byte
	for range n / 1024 {
		keep = make([]byte, 1024)
	}
	runtime.KeepAlive(keep)
	runtime.ReadMemStats(&after)
	return after.NumGC - before.NumGC
}

// TestFloor checks the floor on the running collector: after a collection
// the goal is at the floor, garbage well below it triggers few
// collections against many without it, and Stop restores GOGC's
// percentage.
func TestFloor(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)

	runtime.GC()
	without := churn(256 * mib)

	f := Start(128 * mib)
	defer f.Stop()
	runtime.GC()
	// The cleanup that tunes runs on its own goroutine after the cycle.
	require.Eventually(t, func() bool { return heapGoal() >= 128*mib }, 5*time.Second, time.Millisecond,
		"the heap goal after a collection is %d bytes, below the 128 MiB floor", heapGoal())
	assert.Greater(t, runtimeMetric("/gc/gogc:percent"), uint64(100))
	with := churn(256 * mib)
	t.Logf("collections over 256 MiB of garbage: %d without the floor, %d with it", without, with)
	assert.Less(t, with*8, without, "the floor did not make collections rarer")
	assert.LessOrEqual(t, with, uint32(4), "256 MiB of garbage under a 128 MiB floor")

	f.Stop()
	assert.Equal(t, 100, debug.SetGCPercent(100), "Stop did not restore GOGC's percentage")
	runtime.GC()
	time.Sleep(10 * time.Millisecond) // a stopped floor's cleanup must not tune again
	assert.Equal(t, 100, debug.SetGCPercent(100))
	assert.Less(t, heapGoal(), uint64(64*mib))
}

// TestFloorOff checks that a floor of 0 and GOGC=off leave the collector
// alone.
func TestFloorOff(t *testing.T) {
	base := debug.SetGCPercent(100)
	defer debug.SetGCPercent(base)

	f := Start(0)
	runtime.GC()
	assert.Equal(t, 100, debug.SetGCPercent(100))
	f.Stop()
	assert.Equal(t, 100, debug.SetGCPercent(100))

	debug.SetGCPercent(-1)
	f = Start(128 * mib)
	runtime.GC()
	assert.Equal(t, -1, debug.SetGCPercent(-1), "a floor under GOGC=off turned the collector on")
	f.Stop()
	assert.Equal(t, -1, debug.SetGCPercent(100))
}
