package ycsbrun

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/ycsb"
	"github.com/writeback/writeback/internal/config"
)

// options are the command's flags, validated.
type options struct {
	stores         []string
	workloads      []string
	policies       []string
	records        int64
	fields         int
	fieldSize      int
	threads        []int // client counts, each a set of runs
	duration       time.Duration
	warmup         time.Duration
	distributions  []string        // of the keys, each a set of runs
	caches         []string        // cold and/or warm: the sidecar's cache when a run starts
	latencies      []time.Duration // added each way between the benchmark and the store; 0 = direct
	updateAll      bool
	scanLength     int
	out            string
	quick          bool
	seed           uint64
	compare        bool
	sweepWorkers   []int
	sweepWorkloads []string
	sweepDuration  time.Duration
	batchSize      int           // writeback.batchSize; 0: the sidecar's default, 16 on MongoDB
	holdAppliers   bool          // the sidecars' appliers apply nothing until each run's flush
	applyDelay     time.Duration // the sidecars' writeback.applyDelay; negative: the default
	pollInterval   time.Duration // the sidecars' writeback.pollInterval; 0: the default
	nearCache      bool          // the sidecars run with writeback.nearCache on
	share          bool          // the sidecars run with redis.shareRoundTrips on
	nearLease      time.Duration // their collection's nearCache.leaseTTL; 0: the default
	nearHot        time.Duration // their collection's nearCache.hotWindow; negative: the default
	table          string
	redis          string
	pgDSN          string
	mysqlDSN       string
	mongoURI       string
	mongoDatabase  string
	args           []string
	cpuprof        string              // a CPU profile of the whole run
	memprof        string              // an allocation profile of the whole run
	trace          string              // execution traces of the runs' measured windows
	respSocket     bool                // write-back-resp's front door on a Unix socket
	rounds         int                 // the comparison runs once per round, the rounds one after another
	require        []bench.Requirement // ratios the comparison must reach, or the command fails

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
	threads := fs.String("threads", "8", "concurrent clients, each issuing one operation at a time; a comma-separated list (e.g. 8,16) runs each")
	fs.StringVar(&o.cpuprof, "cpuprofile", "", "write a CPU profile of the whole run (benchmark, sidecar, embedded member and clients: one process) to this file")
	fs.BoolVar(&o.respSocket, "resp-socket", false, "write-back-resp's clients reach the sidecar's Redis-protocol front door through a Unix socket (listenResp: unix:<path>), as an application on the sidecar's node can, instead of loopback TCP")
	fs.StringVar(&o.memprof, "memprofile", "", "write an allocation profile of the whole run (as --cpuprofile: one process) to this file when it ends")
	fs.StringVar(&o.trace, "trace", "", "write an execution trace of each run's measured window (one process, as --cpuprofile) to this file, the run named before its extension (trace.out: trace-ycsb-A-write-back-resp-….out; large: use a short --duration)")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "measured time per run")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured warm-up of each run, after its cache warming and before the measured time")
	dists := fs.String("distribution", "uniform,zipfian", "record popularity, comma-separated: uniform (the paper's) and/or zipfian (YCSB's default: scrambled zipfian, constant 0.99)")
	caches := fs.String("cache", "cold,warm", "the sidecar's cache when a run starts, comma-separated: cold (its entries dropped, no warm-up: measured from the first miss) and/or warm (every record read first); the database alone runs once either way")
	latencies := fs.String("store-latency", "0", "delay added each way between the benchmark (clients and sidecar) and the store by an in-process toxiproxy, whole milliseconds, comma-separated (e.g. 0,1ms runs both); 0: direct; Redis stays local")
	fs.BoolVar(&o.updateAll, "update-all", false, "an update sets every field of the record, as in the paper (default: one random field, as YCSB's core workload)")
	fs.IntVar(&o.scanLength, "scan-length", 5, "records per scan of workload S")
	fs.StringVar(&o.out, "out", "benchmarks/results", "directory of the JSON results and PNG plots")
	fs.BoolVar(&o.quick, "quick", false, "small and short: 5000 records, 0.5s warm-up, 2s runs, sweep 1,4,16 (flags given explicitly win)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the loaded values and of the workloads")
	fs.BoolVar(&o.compare, "compare", true, "run the policy comparison (false: only the sweep)")
	fs.IntVar(&o.rounds, "rounds", 1, "runs of the comparison, in turn: round 1 runs every policy once (each on a fresh table and sidecar), then round 2 … ; "+
		"the ratios are the median of the rounds' ratios, each taken within one round, so that a machine whose speed drifts over minutes is judged by runs side by side")
	require := fs.String("require", "", "comma-separated policy/policy>=ratio clauses (write-back-resp/database>=1.5): the command fails unless, on every workload and variant "+
		"both policies ran, the median over the rounds of their throughput ratio reaches its minimum; a clause prefixed with a workload (C:write-back-resp/database>=1.5) is judged on that workload only; "+
		"a clause may judge a latency's ratio instead, from above or below: update-p50(write-back-resp/database)<=0.25 (read-p50, read-p99, update-p50, update-p99)")
	sweep := fs.String("sweep-workers", "", "applier sweep (paper's Figure 5): write-back runs with each of these writeback.workers values, e.g. 1,2,4,8,16 (empty: no sweep)")
	sweepWorkloads := fs.String("sweep-workloads", "A,B,S", "workloads of the applier sweep")
	fs.DurationVar(&o.sweepDuration, "sweep-duration", 0, "measured time per sweep run (0: --duration)")
	fs.IntVar(&o.batchSize, "batch-size", 0, "sidecar writeback.batchSize, documents per store transaction (0: the sidecar's default, 128; 16 on mongodb, where FerretDB takes 0.1-0.3 s per document and a batch of 128 outlives the appliers' 30 s batch timeout)")
	fs.BoolVar(&o.holdAppliers, "hold-appliers", false, "the sidecars' appliers apply nothing while a run lasts (writeback.pollInterval "+heldPoll.String()+"): write-back as if applying cost nothing, the bound of any applier; each run's flush applies its writes afterwards and the verification checks them")
	fs.DurationVar(&o.applyDelay, "apply-delay", -1, "the sidecars' writeback.applyDelay: how long a document stays pending before their appliers take it (negative: the default)")
	fs.DurationVar(&o.pollInterval, "poll-interval", 0, "the sidecars' writeback.pollInterval: how often their appliers look for work, hence how many writes a batch gathers (0: the default)")
	fs.BoolVar(&o.nearCache, "near-cache", true, "the sidecars (write-* policies) run with their near cache on (writeback.nearCache, on by default; the collection's nearCache defaults); --near-cache=false turns it off")
	fs.BoolVar(&o.share, "share-round-trips", true, "the sidecars' redis.shareRoundTrips: concurrent requests share Redis round trips (false: each goes alone, to compare)")
	fs.DurationVar(&o.nearLease, "near-lease", 0, "with --near-cache: the collection's nearCache.leaseTTL (0: the default, 2s)")
	fs.DurationVar(&o.nearHot, "near-hot", -1, "with --near-cache: the collection's nearCache.hotWindow (negative: the default, 2s)")
	fs.StringVar(&o.table, "table", "ycsb_usertable", "table (MongoDB: collection) the runs load; also the sidecar's collection")
	fs.StringVar(&o.redis, "redis", "127.0.0.1:6379", "Redis address")
	fs.StringVar(&o.pgDSN, "pg-dsn", "postgres://postgres@127.0.0.1:5432/writeback?sslmode=disable", "PostgreSQL DSN")
	fs.StringVar(&o.mysqlDSN, "mysql-dsn", "root@tcp(127.0.0.1:3306)/writeback", "MySQL/MariaDB DSN")
	fs.StringVar(&o.mongoURI, "mongo-uri", "mongodb://127.0.0.1:27017/", "MongoDB URI")
	fs.StringVar(&o.mongoDatabase, "mongo-database", "ycsb", "MongoDB database")
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	if o.quick {
		quick := map[string]string{"records": "5000", "duration": "2s", "warmup": "500ms", "sweep-workers": "1,4,16"}
		if err := bench.QuickDefaults(fs, quick); err != nil {
			return nil, err
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
	if o.stores, err = bench.ParseList("--store", *stores, []string{ycsb.Postgres, ycsb.MySQL, ycsb.MongoDB}); err != nil {
		return nil, err
	}
	if o.workloads, err = bench.ParseList("--workloads", *workloads, workloadNames); err != nil {
		return nil, err
	}
	if o.sweepWorkloads, err = bench.ParseList("--sweep-workloads", *sweepWorkloads, workloadNames); err != nil {
		return nil, err
	}
	if o.policies, err = bench.ParsePolicies(*policies); err != nil {
		return nil, fmt.Errorf("--policies: %w", err)
	}
	if o.distributions, err = bench.ParseList("--distribution", *dists, ycsb.Distributions); err != nil {
		return nil, err
	}
	if o.caches, err = bench.ParseList("--cache", *caches, cacheStates); err != nil {
		return nil, err
	}
	if o.latencies, err = parseLatencies(*latencies); err != nil {
		return nil, err
	}
	if o.threads, err = bench.ParseInts("--threads", *threads, 1024); err != nil {
		return nil, err
	}
	if len(o.threads) == 0 {
		return nil, errors.New("--threads: none given; use a number of clients, e.g. 8 or 8,16")
	}
	if o.sweepWorkers, err = bench.ParseInts("--sweep-workers", *sweep, 256); err != nil {
		return nil, err
	}
	if o.require, err = bench.ParseRequire(*require, o.policies, o.workloads, slices.Sorted(maps.Keys(requireMetrics))); err != nil {
		return nil, err
	}
	switch {
	case o.records < int64(slices.Max(o.threads)):
		return nil, fmt.Errorf("--records %d: need at least one per thread (%d)", o.records, slices.Max(o.threads))
	case o.duration <= 0 || o.warmup < 0:
		return nil, errors.New("--duration must be positive and --warmup not negative")
	case o.batchSize < 0:
		return nil, fmt.Errorf("--batch-size %d: use 0 (the default) or more", o.batchSize)
	case o.scanLength < 1 || o.scanLength > 1000:
		return nil, fmt.Errorf("--scan-length %d: use 1 to 1000", o.scanLength)
	case o.rounds < 1:
		return nil, fmt.Errorf("--rounds %d: use 1 or more", o.rounds)
	case len(o.require) > 0 && !o.compare:
		return nil, errors.New("--require judges the comparison, which --compare=false turns off")
	case o.holdAppliers && o.pollInterval != 0:
		return nil, errors.New("--hold-appliers sets the appliers' poll itself; leave out --poll-interval")
	case o.pollInterval < 0:
		return nil, fmt.Errorf("--poll-interval %v: give a positive interval (0: the default)", o.pollInterval)
	case o.holdAppliers && len(o.sweepWorkers) > 0:
		return nil, errors.New("--hold-appliers leaves the applier sweep nothing to compare; give --sweep-workers '' (--quick sweeps 1,4,16)")
	case !o.compare && len(o.sweepWorkers) == 0:
		return nil, errors.New("--compare=false leaves nothing to run; give --sweep-workers too")
	}
	if err := o.spec().Validate(); err != nil {
		return nil, err
	}
	return o, nil
}

// Cache states of a run: the sidecar's cache dropped (cold) or filled by a
// read pass (warm); none for the database alone, which has no cache.
const (
	cacheCold = "cold"
	cacheWarm = "warm"
	cacheNone = "none"
)

var cacheStates = []string{cacheCold, cacheWarm}

// heldPoll is the sidecars' writeback.pollInterval with --hold-appliers:
// longer than a sidecar serves its runs, so that its appliers never poll.
const heldPoll = 24 * time.Hour

// parseLatencies parses --store-latency: durations ("1ms") or 0, each a
// whole number of milliseconds, in the order given.
func parseLatencies(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, x := range strings.Split(s, ",") {
		x = strings.TrimSpace(x)
		if x == "" {
			continue
		}
		d, err := time.ParseDuration(x)
		if err != nil {
			return nil, fmt.Errorf("--store-latency: %q is not a duration; write e.g. 0 or 1ms", x)
		}
		if err := bench.ValidateLatency(d); err != nil {
			return nil, fmt.Errorf("--store-latency: %w", err)
		}
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("--store-latency: none given; use 0 (direct) or a delay such as 1ms")
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

// delay is the sidecars' writeback.applyDelay.
func (o *options) delay() time.Duration {
	if o.applyDelay < 0 {
		return config.Default().Writeback.ApplyDelay.Duration
	}
	return o.applyDelay
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
