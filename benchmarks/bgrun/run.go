// Command bg runs the BG social networking benchmark (package bg) on
// MongoDB and PostgreSQL under every policy: the database alone, with its
// asynchronous commit, and through a sidecar with write-around,
// write-through and write-back. For each store, policy and mix of the
// paper's Table 4 it ramps threads to find the SoAR (the highest throughput
// with 95 % of actions within 100 ms), validates every read against the
// acknowledged writes and, after draining the sidecar, the store's final
// state. It prints a table and the SoAR ratios, writes JSON and PNG plots,
// and exits 1 if any read was stale or the store lost a write.
//
//	go run ./benchmarks/cmd/bg [--quick] [--store mongodb,postgres] [--policies all] …
//
// Run `make services` first. See benchmarks/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/bg"
	"github.com/writeback/writeback/internal/config"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	stores       []string
	policies     []string
	mixes        []bg.Mix
	graph        bg.Graph
	mongoMembers int
	threads      []int
	step         time.Duration
	slaMs        float64
	slaPct       float64
	out          string
	quick        bool
	seed         uint64
	redis        string
	pgDSN        string
	mongoURI     string
	samples      int
	cpuprof      string
	workers      int
	batchSize    int
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("bg", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stores := fs.String("store", "mongodb,postgres", "stores to run on, in order: mongodb, postgres")
	policies := fs.String("policies", "all", "policies to compare: all, or some of "+strings.Join(bench.Policies, ","))
	mixes := fs.String("mixes", "90,99,99.9", "mixes of the paper's Table 4, by their percentage of reads")
	fs.IntVar(&o.graph.Members, "members", 10000, "members of the social graph")
	fs.IntVar(&o.mongoMembers, "mongo-members", 0, "members on MongoDB (default: --members; --quick: 200): FerretDB's SQLite backend scans the collection for every lookup by a string _id, so its cost grows with the members")
	fs.IntVar(&o.graph.Friends, "friends", 100, "friends per member in the initial graph (even)")
	fs.IntVar(&o.graph.Pending, "pending", -1, "pending invitations per member in the initial graph (default: as many as friends)")
	threads := fs.String("threads", "1,2,4,8,16,32,64", "the ramp: thread counts, increasing")
	fs.DurationVar(&o.step, "step", 10*time.Second, "measured time per ramp step")
	fs.Float64Var(&o.slaMs, "sla-ms", 100, "SLA: the latency (ms) ...")
	fs.Float64Var(&o.slaPct, "sla-pct", 95, "... that this percentage of actions must not exceed")
	fs.StringVar(&o.out, "out", "benchmarks/results", "directory of the JSON results and PNG plots")
	fs.BoolVar(&o.quick, "quick", false, "a short run of everything: 2000 members (MongoDB 200) × 10 friends, ramp 1,4,16, 1.5s per step (flags given override)")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the graph's profiles and of the actions")
	fs.StringVar(&o.redis, "redis", "127.0.0.1:6379", "Redis address for the sidecar")
	fs.StringVar(&o.pgDSN, "pg-dsn", "postgres://postgres@127.0.0.1:5432/writeback?sslmode=disable", "PostgreSQL DSN")
	fs.StringVar(&o.mongoURI, "mongo-uri", "mongodb://127.0.0.1:27017", "MongoDB URI")
	fs.IntVar(&o.samples, "samples", 10, "stale reads and final differences to print")
	fs.IntVar(&o.workers, "workers", 0, "applier goroutines of the sidecar (default: the sidecar's)")
	fs.IntVar(&o.batchSize, "batch-size", 0, "documents per applied batch (default: the sidecar's 128; on MongoDB 16, since FerretDB outlives the appliers' 30 s batch timeout with 128)")
	fs.StringVar(&o.cpuprof, "cpuprofile", "", "write a CPU profile of the whole run (benchmark, sidecar and clients: one process) to this file")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; bg takes flags only", fs.Arg(0))
	}
	if o.quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["members"] {
			o.graph.Members = 2000
		}
		if !set["mongo-members"] && !set["members"] {
			o.mongoMembers = 200
		}
		if !set["friends"] {
			o.graph.Friends = 10
		}
		if !set["threads"] {
			*threads = "1,4,16"
		}
		if !set["step"] {
			o.step = 1500 * time.Millisecond
		}
	}
	if o.graph.Pending < 0 {
		o.graph.Pending = o.graph.Friends
	}
	if o.mongoMembers == 0 {
		o.mongoMembers = o.graph.Members
	}
	if err := o.graph.Validate(); err != nil {
		return nil, err
	}
	if err := o.graphOf("mongodb").Validate(); err != nil {
		return nil, err
	}
	var err error
	for _, s := range strings.Split(*stores, ",") {
		switch s = strings.TrimSpace(s); s {
		case "mongodb", "postgres":
			o.stores = append(o.stores, s)
		case "":
		default:
			return nil, fmt.Errorf("unknown store %q; use mongodb, postgres or both", s)
		}
	}
	if len(o.stores) == 0 {
		return nil, errors.New("no store given; use --store mongodb,postgres")
	}
	if o.policies, err = bench.ParsePolicies(*policies); err != nil {
		return nil, err
	}
	if o.mixes, err = bg.ParseMixes(*mixes); err != nil {
		return nil, err
	}
	if o.threads, err = bg.ParseThreads(*threads); err != nil {
		return nil, err
	}
	switch {
	case o.step < 100*time.Millisecond:
		return nil, fmt.Errorf("--step %v is too short to measure; use at least 100ms", o.step)
	case o.slaMs <= 0:
		return nil, errors.New("--sla-ms must be positive")
	case o.slaPct <= 0 || o.slaPct > 100:
		return nil, errors.New("--sla-pct must be in (0, 100]")
	}
	return o, nil
}

// graphOf is the graph a store runs with.
func (o *options) graphOf(store string) bg.Graph {
	g := o.graph
	if store == "mongodb" {
		g.Members = o.mongoMembers
	}
	return g
}

// batchSizeOf is the sidecar's batch size on a store; 0: its default.
func (o *options) batchSizeOf(store string) int {
	if o.batchSize == 0 && store == "mongodb" {
		return 16
	}
	return o.batchSize
}

// storeRun is one store's results.
type storeRun struct {
	Store         string            `json:"store"`
	Environment   bench.Environment `json:"environment"`
	Settings      settings          `json:"settings"`
	Results       []*bg.Result      `json:"results"`
	NotApplicable []notApplicable   `json:"not_applicable,omitempty"`
	Ratios        map[string]ratios `json:"soar_ratios"` // per mix
	Errors        map[string]string `json:"errors,omitempty"`
	failed        []string          // what failed, for the exit code
	byPolicy      map[string]*bg.Result
}

type settings struct {
	Members  int      `json:"members"`
	Friends  int      `json:"friends"`
	Pending  int      `json:"pending"`
	Mixes    []string `json:"mixes"`
	Threads  []int    `json:"threads"`
	StepS    float64  `json:"step_s"`
	SLAMs    float64  `json:"sla_ms"`
	SLAPct   float64  `json:"sla_pct"`
	Seed     uint64   `json:"seed"`
	Policies []string `json:"policies"`
	// The sidecar's appliers, where not its defaults (0).
	Workers   int `json:"sidecar_workers,omitempty"`
	BatchSize int `json:"sidecar_batch_size,omitempty"`
}

type notApplicable struct {
	Policy string `json:"policy"`
	Reason string `json:"reason"`
}

// ratios are write-back's SoAR over the others' ("" when one is missing).
type ratios struct {
	Database      float64 `json:"vs_database,omitempty"`
	WriteThrough  float64 `json:"vs_write_through,omitempty"`
	DatabaseAsync float64 `json:"vs_database_async,omitempty"`
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "bg:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
	started := time.Now()
	host, _ := os.Hostname()
	mixNames := make([]string, len(o.mixes))
	for i, m := range o.mixes {
		mixNames[i] = m.Name
	}
	logf("bg: %d members (MongoDB: %d) × %d friends + %d pending; mixes %s %% reads; ramp %v, %v per step; SLA %g%% ≤ %gms; %d CPUs",
		o.graph.Members, o.mongoMembers, o.graph.Friends, o.graph.Pending, strings.Join(mixNames, ", "), o.threads, o.step, o.slaPct, o.slaMs, runtime.NumCPU())

	if o.cpuprof != "" {
		f, err := os.Create(o.cpuprof)
		if err != nil {
			fmt.Fprintln(stderr, "bg:", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, "bg:", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	var runs []*storeRun
	exit := 0
	for _, name := range o.stores {
		sr := &storeRun{
			Store: name,
			Environment: bench.Environment{Started: time.Now().UTC(), Host: host, CPUs: runtime.NumCPU(), Go: runtime.Version(),
				Command: "go run ./benchmarks/cmd/bg " + strings.Join(args, " "), Quick: o.quick},
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
	wb := sr.byPolicy[bench.WriteBack]
	for k, m := range o.mixes {
		if wb == nil || k >= len(wb.Mixes) {
			continue
		}
		soar := func(p string) float64 {
			r := sr.byPolicy[p]
			if r == nil || k >= len(r.Mixes) || r.Mixes[k].SoAR == 0 {
				return 0
			}
			return wb.Mixes[k].SoAR / r.Mixes[k].SoAR
		}
		sr.Ratios[m.Name] = ratios{Database: soar(bench.Database), WriteThrough: soar(bench.WriteThrough), DatabaseAsync: soar(bench.DatabaseAsync)}
	}
	return nil
}
