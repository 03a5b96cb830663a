// Package fault lets crash tests kill the process at a chosen point. Points
// are armed by the environment variable WRITEBACK_FAULTS, a comma-separated
// list of "point:n" (SIGKILL this process the n-th time the point is
// reached) or "point:n-m" (a random hit between n and m). Unarmed points cost
// one atomic load.
package fault

import (
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Points named in the code.
const (
	// AfterCommit is reached after the store committed a batch and before
	// the buffered writes are trimmed.
	AfterCommit = "bgt.after-commit"
	// BeforeCommit is reached after a batch was read, before the store
	// transaction.
	BeforeCommit = "bgt.before-commit"
	// AfterBuffer is reached after a write was buffered, before it is
	// acknowledged.
	AfterBuffer = "api.after-buffer"
	// AfterConvert is reached after an applier persisted converted
	// (idempotent) changes in the buffered writes, before it applies them
	// (MongoDB, the paper's Algorithm 2).
	AfterConvert = "bgt.after-convert"
)

var (
	armed atomic.Bool
	mu    sync.Mutex // guards at and hits
	at    map[string]int64
	hits  map[string]int64
)

func init() { Arm(os.Getenv("WRITEBACK_FAULTS")) }

// Arm replaces the armed points with spec (the WRITEBACK_FAULTS syntax).
func Arm(spec string) {
	mu.Lock()
	defer mu.Unlock()
	at, hits = map[string]int64{}, map[string]int64{}
	for _, p := range strings.Split(spec, ",") {
		name, n, ok := strings.Cut(strings.TrimSpace(p), ":")
		if !ok {
			continue
		}
		lo, hi, isRange := strings.Cut(n, "-")
		a, err := strconv.ParseInt(lo, 10, 64)
		if err != nil || a < 1 {
			continue
		}
		if isRange {
			b, err := strconv.ParseInt(hi, 10, 64)
			if err == nil && b > a {
				a += rand.Int64N(b - a + 1)
			}
		}
		at[name] = a
	}
	armed.Store(len(at) > 0)
}

// Hit marks that point was reached and kills the process if it is armed for
// this hit.
func Hit(point string) {
	if !armed.Load() {
		return
	}
	mu.Lock()
	hits[point]++
	kill := at[point] > 0 && hits[point] == at[point]
	mu.Unlock()
	if kill {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL cannot be caught; wait for it
	}
}
