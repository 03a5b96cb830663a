package bgrun

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/bg"
	"github.com/writeback/writeback/internal/config"
)

// Main is the bg command: it parses args as its flags and, for each store,
// policy and mix of the paper's Table 4, ramps threads to find the SoAR
// (the highest throughput with --sla-pct of actions within --sla-ms),
// validates every read against the acknowledged writes and, after draining
// the sidecar, the store's final state. It prints a table and the SoAR
// ratios to stdout and progress to stderr, writes JSON and PNG plots under
// --out, and returns the exit code: 0 success, 1 a stale read, a lost
// write or a failed run, 2 bad flags.
func Main(args []string, stdout, stderr io.Writer) int { return run(args, stdout, stderr) }

// run is Main; execute runs the parsed command.
func run(args []string, stdout, stderr io.Writer) int {
	return bench.Command(context.Background(), "bg", args, stdout, stderr, parseFlags, execute)
}

// execute runs the stores in turn, reports them and returns the exit code.
func execute(ctx context.Context, o *options, stdout, stderr io.Writer) int {
	logf := bench.Logf(stderr)
	started := time.Now()
	mixNames := make([]string, len(o.mixes))
	for i, m := range o.mixes {
		mixNames[i] = m.Name
	}
	logf("bg: %d members (MongoDB: %d) × %d friends + %d pending; mixes %s %% reads; ramp %v, %v per step; SLA %g%% ≤ %gms; %d CPUs",
		o.graph.Members, o.mongoMembers, o.graph.Friends, o.graph.Pending, strings.Join(mixNames, ", "), o.threads, o.step, o.slaPct, o.slaMs, runtime.NumCPU())

	if o.cpuprof != "" {
		stop, err := bench.StartCPUProfile(o.cpuprof)
		if err != nil {
			fmt.Fprintln(stderr, "bg:", err)
			return 1
		}
		defer stop()
	}
	var runs []*storeRun
	exit := 0
	for _, name := range o.stores {
		sr := &storeRun{
			Store:       name,
			Environment: bench.NewEnvironment("go run ./benchmarks/cmd/bg "+strings.Join(o.args, " "), o.quick),
			Settings: settings{Members: o.graphOf(name).Members, Friends: o.graph.Friends, Pending: o.graph.Pending, Mixes: mixNames,
				Threads: o.threads, StepS: o.step.Seconds(), SLAMs: o.slaMs, SLAPct: o.slaPct, Seed: o.seed, Policies: o.policies,
				Workers: o.workers, BatchSize: o.batchSizeOf(name)},
			Errors: map[string]string{}, byPolicy: map[string]*bg.Result{},
		}
		runs = append(runs, sr)
		if err := runStore(ctx, o, sr, stderr, logf); err != nil {
			fmt.Fprintf(stderr, "bg: %s: %v\n", name, err)
			return 1
		}
		if ctx.Err() != nil {
			return 1
		}
	}
	fmt.Fprintln(stdout)
	printTable(stdout, o, runs)
	printRatios(stdout, o, runs)
	for _, sr := range runs {
		if err := writeOutputs(o, sr); err != nil {
			fmt.Fprintln(stderr, "bg:", err)
			exit = 1
		}
		if len(sr.failed) > 0 {
			exit = 1
		}
	}
	printValidation(stdout, runs)
	logf("bg: done in %.0fs; results in %s", time.Since(started).Seconds(), o.out)
	return exit
}

// runStore runs every policy on one store. A policy's failure is recorded
// and the next policy runs; only a store that cannot be reached ends it.
func runStore(ctx context.Context, o *options, sr *storeRun, stderr io.Writer, logf func(string, ...any)) error {
	var st bg.Store
	var err error
	switch sr.Store {
	case "mongodb":
		var m *bg.Mongo
		if m, err = bg.OpenMongo(ctx, o.mongoURI, bg.MongoCollection); err == nil {
			st = m
			server := m.Server(ctx)
			sr.Environment.Comments = append(sr.Environment.Comments, "server: "+server)
			if strings.HasPrefix(server, "FerretDB") {
				sr.Environment.Comments = append(sr.Environment.Comments,
					"FerretDB's SQLite backend scans the collection for every lookup by a string _id, so every store operation costs time proportional to the members",
					"FerretDB loses concurrent updates of one document; the database policies' client serializes its updates per document, as MongoDB would apply them")
			}
			logf("bg: mongodb: %s", server)
		}
	case "postgres":
		st, err = bg.OpenPostgres(ctx, o.pgDSN, bg.PostgresTable)
	}
	if err != nil {
		return err
	}
	defer st.Close()
	for _, p := range o.policies {
		if p == bench.WriteBackRESP {
			sr.NotApplicable = append(sr.NotApplicable, notApplicable{Policy: p, Reason: bg.NotApplicableRESP})
			logf("bg: %s %s: not applicable: %s", sr.Store, p, bg.NotApplicableRESP)
			continue
		}
		cfg := bg.Config{
			Policy: p, Graph: o.graphOf(sr.Store), Mixes: o.mixes, Threads: o.threads, Step: o.step,
			SLALatency: time.Duration(o.slaMs * float64(time.Millisecond)), SLAPct: o.slaPct,
			Seed: o.seed, RedisAddr: o.redis, Progress: stderr, Log: logf, Samples: o.samples,
		}
		batch := o.batchSizeOf(sr.Store)
		cfg.Configure = func(c *config.Config) {
			if o.workers > 0 {
				c.Writeback.Workers = o.workers
			}
			if batch > 0 {
				c.Writeback.BatchSize = batch
			}
			for name, coll := range c.Collections {
				if o.nearHot >= 0 {
					coll.NearCache.HotWindow = config.Duration{Duration: o.nearHot}
				}
				if o.nearLease > 0 {
					coll.NearCache.LeaseTTL = config.Duration{Duration: o.nearLease}
				}
				c.Collections[name] = coll
			}
		}
		t := time.Now()
		res, err := bg.Run(ctx, st, cfg)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			sr.Errors[p] = err.Error()
			sr.failed = append(sr.failed, fmt.Sprintf("%s %s: %v", sr.Store, p, err))
			logf("bg: %s %s failed: %v", sr.Store, p, err)
			continue
		}
		sr.Results = append(sr.Results, res)
		sr.byPolicy[p] = res
		if res.Failed() {
			sr.failed = append(sr.failed, fmt.Sprintf("%s %s: %d stale reads, %d wrong lists in the store", sr.Store, p, res.Validation.Stale, res.FinalBad))
		}
		logf("bg: %s %s: done in %.1fs; %d reads checked, %d stale; %d changes; final state: %d of %d lists wrong",
			sr.Store, p, time.Since(t).Seconds(), res.Validation.Reads, res.Validation.Stale, res.Changes, res.FinalBad, res.FinalLists)
	}
	sr.Ratios = map[string]ratios{}
	for k, m := range o.mixes {
		// soar is policy of's SoAR over policy to's; 0 where either is
		// missing or to never met the SLA.
		soar := func(of, to string) float64 {
			a, b := sr.byPolicy[of], sr.byPolicy[to]
			if a == nil || b == nil || k >= len(a.Mixes) || k >= len(b.Mixes) || b.Mixes[k].SoAR == 0 {
				return 0
			}
			return a.Mixes[k].SoAR / b.Mixes[k].SoAR
		}
		r := ratios{Database: soar(bench.WriteBack, bench.Database), WriteThrough: soar(bench.WriteBack, bench.WriteThrough),
			DatabaseAsync: soar(bench.WriteBack, bench.DatabaseAsync), EmbeddedDatabase: soar(bench.WriteBackEmbedded, bench.Database)}
		if r != (ratios{}) {
			sr.Ratios[m.Name] = r
		}
	}
	return nil
}
