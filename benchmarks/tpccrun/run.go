package tpccrun

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/tpcc"
	"github.com/writeback/writeback/internal/config"
)

// Main is the tpcc command: it parses args as its flags and runs TPC-C
// under each policy in turn, each on a freshly loaded database, checks
// TPC-C's consistency conditions 1–5, 7 and 10 and the committed work after the
// flush, prints tpmC and per-transaction latencies to stdout and progress
// to stderr, and writes JSON and PNG plots under --out. It returns the
// exit code: 0 success, 1 a failed run or check, 2 bad flags.
func Main(args []string, stdout, stderr io.Writer) int {
	return bench.Command(context.Background(), "tpcc", args, stdout, stderr, parseFlags, execute)
}

// execute runs the parsed command and returns its exit code.
func execute(ctx context.Context, o *options, stdout, stderr io.Writer) int {
	if err := compare(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "tpcc:", err)
		return 1
	}
	return 0
}

// compare runs the policies in turn and reports them.
func compare(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	scale := tpcc.Scale{Warehouses: o.warehouses, Items: o.items, Customers: o.customers}
	rep := report{
		Env:   bench.NewEnvironment("tpcc "+strings.Join(o.args, " "), o.quick),
		Store: o.store, StoreLatencyMs: o.latency.Milliseconds(),
		Warehouses: o.warehouses, Terminals: o.terminals, Items: o.items, Customers: o.customers,
		Warmup: o.warmup.String(), Duration: o.duration.String(), Ratios: map[string]string{},
		Deviations: deviations(scale),
	}
	// The store behind a latency proxy, as the YCSB command does it: the
	// runs go through it, the load and the checks do not.
	runDSN := o.dsn
	if o.latency > 0 {
		addr, err := bench.StoreAddr(o.store, o.dsn)
		if err != nil {
			return fmt.Errorf("--store-latency: %w", err)
		}
		proxy, err := bench.StartLatencyProxy(addr, o.latency)
		if err != nil {
			return err
		}
		defer proxy.Close()
		if runDSN, err = bench.WithStoreAddr(o.store, o.dsn, proxy.Addr); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "tpcc: %s behind a latency proxy at %s adding %v each way (toxiproxy)\n", o.store, proxy.Addr, o.latency)
	}
	var failures []string
	for _, p := range o.policies {
		out, err := tpcc.Bench(ctx, tpcc.Options{Policy: p, Store: o.store, DSN: o.dsn, RunDSN: runDSN, RedisAddr: o.redis, Scale: scale,
			Terminals: o.terminals, Warmup: o.warmup, Duration: o.duration, Seed: o.seed, Log: stderr, Cold: o.cold,
			CPUProfile: profilePath(o.cpuprofile, p), Configure: func(c *config.Config) {
				c.Redis.ShareRoundTrips, c.Writeback.ImmutableCache = o.share, o.immutable
			}})
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		rep.Policies = append(rep.Policies, out)
		verdict := fmt.Sprintf("conditions 1-5, 7, 10 and the committed work hold (%d orders, %d payments)", out.Work.NewOrders, out.Work.Payments)
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
	for _, pair := range [][2]string{{bench.WriteBack, bench.Database}, {bench.WriteBack, bench.WriteThrough}, {bench.WriteThrough, bench.Database}, {bench.WriteBackEmbedded, bench.Database}, {bench.WriteBackEmbedded, bench.WriteBack}} {
		a, okA := tpm[pair[0]]
		b, okB := tpm[pair[1]]
		if okA && okB {
			k := pair[0] + " / " + pair[1]
			rep.Ratios[k] = bench.Ratio(a, b)
			fmt.Fprintf(stdout, "%-28s tpmC %s\n", k, rep.Ratios[k])
		}
	}
	rep.Consistency = "conditions 1-5, 7, 10 and the committed work hold for every policy"
	if len(failures) > 0 {
		rep.Consistency = strings.Join(failures, "; ")
	}
	fmt.Fprintln(stdout, "consistency:", rep.Consistency)
	path := filepath.Join(o.out, o.name()+".json")
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

// profilePath is where policy's CPU profile goes: path with the policy
// before its extension (cpu.pprof: cpu-write-back.pprof); "" for none.
func profilePath(path, policy string) string {
	if path == "" {
		return ""
	}
	ext := filepath.Ext(path)
	return strings.TrimSuffix(path, ext) + "-" + policy + ext
}
