package tpccrun

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/tpcc"
	"github.com/writeback/writeback/internal/config"
)

// options are the command's flags, validated.
type options struct {
	store, dsn, redis, out string
	policies               []string // in the order of tpcc.Policies
	cpuprofile             string
	warehouses, terminals  int
	rounds                 int                 // every policy runs once per round, the rounds one after another
	require                []bench.Requirement // ratios the run must reach, or it fails
	items, customers       int
	duration, warmup       time.Duration
	latency                time.Duration // added each way by a latency proxy; 0: none
	quick, cold            bool
	seed                   uint64
	share                  bool            // the sidecar's redis.shareRoundTrips
	immutable              config.ByteSize // the sidecar's writeback.immutableCache
	args                   []string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{args: args}
	fs := flag.NewFlagSet("tpcc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.store, "store", tpcc.Postgres, "the database: postgres or mysql (MariaDB)")
	fs.StringVar(&o.dsn, "dsn", "", "the TPC-C database, created if missing; its nine tables are dropped and reloaded for every policy (default "+
		defaultDSN[tpcc.Postgres]+" for postgres, "+defaultDSN[tpcc.MySQL]+" for mysql)")
	fs.DurationVar(&o.latency, "store-latency", 0, "delay added each way between the benchmark (the database alone's transactions, the sidecar's commits, misses and appliers) "+
		"and the store by an in-process toxiproxy, whole milliseconds (e.g. 1ms); 0: direct. The load and the checks go direct; Redis stays local")
	fs.StringVar(&o.redis, "redis", "127.0.0.1:6379", "Redis address of the sidecar")
	policies := fs.String("policies", strings.Join(tpcc.Policies, ","), "policies to compare: database, write-through, write-back (sessions over HTTP), write-back-embedded (write-back sessions in-process through pkg/writeback, the sidecar running the appliers)")
	require := fs.String("require", "", "comma-separated policy/policy>=ratio clauses (write-back/database>=1.5): the run fails unless the median over the rounds of each "+
		"pair's tpmC ratio reaches its minimum")
	fs.IntVar(&o.warehouses, "warehouses", 2, "warehouses (W)")
	fs.IntVar(&o.terminals, "terminals", 10, "terminals per warehouse, without keying or think times")
	fs.IntVar(&o.items, "items", 100000, "items (the specification: 100000; fewer is a deviation for quick runs)")
	fs.IntVar(&o.customers, "customers", 3000, "customers per district, and initial orders per district (the specification: 3000)")
	fs.DurationVar(&o.duration, "duration", 60*time.Second, "measured time per policy")
	fs.IntVar(&o.rounds, "rounds", 1, "runs of every policy, in turn: round 1 runs each policy once, then round 2 … ; the ratios are the median of the rounds' ratios, "+
		"each taken within one round, so that a machine whose speed drifts over minutes is judged by runs side by side")
	fs.DurationVar(&o.warmup, "warmup", 10*time.Second, "warm-up per policy, not measured")
	fs.StringVar(&o.out, "out", "benchmarks/results", "directory of the JSON results and PNG plots")
	fs.BoolVar(&o.quick, "quick", false, "a quick run (under 2 minutes): 2 warehouses, 5 terminals each, 10000 items, 300 customers, 2s warm-up, 10s measured, unless set explicitly")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed of the load and the terminals")
	cache := fs.String("cache", "warm", "the sidecar's cache when a run starts: warm (every warehouse, district, customer, customers-by-last-name, item and stock entry, each customer's last order and the lines of those orders and of the undelivered ones read first, as the load leaves the database's buffer pool warm) or cold (empty)")
	fs.BoolVar(&o.share, "share-round-trips", true, "the sidecar's redis.shareRoundTrips: concurrent requests share Redis round trips (false: each goes alone, to compare)")
	o.immutable = config.Default().Writeback.ImmutableCache
	fs.TextVar(&o.immutable, "immutable-cache", o.immutable, "the sidecar's writeback.immutableCache, and the write-back policy's HTTP client's client.WithImmutableCache: bytes of the immutable mappings' entries kept in process (0: none, to compare)")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of each policy's measured run (this process: the terminals and, in-process, the sidecar and its appliers) to this file, with the policy before its extension (cpu.pprof: cpu-write-back.pprof) and, from --rounds' second round on, the round (cpu-write-back-2.pprof)")
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	if o.quick {
		quick := map[string]string{"terminals": "5", "items": "10000", "customers": "300", "duration": "10s", "warmup": "2s"}
		if err := bench.QuickDefaults(fs, quick); err != nil {
			return nil, err
		}
	}
	switch *cache {
	case "warm":
	case "cold":
		o.cold = true
	default:
		return nil, fmt.Errorf("--cache %q is not warm or cold", *cache)
	}
	var err error
	if o.policies, err = bench.ParseList("--policies", *policies, tpcc.Policies); err != nil {
		return nil, err
	}
	slices.SortFunc(o.policies, func(a, b string) int { return slices.Index(tpcc.Policies, a) - slices.Index(tpcc.Policies, b) })
	if o.require, err = bench.ParseRequire(*require, o.policies, nil, nil); err != nil {
		return nil, err
	}
	return o, o.validate()
}

// defaultDSN is --dsn's default per store.
var defaultDSN = map[string]string{
	tpcc.Postgres: "postgres://postgres@127.0.0.1:5432/tpcc?sslmode=disable",
	tpcc.MySQL:    "root@tcp(127.0.0.1:3306)/tpcc",
}

func (o *options) validate() error {
	if o.dsn == "" {
		o.dsn = defaultDSN[o.store]
	}
	switch {
	case !slices.Contains(tpcc.Stores, o.store):
		return fmt.Errorf("--store %q is not a store; use postgres or mysql", o.store)
	case bench.ValidateLatency(o.latency) != nil:
		return fmt.Errorf("--store-latency: %w", bench.ValidateLatency(o.latency))
	case o.warehouses < 1 || o.terminals < 1:
		return errors.New("--warehouses and --terminals must be at least 1")
	case o.rounds < 1:
		return errors.New("--rounds must be at least 1")
	case o.items < 100 || o.customers < 10:
		return errors.New("--items must be at least 100 and --customers at least 10")
	case o.duration <= 0 || o.warmup < 0:
		return errors.New("--duration must be positive and --warmup not negative")
	}
	return nil
}
