// Package gopool runs short tasks on goroutines that outlive them.
//
// A goroutine starts with a small stack and grows it by copying the whole
// stack each time its calls go deeper than it. A request's path through
// the document service and the Redis client is deep: a goroutine started
// per batch of commands, or per round of buffered writes, copied its stack
// two or three times before it was done, about 4 % of the sidecar's CPU in
// YCSB A through the Redis port. The goroutines of this package wait for
// the next task instead of exiting, and keep their grown stacks: the GC
// halves the stack of an idle one at most once per cycle, so a busy worker
// rarely grows again.
package gopool

import "sync/atomic"

// maxIdle bounds the goroutines that wait for tasks, and so the memory
// their stacks keep (tens of KiB each) when nothing runs.
const maxIdle = 256

var (
	tasks = make(chan func())
	idle  atomic.Int32 // workers started; each is idle or running a task
)

// Go runs f on a goroutine: an idle worker if one is waiting, a new worker
// while there are fewer than maxIdle, or else a goroutine of its own. Like
// the go statement, it does not wait for f, and a panic in f ends the
// program.
func Go(f func()) {
	select {
	case tasks <- f:
		return
	default:
	}
	if idle.Add(1) <= maxIdle {
		go work(f)
		return
	}
	idle.Add(-1)
	go f()
}

// work runs f, then every task handed to it, for the life of the process.
func work(f func()) {
	for {
		f()
		f = <-tasks
	}
}
