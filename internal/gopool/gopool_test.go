package gopool

import (
	"sync"
	"testing"
	"time"
)

// TestGoRunsEveryTaskAtOnce: Go never queues a task behind another; past
// maxIdle busy workers a task gets a goroutine of its own. Every task
// below waits for all of them to have started, so a pool that made one
// wait for a worker would never finish.
func TestGoRunsEveryTaskAtOnce(t *testing.T) {
	n := 2*maxIdle + 10
	var started, finished sync.WaitGroup
	started.Add(n)
	finished.Add(n)
	for range n {
		Go(func() {
			started.Done()
			started.Wait()
			finished.Done()
		})
	}
	waitOrFail(t, &finished, "tasks did not all run at once")
	if got := idle.Load(); got > maxIdle {
		t.Errorf("%d workers kept, want at most %d", got, maxIdle)
	}
}

// TestGoReusesWorkers: tasks run one after the other reuse the workers
// that are waiting instead of starting a goroutine each.
func TestGoReusesWorkers(t *testing.T) {
	before := idle.Load()
	for range 1000 {
		var done sync.WaitGroup
		done.Add(1)
		Go(done.Done)
		waitOrFail(t, &done, "a task did not run")
		time.Sleep(50 * time.Microsecond) // let the worker wait again
	}
	if grew := idle.Load() - before; grew > 10 {
		t.Errorf("1000 tasks one at a time started %d workers, want them reused", grew)
	}
}

func waitOrFail(t *testing.T, wg *sync.WaitGroup, msg string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal(msg)
	}
}
