package demorun

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/ycsb"
	"github.com/writeback/writeback/internal/config"
)

// The runs, in the order they run: the database alone, then a sidecar with
// each collection policy.
var allPolicies = []string{bench.Database, bench.WriteAround, bench.WriteThrough, bench.WriteBack}

// options are the command's flags, validated.
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
	chooser      ycsb.Chooser // of --distribution
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
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	if o.quick {
		if err := bench.QuickDefaults(fs, map[string]string{"records": "10000", "duration": "3s", "warmup": "1s"}); err != nil {
			return nil, err
		}
	}
	for _, p := range strings.Split(*policies, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(allPolicies, p) {
			return nil, fmt.Errorf("--policies: unknown run %q; use %s", p, strings.Join(allPolicies, ", "))
		}
		if slices.Contains(o.policies, p) {
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
	if err := o.spec().Validate(); err != nil {
		return nil, err
	}
	var err error
	if o.chooser, err = ycsb.NewChooser(o.distribution, o.records); err != nil {
		return nil, err
	}
	return o, nil
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
