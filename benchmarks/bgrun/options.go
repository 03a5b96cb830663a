package bgrun

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/bg"
)

// options are the command's flags, validated.
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
	nearHot      time.Duration // the collection's nearCache.hotWindow; negative: the default
	nearLease    time.Duration // the collection's nearCache.leaseTTL; 0: the default
	batchSize    int
	args         []string
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{args: args}
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
	fs.DurationVar(&o.nearLease, "near-lease", 0, "the collection's nearCache.leaseTTL for the write-back policies (0: the default, 2s)")
	fs.DurationVar(&o.nearHot, "near-hot", -1, "the collection's nearCache.hotWindow for the write-back policies (negative: the default, 2s; 0: every document leased)")
	fs.IntVar(&o.batchSize, "batch-size", 0, "documents per applied batch (default: the sidecar's 128; on MongoDB 16, since FerretDB outlives the appliers' 30 s batch timeout with 128)")
	fs.StringVar(&o.cpuprof, "cpuprofile", "", "write a CPU profile of the whole run (benchmark, sidecar and clients: one process) to this file")
	if err := bench.Parse(fs, args); err != nil {
		return nil, err
	}
	if o.quick {
		quick := map[string]string{"members": "2000", "friends": "10", "threads": "1,4,16", "step": "1.5s"}
		if !bench.Given(fs)["members"] {
			// With --members given, MongoDB gets as many (unless
			// --mongo-members), not --quick's 200.
			quick["mongo-members"] = "200"
		}
		if err := bench.QuickDefaults(fs, quick); err != nil {
			return nil, err
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
	if o.stores, err = bench.ParseList("--store", *stores, []string{"mongodb", "postgres"}); err != nil {
		return nil, err
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
