// Command demo is the project's headline benchmark: it loads a YCSB table
// into PostgreSQL or MariaDB and runs the same read/update mix against the
// database alone and then through an in-process sidecar under each write
// policy (write-around, write-through, write-back), each on a freshly loaded
// copy of the table. After every run it drains the sidecar and checks that
// the table holds exactly the last acknowledged value of every updated
// field. It prints one table of throughput and latencies, and the ratios
// that show what write-back buys.
//
//	go run ./benchmarks/demo [--store postgres|mysql] [--quick] [--json out.json] …
//
// Run `make services` first. See benchmarks/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"golang.org/x/sync/errgroup"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/benchmarks/sidecar"
	"github.com/writeback/writeback/benchmarks/ycsb"
	"github.com/writeback/writeback/internal/config"
)

// Policies, in the order they run; "database" is the database alone.
const (
	database     = "database"
	writeAround  = "write-around"
	writeThrough = "write-through"
	writeBack    = "write-back"
)

var allPolicies = []string{database, writeAround, writeThrough, writeBack}

type options struct {
	store        string
	records      int64
	fields       int
	fieldSize    int
	clients      int
	duration     time.Duration
	warmup       time.Duration
	warm         bool
	distribution string
	readRatio    float64
	redis        string
	pgDSN        string
	mysqlDSN     string
	keep         bool
	jsonOut      string
	quick        bool
	cpuprofile   string
	trace        string
	tune         tuning
	policies     []string
	seed         uint64
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.store, "store", ycsb.Postgres, "database behind the cache: postgres or mysql")
	fs.Int64Var(&o.records, "records", 100_000, "rows of the usertable")
	fs.IntVar(&o.fields, "fields", 10, "fields per row")
	fs.IntVar(&o.fieldSize, "field-size", 100, "bytes per field value")
	fs.IntVar(&o.clients, "clients", 8, "concurrent clients")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "measured time per run")
	fs.DurationVar(&o.warmup, "warmup", 3*time.Second, "unmeasured warm-up before each run's measured time")
	fs.BoolVar(&o.warm, "warm", true, "read every record once before each run (a warm cache and buffer pool, as in the paper)")
	fs.StringVar(&o.distribution, "distribution", "zipfian", "key popularity: zipfian (YCSB's scrambled zipfian, 0.99) or uniform")
	fs.Float64Var(&o.readRatio, "read-ratio", 0.5, "fraction of operations that are reads; the rest update one field")
	fs.StringVar(&o.redis, "redis", "127.0.0.1:6379", "Redis address")
	fs.StringVar(&o.pgDSN, "pg-dsn", "postgres://postgres@127.0.0.1:5432/writeback?sslmode=disable", "PostgreSQL DSN")
	fs.StringVar(&o.mysqlDSN, "mysql-dsn", "root@tcp(127.0.0.1:3306)/writeback", "MySQL/MariaDB DSN")
	fs.BoolVar(&o.keep, "keep", false, "keep the usertable when done (it holds the last run's data)")
	fs.StringVar(&o.jsonOut, "json", "", "also write the results as JSON to this file")
	fs.BoolVar(&o.quick, "quick", false, "smoke test: 10000 records, 3s runs, 1s warm-up (explicit flags win)")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of each run's measured time to this file (the policy is added to the name when several run)")
	fs.StringVar(&o.trace, "trace", "", "write an execution trace of each run's measured time to this file, named like --cpuprofile's (large: use a short --duration)")
	fs.IntVar(&o.tune.partitions, "partitions", 0, "sidecar writeback.partitions (0: the sidecar's default)")
	fs.IntVar(&o.tune.workers, "workers", 0, "sidecar writeback.workers (0: the sidecar's default)")
	fs.IntVar(&o.tune.batchSize, "batch-size", 0, "sidecar writeback.batchSize (0: the sidecar's default)")
	fs.DurationVar(&o.tune.pollInterval, "poll-interval", 0, "sidecar writeback.pollInterval (0: the sidecar's default)")
	policies := fs.String("policies", strings.Join(allPolicies, ","), "comma-separated runs, in order: "+strings.Join(allPolicies, ", "))
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the loaded values and of the workload")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; every option is a flag (see -h)", fs.Arg(0))
	}
	if o.quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["records"] {
			o.records = 10_000
		}
		if !set["duration"] {
			o.duration = 3 * time.Second
		}
		if !set["warmup"] {
			o.warmup = time.Second
		}
	}
	for _, p := range strings.Split(*policies, ",") {
		p = strings.TrimSpace(p)
		if !contains(allPolicies, p) {
			return nil, fmt.Errorf("--policies: unknown run %q; use %s", p, strings.Join(allPolicies, ", "))
		}
		if contains(o.policies, p) {
			return nil, fmt.Errorf("--policies: %q is listed twice", p)
		}
		o.policies = append(o.policies, p)
	}
	switch {
	case o.store != ycsb.Postgres && o.store != ycsb.MySQL:
		return nil, fmt.Errorf("--store %q: use postgres or mysql", o.store)
	case o.clients < 1:
		return nil, fmt.Errorf("--clients %d: need at least one", o.clients)
	case o.records < int64(o.clients):
		return nil, fmt.Errorf("--records %d: need at least one per client (%d)", o.records, o.clients)
	case o.readRatio < 0 || o.readRatio > 1:
		return nil, fmt.Errorf("--read-ratio %v: use a fraction from 0 to 1", o.readRatio)
	case o.duration <= 0 || o.warmup < 0:
		return nil, fmt.Errorf("--duration must be positive and --warmup not negative")
	}
	return o, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (o *options) dsn() string {
	if o.store == ycsb.MySQL {
		return o.mysqlDSN
	}
	return o.pgDSN
}

func (o *options) spec() ycsb.Spec {
	return ycsb.Spec{Table: "usertable", Records: o.records, Fields: o.fields, FieldSize: o.fieldSize}
}

// tuning overrides the sidecar's applier settings; zero values keep its
// defaults.
type tuning struct {
	partitions, workers, batchSize int
	pollInterval                   time.Duration
}

func (t tuning) apply(c *config.Config) {
	if t.partitions > 0 {
		c.Writeback.Partitions = t.partitions
	}
	if t.workers > 0 {
		c.Writeback.Workers = t.workers
	}
	if t.batchSize > 0 {
		c.Writeback.BatchSize = t.batchSize
	}
	if t.pollInterval > 0 {
		c.Writeback.PollInterval = config.Duration{Duration: t.pollInterval}
	}
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

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }

	spec := o.spec()
	if err := spec.Validate(); err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 2
	}
	chooser, err := ycsb.NewChooser(o.distribution, o.records)
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 2
	}
	db, err := ycsb.Open(ctx, o.store, o.dsn())
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	defer db.Close()
	if err := pingRedis(ctx, o.redis); err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}

	logf("demo: %s, %d records × %d fields × %d B, %d clients, %s keys, %.0f%% reads; per run %v warm-up + %v measured; %d CPUs",
		o.store, o.records, o.fields, o.fieldSize, o.clients, o.distribution, 100*o.readRatio, o.warmup, o.duration, runtime.NumCPU())
	var results []*runResult
	failed := false
	keepTable := o.keep
	for _, p := range o.policies {
		r, err := runPolicy(ctx, o, p, db, spec, chooser, logf)
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

func pingRedis(ctx context.Context, addr string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("cannot connect to Redis at %s (%v); start the services with `make services`", addr, err)
	}
	return nil
}

// runPolicy loads a fresh table, runs the workload against the database or
// a sidecar with the policy, drains the sidecar and verifies the table.
func runPolicy(ctx context.Context, o *options, policy string, db *ycsb.DB, spec ycsb.Spec, chooser ycsb.Chooser, logf func(string, ...any)) (*runResult, error) {
	r := &runResult{policy: policy, sidecar: policy != database}
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
		if err := warm(ctx, clients, spec.Records); err != nil {
			return nil, fmt.Errorf("warming: %w", err)
		}
		logf("%s warmed: read all %d records in %.1fs", tag, spec.Records, time.Since(t).Seconds())
	}
	w := &ycsb.Workload{
		Spec: spec, Clients: o.clients, ReadRatio: o.readRatio, Chooser: chooser,
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

// measurement is what happens when a run's measured window opens and
// closes: profiles and traces start and stop, the sidecar's cache counters
// are read.
type measurement struct {
	tag                   string
	logf                  func(string, ...any)
	sc                    *sidecar.Sidecar
	cpuPath, tracePath    string
	cpuFile, traceFile    *os.File
	hits0, misses0        float64
	hits, misses          float64 // in the window
	batchDocs0, applySec0 float64
	batches0, applies0    uint64
	batchDocs, applySec   float64 // applier batches in the window: documents and seconds
	batches               uint64
}

func (m *measurement) start() {
	if m.sc != nil {
		m.hits0, _, _ = m.sc.Metric("writeback_cache_hits_total")
		m.misses0, _, _ = m.sc.Metric("writeback_cache_misses_total")
		m.batchDocs0, m.batches0, _ = m.sc.Metric("writeback_apply_batch_size")
		m.applySec0, m.applies0, _ = m.sc.Metric("writeback_apply_duration_seconds")
	}
	if m.cpuPath != "" {
		f, err := os.Create(m.cpuPath)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			m.logf("%s CPU profile: %v", m.tag, err)
		} else {
			m.cpuFile = f
		}
	}
	if m.tracePath != "" {
		f, err := os.Create(m.tracePath)
		if err == nil {
			err = trace.Start(f)
		}
		if err != nil {
			m.logf("%s trace: %v", m.tag, err)
		} else {
			m.traceFile = f
		}
	}
}

func (m *measurement) stop() {
	if m.cpuFile != nil {
		pprof.StopCPUProfile()
		m.cpuFile.Close()
		m.logf("%s wrote CPU profile %s", m.tag, m.cpuPath)
	}
	if m.traceFile != nil {
		trace.Stop()
		m.traceFile.Close()
		m.logf("%s wrote trace %s", m.tag, m.tracePath)
	}
	if m.sc != nil {
		h, _, _ := m.sc.Metric("writeback_cache_hits_total")
		ms, _, _ := m.sc.Metric("writeback_cache_misses_total")
		m.hits, m.misses = h-m.hits0, ms-m.misses0
		docs, n, _ := m.sc.Metric("writeback_apply_batch_size")
		sec, _, _ := m.sc.Metric("writeback_apply_duration_seconds")
		m.batchDocs, m.batches, m.applySec = docs-m.batchDocs0, n-m.batches0, sec-m.applySec0
	}
}

// profilePath names the profile of one policy's run: "cpu.prof" becomes
// "cpu-write-back.prof" when several runs are profiled.
// warm reads every record once, the clients sharing the keys.
func warm(ctx context.Context, clients []ycsb.Client, records int64) error {
	g, ctx := errgroup.WithContext(ctx)
	for c, cl := range clients {
		g.Go(func() error {
			for i := int64(c); i < records; i += int64(len(clients)) {
				if _, err := cl.Read(ctx, ycsb.Key(i), false); err != nil {
					return fmt.Errorf("%s: %w", ycsb.Key(i), err)
				}
			}
			return nil
		})
	}
	return g.Wait()
}

func profilePath(path, policy string, several bool) string {
	if !several {
		return path
	}
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "-" + policy + ext
}
