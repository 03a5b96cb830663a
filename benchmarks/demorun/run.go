package demorun

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/sidecar"
	"github.com/writeback/writeback/benchmarks/ycsb"
)

// Main is the demo command: it parses args as its flags and loads a YCSB
// table into PostgreSQL or MariaDB, then runs the same read/update mix
// against the database alone and through an in-process sidecar under each
// write policy, each on a freshly loaded copy of the table. After every run
// it drains the sidecar and checks that the table holds exactly the last
// acknowledged value of every updated field. It prints one table of
// throughput and latencies and the ratios that show what write-back buys,
// and returns the exit code: 0 success, 1 a failed or unverified run, 2 bad
// flags.
func Main(args []string, stdout, stderr io.Writer) int {
	return bench.Command(context.Background(), "demo", args, stdout, stderr, parseFlags, execute)
}

// execute runs the policies in turn on one database and reports them.
func execute(ctx context.Context, o *options, stdout, stderr io.Writer) int {
	logf := bench.Logf(stderr)
	spec := o.spec()
	db, err := ycsb.Open(ctx, o.store, o.dsn())
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	defer db.Close()
	if err := bench.PingRedis(ctx, o.redis); err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}

	logf("demo: %s, %d records × %d fields × %d B, %d clients, %s keys, %.0f%% reads; per run %v warm-up + %v measured; %d CPUs",
		o.store, o.records, o.fields, o.fieldSize, o.clients, o.distribution, 100*o.readRatio, o.warmup, o.duration, runtime.NumCPU())
	var results []*runResult
	failed := false
	keepTable := o.keep
	for _, p := range o.policies {
		r, err := runPolicy(ctx, o, p, db, spec, logf)
		if r != nil {
			results = append(results, r)
		}
		if err != nil {
			fmt.Fprintf(stderr, "demo: %s: %v\n", p, err)
			failed = true
			// Keep the evidence of a failure, not of an interrupted run.
			keepTable = keepTable || ctx.Err() == nil
			break
		}
		fmt.Fprintf(stdout, "verify: %d updated fields match the database (%s)\n", r.checked, p)
		if r.res.ReadChecks > 0 {
			fmt.Fprintf(stdout, "verify: %d reads of a client's own updated records returned its last acknowledged values (%s)\n", r.res.ReadChecks, p)
		}
	}
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if keepTable {
		logf("demo: kept table usertable")
	} else {
		if err := db.Drop(cctx, spec.Table); err != nil {
			logf("demo: dropping usertable: %v", err)
		}
		if err := sidecar.ForgetApplied(cctx, db, spec.Table); err != nil {
			logf("demo: deleting the applied records of usertable: %v", err)
		}
	}
	if len(results) > 0 {
		fmt.Fprintln(stdout)
		printTable(stdout, results)
		printRatios(stdout, results)
	}
	if o.jsonOut != "" {
		if err := writeJSON(o, results, failed); err != nil {
			fmt.Fprintln(stderr, "demo:", err)
			return 1
		}
		logf("demo: wrote %s", o.jsonOut)
	}
	if failed {
		return 1
	}
	return 0
}

// runResult is one row of the table.
type runResult struct {
	policy  string
	res     *ycsb.Result
	load    time.Duration
	sidecar bool
	pending int64 // at the end of the run, before the flush
	pinned  int64
	flush   time.Duration
	applied int64   // changes the flush applied
	hits    float64 // cache hits and misses of the sidecar in the measured window
	misses  float64
	checked int // fields verified
}

// runPolicy loads a fresh table, runs the workload against the database or
// a sidecar with the policy, drains the sidecar and verifies the table.
func runPolicy(ctx context.Context, o *options, policy string, db *ycsb.DB, spec ycsb.Spec, logf func(string, ...any)) (*runResult, error) {
	r := &runResult{policy: policy, sidecar: policy != bench.Database}
	tag := "[" + policy + "]"
	start := time.Now()
	err := db.Load(ctx, spec, o.seed, func(n int64, done bool) {
		if done {
			logf("%s loaded %d rows into %s in %.1fs", tag, n, spec.Table, time.Since(start).Seconds())
			return
		}
		logf("%s loading %s: %d/%d rows (%.0f%%), %.1fs", tag, spec.Table, n, spec.Records, 100*float64(n)/float64(spec.Records), time.Since(start).Seconds())
	})
	if err != nil {
		return nil, err
	}
	r.load = time.Since(start)
	if err := sidecar.ForgetApplied(ctx, db, spec.Table); err != nil {
		return nil, err
	}

	clients := make([]ycsb.Client, o.clients)
	var sc *sidecar.Sidecar
	if r.sidecar {
		sc, err = sidecar.Start(ctx, sidecar.Options{
			Policy: policy, Driver: o.store, DSN: o.dsn(), RedisAddr: o.redis,
			Collection: spec.Table, Key: ycsb.KeyColumn, PrefixBase: "demo",
			Configure: o.tune.apply,
		})
		if err != nil {
			return nil, err
		}
		defer func() {
			if err := sc.Close(); err != nil {
				logf("%s stopping the sidecar: %v", tag, err)
			}
		}()
		for i := range clients {
			clients[i] = sc.NewClient(spec.Fields)
		}
		logf("%s sidecar on %s, Redis prefix %s", tag, sc.Addr(), sc.Prefix)
	} else {
		for i := range clients {
			c, err := db.NewClient(ctx, spec)
			if err != nil {
				return nil, err
			}
			clients[i] = c
		}
	}
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
	}()

	if o.warm {
		// As in the paper, runs start warm: every record read once, through
		// the same clients (the database alone warms its buffer pool the
		// same way), so the measured window is not dominated by first-touch
		// misses of a 20 s run over 100k records.
		t := time.Now()
		if err := ycsb.Warm(ctx, clients, spec.Records); err != nil {
			return nil, err
		}
		logf("%s warmed: read all %d records in %.1fs", tag, spec.Records, time.Since(t).Seconds())
	}
	w := &ycsb.Workload{
		Spec: spec, Clients: o.clients, ReadRatio: o.readRatio, Chooser: o.chooser,
		Warmup: o.warmup, Duration: o.duration, Seed: o.seed + 1,
	}
	var measure measurement
	measure.tag, measure.logf, measure.sc = tag, logf, sc
	if o.cpuprofile != "" {
		measure.cpuPath = profilePath(o.cpuprofile, policy, len(o.policies) > 1)
	}
	if o.trace != "" {
		measure.tracePath = profilePath(o.trace, policy, len(o.policies) > 1)
	}
	w.OnMeasure, w.OnMeasureEnd = measure.start, measure.stop
	logf("%s running: %v warm-up, then %v measured", tag, o.warmup, o.duration)
	res, err := w.Run(ctx, clients)
	if err != nil {
		return nil, err
	}
	r.res = res
	r.hits, r.misses = measure.hits, measure.misses
	if measure.batches > 0 {
		logf("%s appliers: %d store transactions in the measured time, %.1f documents and %.2f ms each on average",
			tag, measure.batches, measure.batchDocs/float64(measure.batches), 1000*measure.applySec/float64(measure.batches))
	}
	logf("%s %.0f ops/s, %d errors", tag, res.Throughput(), res.Errors)

	if sc != nil {
		st, err := sc.Client.Status(ctx)
		if err != nil {
			return r, fmt.Errorf("status: %w", err)
		}
		r.pending, r.pinned = st.Pending, st.PinnedBytes
		fstart := time.Now()
		fr, err := sc.Flush(ctx)
		r.flush, r.applied = time.Since(fstart), fr.Applied
		if err != nil {
			return r, err
		}
		logf("%s flushed %d pending changes (%d applied by the flush) in %v", tag, r.pending, fr.Applied, r.flush.Round(time.Millisecond))
	}

	if res.Errors > 0 {
		return r, fmt.Errorf("%d operations failed; the first: %s", res.Errors, strings.Join(res.ErrorSamples, "; "))
	}
	if res.StaleReads > 0 {
		return r, fmt.Errorf("%d of %d reads of a client's own records did not return its last acknowledged write: %s", res.StaleReads, res.ReadChecks, strings.Join(res.StaleSamples, "; "))
	}
	v, err := res.Model.Verify(ctx, db, spec, 10)
	if err != nil {
		return r, fmt.Errorf("verify: %w", err)
	}
	r.checked = v.Checked
	if v.Bad > 0 {
		lines := make([]string, len(v.First))
		for i, m := range v.First {
			lines[i] = "  " + m.String()
		}
		return r, fmt.Errorf("verify: %d of %d updated fields do NOT match the database (table usertable kept for inspection); the first:\n%s",
			v.Bad, v.Checked, strings.Join(lines, "\n"))
	}
	return r, nil
}
