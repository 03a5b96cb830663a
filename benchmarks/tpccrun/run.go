// Command tpcc runs TPC-C as sessions through a writeback sidecar (one queue
// per warehouse, as in the paper's section 4.3) beside the database alone,
// checks TPC-C's consistency conditions 1–4 after each run, and reports
// tpmC and per-transaction latencies as a table, JSON and PNG plots.
//
//	go run ./benchmarks/cmd/tpcc --quick
//	go run ./benchmarks/cmd/tpcc --warehouses 4 --terminals 10 --duration 60s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/tpcc"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

type options struct {
	store, dsn, redis, policies, out string
	cpuprofile                       string
	warehouses, terminals            int
	items, customers                 int
	duration, warmup                 time.Duration
	quick                            bool
	seed                             uint64
}

func run(args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("tpcc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.store, "store", "postgres", "the database: postgres (mysql is not supported yet)")
	fs.StringVar(&o.dsn, "dsn", "postgres://postgres@127.0.0.1:5432/tpcc?sslmode=disable", "the TPC-C database, created if missing; its nine tables are dropped and reloaded for every policy")
	fs.StringVar(&o.redis, "redis", "127.0.0.1:6379", "Redis address of the sidecar")
	fs.StringVar(&o.policies, "policies", strings.Join(tpcc.Policies, ","), "policies to compare: database, write-through, write-back")
	fs.IntVar(&o.warehouses, "warehouses", 2, "warehouses (W)")
	fs.IntVar(&o.terminals, "terminals", 10, "terminals per warehouse, without keying or think times")
	fs.IntVar(&o.items, "items", 100000, "items (the specification: 100000; fewer is a deviation for quick runs)")
	fs.IntVar(&o.customers, "customers", 3000, "customers per district, and initial orders per district (the specification: 3000)")
	fs.DurationVar(&o.duration, "duration", 60*time.Second, "measured time per policy")
	fs.DurationVar(&o.warmup, "warmup", 10*time.Second, "warm-up per policy, not measured")
	fs.StringVar(&o.out, "out", "benchmarks/results", "directory of the JSON results and PNG plots")
	fs.BoolVar(&o.quick, "quick", false, "a quick run (under 2 minutes): 2 warehouses, 5 terminals each, 10000 items, 300 customers, 2s warm-up, 10s measured, unless set explicitly")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed of the load and the terminals")
	fs.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole command (client, sidecar and appliers) to this file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		def := func(name string, apply func()) {
			if !set[name] {
				apply()
			}
		}
		def("terminals", func() { o.terminals = 5 })
		def("items", func() { o.items = 10000 })
		def("customers", func() { o.customers = 300 })
		def("duration", func() { o.duration = 10 * time.Second })
		def("warmup", func() { o.warmup = 2 * time.Second })
	}
	policies, err := parsePolicies(o.policies)
	if err == nil {
		err = o.validate()
	}
	if err != nil {
		fmt.Fprintln(stderr, "tpcc:", err)
		return 2
	}
	if o.cpuprofile != "" {
		f, err := os.Create(o.cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(stderr, "tpcc: --cpuprofile:", err)
			return 2
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := bench1(ctx, o, policies, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "tpcc:", err)
		return 1
	}
	return 0
}

func (o options) validate() error {
	switch {
	case o.store == "mysql":
		return errors.New("--store mysql is not supported yet; use --store postgres")
	case o.store != "postgres":
		return fmt.Errorf("--store %q is not a store; use postgres", o.store)
	case o.warehouses < 1 || o.terminals < 1:
		return errors.New("--warehouses and --terminals must be at least 1")
	case o.items < 100 || o.customers < 10:
		return errors.New("--items must be at least 100 and --customers at least 10")
	case o.duration <= 0 || o.warmup < 0:
		return errors.New("--duration must be positive and --warmup not negative")
	}
	return nil
}

func parsePolicies(s string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !slices.Contains(tpcc.Policies, p) {
			return nil, fmt.Errorf("unknown policy %q; use some of %s", p, strings.Join(tpcc.Policies, ","))
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no policy given; use some of %s", strings.Join(tpcc.Policies, ","))
	}
	slices.SortFunc(out, func(a, b string) int { return slices.Index(tpcc.Policies, a) - slices.Index(tpcc.Policies, b) })
	return out, nil
}

// report is the JSON file.
type report struct {
	Env         bench.Environment `json:"environment"`
	Warehouses  int               `json:"warehouses"`
	Terminals   int               `json:"terminals_per_warehouse"`
	Items       int               `json:"items"`
	Customers   int               `json:"customers_per_district"`
	Warmup      string            `json:"warmup"`
	Duration    string            `json:"duration"`
	Deviations  []string          `json:"deviations"`
	Policies    []tpcc.Outcome    `json:"policies"`
	Ratios      map[string]string `json:"ratios"`
	Consistency string            `json:"consistency"`
}

func bench1(ctx context.Context, o options, policies []string, stdout, stderr io.Writer) error {
	host, _ := os.Hostname()
	scale := tpcc.Scale{Warehouses: o.warehouses, Items: o.items, Customers: o.customers}
	rep := report{
		Env: bench.Environment{Started: time.Now().UTC(), Host: host, CPUs: runtime.NumCPU(), Go: runtime.Version(),
			Command: "tpcc " + strings.Join(os.Args[1:], " "), Quick: o.quick},
		Warehouses: o.warehouses, Terminals: o.terminals, Items: o.items, Customers: o.customers,
		Warmup: o.warmup.String(), Duration: o.duration.String(), Ratios: map[string]string{},
		Deviations: deviations(scale),
	}
	var failures []string
	for _, p := range policies {
		out, err := tpcc.Bench(ctx, tpcc.Options{Policy: p, DSN: o.dsn, RedisAddr: o.redis, Scale: scale, Terminals: o.terminals,
			Warmup: o.warmup, Duration: o.duration, Seed: o.seed, Log: stderr})
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		rep.Policies = append(rep.Policies, out)
		verdict := fmt.Sprintf("conditions 1-4 and the committed work hold (%d orders, %d payments)", out.Work.NewOrders, out.Work.Payments)
		if err := out.Check.Err(); err != nil {
			verdict = err.Error()
			failures = append(failures, p+": "+err.Error())
		}
		fmt.Fprintf(stderr, "[tpcc %s] %.0f tpmC; flush %d sessions in %.2fs; %s\n", p, out.TpmC, out.Flushed, out.FlushSeconds, verdict)
	}
	printTables(stdout, rep.Policies)
	tpm := map[string]float64{}
	for _, r := range rep.Policies {
		tpm[r.Policy] = r.TpmC
	}
	for _, pair := range [][2]string{{bench.WriteBack, bench.Database}, {bench.WriteBack, bench.WriteThrough}, {bench.WriteThrough, bench.Database}} {
		a, okA := tpm[pair[0]]
		b, okB := tpm[pair[1]]
		if okA && okB {
			k := pair[0] + " / " + pair[1]
			rep.Ratios[k] = bench.Ratio(a, b)
			fmt.Fprintf(stdout, "%-28s tpmC %s\n", k, rep.Ratios[k])
		}
	}
	rep.Consistency = "conditions 1-4 and the committed work hold for every policy"
	if len(failures) > 0 {
		rep.Consistency = strings.Join(failures, "; ")
	}
	fmt.Fprintln(stdout, "consistency:", rep.Consistency)
	path := filepath.Join(o.out, "tpcc-"+o.store+".json")
	if err := bench.WriteJSON(path, rep); err != nil {
		return err
	}
	plots, err := plot(o, rep.Policies)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s %s\n", path, strings.Join(plots, " "))
	if len(failures) > 0 {
		return fmt.Errorf("consistency check failed: %s", strings.Join(failures, "; "))
	}
	return nil
}

// deviations lists where the run departs from the specification.
func deviations(s tpcc.Scale) []string {
	d := []string{
		"no keying or think times: every terminal submits its next transaction as soon as the last one finished",
		"Delivery runs at once in the terminal, not deferred through a queue",
		"no terminal I/O: outputs are computed and discarded",
		"the order table is named oorder (ORDER is reserved in SQL)",
	}
	if s.Items != 100000 || s.Customers != 3000 {
		d = append(d, fmt.Sprintf("scaled down: %d items (spec 100000), %d customers and initial orders per district (spec 3000; the last 30%% undelivered), "+
			"last names drawn from the first %d of the 1000", s.Items, s.Customers, min(1000, s.Customers)))
	}
	return d
}

func printTables(w io.Writer, rs []tpcc.Outcome) {
	var t bench.Table
	t.Header = []string{"policy", "tpmC", "tx/s", "retries", "rollbacks", "load", "flush", "pinned max", "consistency"}
	for _, r := range rs {
		var retries, rollbacks int64
		for _, s := range r.Kinds {
			retries += s.Retries
			rollbacks += s.Rollbacks
		}
		pinned := "-"
		if r.Policy != bench.Database {
			m := 0.0
			for _, s := range r.Pinned {
				m = max(m, s.V)
			}
			pinned = fmt.Sprintf("%.1fKiB", m/1024)
		}
		flush := "-"
		if r.Policy != bench.Database {
			flush = fmt.Sprintf("%.2fs", r.FlushSeconds)
		}
		verdict := "ok (1-4, work)"
		if !r.Check.OK() {
			verdict = fmt.Sprintf("FAILED (%d)", len(r.Check.Violations))
		}
		t.Add(r.Policy, r.TpmC, r.TxPerSec, retries, rollbacks, fmt.Sprintf("%.1fs", r.LoadSeconds), flush, pinned, verdict)
	}
	fmt.Fprintln(w, t.String())
	var l bench.Table
	l.Header = []string{"policy", "transaction", "count", "p50 ms", "p90 ms", "p99 ms", "retries"}
	for _, r := range rs {
		for _, k := range tpcc.Kinds {
			s := r.Kinds[k.String()]
			l.Add(r.Policy, k.String(), s.Committed+s.Rollbacks, s.Latency.P50, s.Latency.P90, s.Latency.P99, s.Retries)
		}
	}
	fmt.Fprintln(w, l.String())
}

func plot(o options, rs []tpcc.Outcome) ([]string, error) {
	prefix := filepath.Join(o.out, "tpcc-"+o.store)
	var paths []string
	var tpm []bench.Series
	for _, r := range rs {
		tpm = append(tpm, bench.Series{Name: r.Policy, Y: []float64{r.TpmC}})
	}
	title := fmt.Sprintf("TPC-C, %d warehouses × %d terminals, %s measured", o.warehouses, o.terminals, o.duration)
	p := prefix + "-tpmc.png"
	if err := bench.Bars(p, bench.Figure{Title: title, YLabel: "tpmC (New-Orders per minute)"}, []string{"tpmC"}, tpm); err != nil {
		return nil, err
	}
	paths = append(paths, p)
	var groups []string
	for _, k := range tpcc.Kinds {
		groups = append(groups, k.String())
	}
	var p90 []bench.Series
	for _, r := range rs {
		s := bench.Series{Name: r.Policy}
		for _, k := range tpcc.Kinds {
			s.Y = append(s.Y, r.Kinds[k.String()].Latency.P90)
		}
		p90 = append(p90, s)
	}
	p = prefix + "-p90.png"
	if err := bench.Bars(p, bench.Figure{Title: title, YLabel: "p90 latency (ms)"}, groups, p90); err != nil {
		return nil, err
	}
	paths = append(paths, p)
	var mem []bench.Series
	for _, r := range rs {
		if r.Policy == bench.Database || len(r.Pinned) == 0 {
			continue
		}
		s := bench.Series{Name: r.Policy}
		for _, v := range r.Pinned {
			s.X, s.Y = append(s.X, v.T), append(s.Y, v.V/1024)
		}
		mem = append(mem, s)
	}
	if len(mem) > 0 {
		p = prefix + "-pinned.png"
		f := bench.Figure{Title: "TPC-C: pinned session memory (paper Fig. 7c); warm-up before 0 s", XLabel: "time (s)", YLabel: "pinned memory (KiB)", YFromZero: true}
		if err := bench.Lines(p, f, mem); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}
