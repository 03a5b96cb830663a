// Command ycsb runs the paper's YCSB evaluation (section 4.1, Figures 1, 5
// and 9, Table 3) on this machine: workloads A (50 % reads, 50 % updates), B
// (95/5), C (100 % reads) and S (95 % scans of 5 records from a random key,
// 5 % updates) against PostgreSQL, MariaDB or MongoDB, under every policy of
// package bench — the database alone, its own asynchronous commit, and a
// sidecar with write-around, write-through and write-back over HTTP and
// write-back over the Redis protocol — and, with --sweep-workers, the
// paper's applier sweep (Figure 5): write-back runs of A, B and S with each
// number of appliers (writeback.workers).
//
//	go run ./benchmarks/cmd/ycsb [--quick] [--store postgres,mysql,mongodb] [--workloads A,B,C,S]
//	                             [--policies all] [--sweep-workers 1,2,4,8,16] [--compare=false] …
//
// For each store and policy it loads a fresh table (MongoDB: a collection
// in database ycsb, _id = key), starts a fresh sidecar (Redis key prefix
// ycsb-<policy>-<random>) or opens direct clients, and runs the workloads
// one after another on them. Before the first, every record is read once
// through the run's own clients (a warm cache and buffer pool, as in the
// paper); later workloads find it still warm — entries live an hour and
// writes update them — except under write-around, whose writes delete
// entries, so it is warmed again. Each workload runs a warm-up and a
// measured window, then the sidecar is drained (flush) and the table
// compared with the last acknowledged value of every updated field; every
// read (and scanned record) of a client's own record is also checked
// against its last acknowledged write during the run. A mismatch, a stale
// read or a failed operation fails the command (exit 1) once the tables are
// printed, and the table is kept for inspection.
//
// Choices:
//   - A read reads the whole record. An update sets one random field, as
//     YCSB's core workload does by default; --update-all sets every field
//     in one operation, as the paper does.
//   - Scans: the HTTP API's GET /v1/docs/{collection}?from=&limit=. The
//     Redis-protocol front door has no scan command, so write-back-resp
//     skips workload S (reported as n/a with the reason); it also serves SQL
//     collections only, so it does not run on MongoDB at all.
//   - Keys are uniform by default, as in the paper; --distribution zipfian
//     uses YCSB's scrambled zipfian.
//   - database-async is PostgreSQL's synchronous_commit=off (per
//     connection), MariaDB's innodb_flush_log_at_trx_commit=2 (global, set
//     for the run and restored) or MongoDB's w=1, journal=false.
//   - The sweep: a fresh sidecar per applier count, workloads of
//     --sweep-workloads on it; throughput normalized to the first count,
//     and, when the measured window closes, the changes applied since the
//     workload started / (applied + pending) and the pinned bytes.
//   - MongoDB here is FerretDB on SQLite, which needs 0.1–0.3 s per
//     document operation on a collection of a few thousand documents: use
//     a few hundred --records there; the sidecars' writeback.batchSize is
//     16 on MongoDB (--batch-size), since a batch of 128 outlives the
//     appliers' 30 s batch timeout and would be retried forever.
//
// It prints a table per store on stdout and writes under --out:
// ycsb-<store>.json (settings, every run with its latency percentiles,
// verification, buffer state and pinned bytes over time, ratios, the
// sweep), ycsb-<store>-throughput.png (ops/s per workload and policy, the
// analogue of Figure 9), ycsb-<store>-pinned.png (pinned bytes over time in
// the write-back runs, sampled every 250 ms) and, with the sweep,
// ycsb-<store>-sweep-{throughput,applied,pinned}.png (Figure 5a–c). Progress
// (a line per second per run) goes to stderr. Run `make services` first.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/ycsb"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command's flags, validated.
type options struct {
	stores         []string
	workloads      []string
	policies       []string
	records        int64
	fields         int
	fieldSize      int
	threads        int
	duration       time.Duration
	warmup         time.Duration
	distribution   string
	updateAll      bool
	scanLength     int
	out            string
	quick          bool
	seed           uint64
	compare        bool
	sweepWorkers   []int
	sweepWorkloads []string
	sweepDuration  time.Duration
	batchSize      int // writeback.batchSize; 0: the sidecar's default, 16 on MongoDB
	table          string
	redis          string
	pgDSN          string
	mysqlDSN       string
	mongoURI       string
	mongoDatabase  string
	args           []string

	// beforeVerify, if set, is called after each run's flush, before the
	// table is verified (tests use it to tamper with the table).
	beforeVerify func(ctx context.Context, db *ycsb.DB, spec ycsb.Spec, updated []string) error
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{args: args}
	fs := flag.NewFlagSet("ycsb", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stores := fs.String("store", ycsb.Postgres, "database(s) behind the cache, comma-separated: postgres, mysql, mongodb")
	workloads := fs.String("workloads", "A,B,C,S", "YCSB workloads, comma-separated: A (50% read/50% update), B (95/5), C (100% read), S (95% scan of --scan-length records/5% update)")
	policies := fs.String("policies", "all", "policies, comma-separated, or all: "+strings.Join(bench.Policies, ","))
	fs.Int64Var(&o.records, "records", 100_000, "records in the table")
	fs.IntVar(&o.fields, "fields", 10, "fields per record")
	fs.IntVar(&o.fieldSize, "field-size", 100, "bytes per field value")
	fs.IntVar(&o.threads, "threads", 8, "concurrent clients, each issuing one operation at a time")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "measured time per run")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured warm-up of each run, after its cache warming and before the measured time")
	fs.StringVar(&o.distribution, "distribution", "uniform", "record popularity: uniform (the paper's default) or zipfian (YCSB's scrambled zipfian, 0.99)")
	fs.BoolVar(&o.updateAll, "update-all", false, "an update sets every field of the record, as in the paper (default: one random field, as YCSB's core workload)")
	fs.IntVar(&o.scanLength, "scan-length", 5, "records per scan of workload S")
	fs.StringVar(&o.out, "out", "benchmarks/results", "directory of the JSON results and PNG plots")
	fs.BoolVar(&o.quick, "quick", false, "small and short: 5000 records, 1s warm-up, 2s runs, sweep 1,4,16 (flags given explicitly win)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the loaded values and of the workloads")
	fs.BoolVar(&o.compare, "compare", true, "run the policy comparison (false: only the sweep)")
	sweep := fs.String("sweep-workers", "", "applier sweep (paper's Figure 5): write-back runs with each of these writeback.workers values, e.g. 1,2,4,8,16 (empty: no sweep)")
	sweepWorkloads := fs.String("sweep-workloads", "A,B,S", "workloads of the applier sweep")
	fs.DurationVar(&o.sweepDuration, "sweep-duration", 0, "measured time per sweep run (0: --duration)")
	fs.IntVar(&o.batchSize, "batch-size", 0, "sidecar writeback.batchSize, documents per store transaction (0: the sidecar's default, 128; 16 on mongodb, where FerretDB takes 0.1-0.3 s per document and a batch of 128 outlives the appliers' 30 s batch timeout)")
	fs.StringVar(&o.table, "table", "ycsb_usertable", "table (MongoDB: collection) the runs load; also the sidecar's collection")
	fs.StringVar(&o.redis, "redis", "127.0.0.1:6379", "Redis address")
	fs.StringVar(&o.pgDSN, "pg-dsn", "postgres://postgres@127.0.0.1:5432/writeback?sslmode=disable", "PostgreSQL DSN")
	fs.StringVar(&o.mysqlDSN, "mysql-dsn", "root@tcp(127.0.0.1:3306)/writeback", "MySQL/MariaDB DSN")
	fs.StringVar(&o.mongoURI, "mongo-uri", "mongodb://127.0.0.1:27017/", "MongoDB URI")
	fs.StringVar(&o.mongoDatabase, "mongo-database", "ycsb", "MongoDB database")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; every option is a flag (see -h)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.quick {
		if !set["records"] {
			o.records = 5_000
		}
		if !set["duration"] {
			o.duration = 2 * time.Second
		}
		if !set["warmup"] {
			o.warmup = time.Second
		}
		if !set["sweep-workers"] {
			*sweep = "1,4,16"
		}
	}
	if o.sweepDuration <= 0 {
		o.sweepDuration = o.duration
	}
	// A MongoDB URI needs a "/" before its options, which the
	// asynchronous run adds (bench.AsyncDSN).
	if u, err := url.Parse(o.mongoURI); err == nil && u.Path == "" {
		u.Path = "/"
		o.mongoURI = u.String()
	}
	var err error
	if o.stores, err = parseList("--store", *stores, []string{ycsb.Postgres, ycsb.MySQL, ycsb.MongoDB}); err != nil {
		return nil, err
	}
	if o.workloads, err = parseList("--workloads", *workloads, workloadNames); err != nil {
		return nil, err
	}
	if o.sweepWorkloads, err = parseList("--sweep-workloads", *sweepWorkloads, workloadNames); err != nil {
		return nil, err
	}
	if o.policies, err = bench.ParsePolicies(*policies); err != nil {
		return nil, fmt.Errorf("--policies: %w", err)
	}
	if o.sweepWorkers, err = parseInts("--sweep-workers", *sweep); err != nil {
		return nil, err
	}
	switch {
	case o.threads < 1:
		return nil, fmt.Errorf("--threads %d: need at least one", o.threads)
	case o.records < int64(o.threads):
		return nil, fmt.Errorf("--records %d: need at least one per thread (%d)", o.records, o.threads)
	case o.duration <= 0 || o.warmup < 0:
		return nil, errors.New("--duration must be positive and --warmup not negative")
	case o.batchSize < 0:
		return nil, fmt.Errorf("--batch-size %d: use 0 (the default) or more", o.batchSize)
	case o.scanLength < 1 || o.scanLength > 1000:
		return nil, fmt.Errorf("--scan-length %d: use 1 to 1000", o.scanLength)
	case !o.compare && len(o.sweepWorkers) == 0:
		return nil, errors.New("--compare=false leaves nothing to run; give --sweep-workers too")
	}
	if err := o.spec().Validate(); err != nil {
		return nil, err
	}
	if _, err := ycsb.NewChooser(o.distribution, o.records); err != nil {
		return nil, fmt.Errorf("--distribution: %w", err)
	}
	return o, nil
}

// parseList parses a comma-separated list of names from known, in the
// order given, without repetitions.
func parseList(flagName, s string, known []string) ([]string, error) {
	var out []string
	for _, x := range strings.Split(s, ",") {
		x = strings.TrimSpace(x)
		if x == "" {
			continue
		}
		if !slices.Contains(known, x) {
			return nil, fmt.Errorf("%s: unknown %q; use some of %s", flagName, x, strings.Join(known, ","))
		}
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: none given; use some of %s", flagName, strings.Join(known, ","))
	}
	return out, nil
}

// parseInts parses a comma-separated list of positive integers; "" is none.
func parseInts(flagName, s string) ([]int, error) {
	var out []int
	for _, x := range strings.Split(s, ",") {
		x = strings.TrimSpace(x)
		if x == "" {
			continue
		}
		n, err := strconv.Atoi(x)
		if err != nil || n < 1 || n > 256 {
			return nil, fmt.Errorf("%s: %q is not a number from 1 to 256", flagName, x)
		}
		out = append(out, n)
	}
	return out, nil
}

func (o *options) spec() ycsb.Spec {
	return ycsb.Spec{Table: o.table, Records: o.records, Fields: o.fields, FieldSize: o.fieldSize}
}

// batch is the sidecar's writeback.batchSize on a store; 0 leaves the
// sidecar's default.
func (o *options) batch(store string) int {
	if o.batchSize == 0 && store == ycsb.MongoDB {
		return 16
	}
	return o.batchSize
}

// dsn is the DSN (MongoDB: URI) of a store.
func (o *options) dsn(store string) string {
	switch store {
	case ycsb.MySQL:
		return o.mysqlDSN
	case ycsb.MongoDB:
		return o.mongoURI
	}
	return o.pgDSN
}

// run is the command: it returns the exit code (0 success, 1 a failed or
// unverified run, 2 bad flags).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "ycsb:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return execute(ctx, o, stdout, stderr)
}

// execute runs the stores in turn and returns the exit code.
func execute(ctx context.Context, o *options, stdout, stderr io.Writer) int {
	started := time.Now()
	failed := false
	for _, store := range o.stores {
		rep, err := runStore(ctx, o, store, stderr)
		if rep != nil {
			werr := rep.write(o.out)
			rep.print(stdout)
			if werr != nil {
				fmt.Fprintln(stderr, "ycsb:", werr)
				failed = true
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "ycsb: %s: %v\n", store, err)
			failed = true
			break
		}
	}
	fmt.Fprintf(stderr, "ycsb: done in %s\n", time.Since(started).Round(time.Second))
	if failed {
		return 1
	}
	return 0
}
