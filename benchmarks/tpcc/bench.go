package tpcc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/sidecar"
	"github.com/writeback/writeback/internal/config"
	"github.com/writeback/writeback/pkg/writeback"
)

// Policies are the policies TPC-C compares: the database alone, and
// sessions through a sidecar whose queue family writes through or back,
// over HTTP, or write-back in the benchmark's own process (an embedded
// member, pkg/writeback, beside the sidecar that runs the appliers).
var Policies = []string{bench.Database, bench.WriteThrough, bench.WriteBack, bench.WriteBackEmbedded}

// Options are one policy's benchmark.
type Options struct {
	Policy string
	Store  string // Postgres (default) or MySQL
	DSN    string // the TPC-C database, created if missing; the load and the checks use it
	// RunDSN, if set, is how the run reaches the same database instead of
	// DSN: the database alone's transactions and the sidecar (commits,
	// misses, appliers) go through it, e.g. a latency proxy's address.
	RunDSN    string
	RedisAddr string
	Scale     Scale
	Terminals int // per warehouse
	Warmup    time.Duration
	Duration  time.Duration
	Seed      uint64
	Log       io.Writer // progress lines
	// Configure adjusts the sidecar's configuration (session policies).
	Configure func(*config.Config)
	// Cold starts a sidecar run with an empty cache; otherwise Warm fills
	// it first, as the load leaves the database's buffer pool warm.
	Cold bool
	// CPUProfile, if set, receives a CPU profile of the measured run
	// (RunOptions.CPUProfile).
	CPUProfile string
	// AfterFlush, if set, runs once a sidecar's queues are flushed, before
	// the sidecar stops (tests look at its cache).
	AfterFlush func(context.Context, *sidecar.Sidecar) error
}

// Outcome is one policy's result: the run, the flush and the checks.
type Outcome struct {
	Result
	LoadSeconds  float64     `json:"load_s"`
	FlushSeconds float64     `json:"flush_s,omitempty"`
	Flushed      int64       `json:"flushed_sessions,omitempty"` // sessions the flush applied
	Check        CheckResult `json:"check"`
	// Round is the run's round when a command runs every policy several
	// times in turn (0: it does not).
	Round int `json:"round,omitempty"`
}

// Bench loads a fresh database, runs the policy, flushes the sidecar's
// queues and checks consistency conditions 1–5, 7 and 10 and the committed work. A
// violation is returned in the Outcome (Check), not as an error.
func Bench(ctx context.Context, o Options) (Outcome, error) {
	var out Outcome
	if o.Store == "" {
		o.Store = Postgres
	}
	conns := max(4, o.Scale.Warehouses*o.Terminals+2)
	db, err := Open(ctx, o.Store, o.DSN, conns)
	if err != nil {
		return out, err
	}
	defer db.Close()
	runDSN := o.DSN
	if o.RunDSN != "" {
		runDSN = o.RunDSN
	}
	began := time.Now()
	consts, err := Load(ctx, db, o.Scale, o.Seed)
	if err != nil {
		return out, err
	}
	out.LoadSeconds = time.Since(began).Seconds()
	fmt.Fprintf(o.Log, "[tpcc %s] loaded %d warehouses (%d items, %d customers per district) in %.1fs\n",
		o.Policy, o.Scale.Warehouses, o.Scale.Items, o.Scale.Customers, out.LoadSeconds)
	ro := RunOptions{Label: "tpcc " + o.Policy, Store: o.Store, Scale: o.Scale, Terminals: o.Terminals, Warmup: o.Warmup, Duration: o.Duration,
		Seed: o.Seed, Constants: consts, Progress: o.Log, CPUProfile: o.CPUProfile}
	if o.Policy == bench.Database {
		run := db
		if runDSN != o.DSN {
			if run, err = Open(ctx, o.Store, runDSN, conns); err != nil {
				return out, err
			}
			defer run.Close()
		}
		ro.Exec = run.Executor()
		if out.Result, err = Run(ctx, ro); err != nil {
			return out, err
		}
	} else {
		sc, err := StartSidecar(ctx, SidecarOptions{Policy: o.Policy, Store: o.Store, DSN: runDSN, RedisAddr: o.RedisAddr, Configure: o.Configure})
		if err != nil {
			return out, err
		}
		defer sc.Close()
		if !o.Cold {
			began := time.Now()
			n, err := Warm(ctx, sc.Client, o.Scale)
			if err != nil {
				return out, err
			}
			fmt.Fprintf(o.Log, "[tpcc %s] warmed the cache: read %d entries in %.1fs\n", o.Policy, n, time.Since(began).Seconds())
		}
		var sessions writeback.Sessions = sc.Client
		if sc.Embedded != nil {
			sessions = sc.Embedded
		}
		ro.Exec, ro.Memory = &SessionExecutor{Client: sessions, Store: o.Store}, SessionMemory(sc)
		if out.Result, err = Run(ctx, ro); err != nil {
			return out, err
		}
		logAppliers(o.Log, "tpcc "+o.Policy, sc)
		fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		began := time.Now()
		out.Flushed, err = FlushQueues(fctx, sc)
		cancel()
		out.FlushSeconds = time.Since(began).Seconds()
		if err != nil {
			return out, fmt.Errorf("tpcc: flushing the queues after the %s run: %w", o.Policy, err)
		}
		if o.AfterFlush != nil {
			if err := o.AfterFlush(ctx, sc); err != nil {
				return out, err
			}
		}
	}
	out.Policy = o.Policy
	out.Check, err = Check(ctx, db, o.Scale, out.Work)
	return out, err
}

// logAppliers prints what the sidecar's queue appliers did over the whole
// run (warm-up included): store transactions, sessions and time per
// transaction, the session reads, and the lease requests that waited for
// another session's lease.
func logAppliers(w io.Writer, label string, sc *sidecar.Sidecar) {
	sessions, batches, err1 := sc.Metric("writeback_session_apply_batch_size")
	secs, _, err2 := sc.Metric("writeback_session_apply_duration_seconds")
	reads, _, err3 := sc.Metric("writeback_session_cache_reads_total")
	timeouts, _, err4 := sc.Metric("writeback_session_apply_batch_timeouts_total")
	waited, waits, err5 := sc.Metric("writeback_session_lease_wait_seconds")
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil || batches == 0 {
		return
	}
	fmt.Fprintf(w, "[%s] appliers: %d store transactions, %.1f sessions and %.2f ms each on average, %.0f timed out; %.0f cache reads; %d lease waits, %.2f ms each on average\n",
		label, batches, sessions/float64(batches), 1000*secs/float64(batches), timeouts, reads, waits, 1000*waited/float64(max(waits, 1)))
}
