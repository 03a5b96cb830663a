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
	for round := 1; round <= o.rounds; round++ {
		for _, p := range o.policies {
			out, err := tpcc.Bench(ctx, tpcc.Options{Policy: p, Store: o.store, DSN: o.dsn, RunDSN: runDSN, RedisAddr: o.redis, Scale: scale,
				Terminals: o.terminals, Warmup: o.warmup, Duration: o.duration, Seed: o.seed, Log: stderr, Cold: o.cold,
				CPUProfile: profilePath(o.cpuprofile, p, round), Configure: func(c *config.Config) {
					c.Redis.ShareRoundTrips, c.Writeback.ImmutableCache = o.share, o.immutable
				}})
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			if o.rounds > 1 {
				out.Round = round
			}
			rep.Policies = append(rep.Policies, out)
			verdict := fmt.Sprintf("conditions 1-5, 7, 10 and the committed work hold (%d orders, %d payments)", out.Work.NewOrders, out.Work.Payments)
			if err := out.Check.Err(); err != nil {
				verdict = err.Error()
				failures = append(failures, label(out)+": "+err.Error())
			}
			fmt.Fprintf(stderr, "[tpcc %s] %.0f tpmC; flush %d sessions in %.2fs; %s\n", label(out), out.TpmC, out.Flushed, out.FlushSeconds, verdict)
		}
	}
	printTables(stdout, rep.Policies)
	rep.Rounds = o.rounds
	rep.RatioRounds = map[string][]float64{}
	for _, pair := range [][2]string{{bench.WriteBack, bench.Database}, {bench.WriteBack, bench.WriteThrough}, {bench.WriteThrough, bench.Database}, {bench.WriteBackEmbedded, bench.Database}, {bench.WriteBackEmbedded, bench.WriteBack}} {
		each := roundRatios(rep.Policies, pair[0], pair[1])
		if len(each) == 0 {
			continue
		}
		k := pair[0] + " / " + pair[1]
		rep.Ratios[k] = bench.Ratio(bench.Median(each), 1)
		if len(each) == 1 {
			fmt.Fprintf(stdout, "%-28s tpmC %s\n", k, rep.Ratios[k])
			continue
		}
		rep.RatioRounds[k] = each
		rounds := make([]string, len(each))
		for i, r := range each {
			rounds[i] = bench.Ratio(r, 1)
		}
		fmt.Fprintf(stdout, "%-28s tpmC %s, the median of %d rounds: %s\n", k, rep.Ratios[k], len(each), strings.Join(rounds, ", "))
	}
	rep.Required = judge(o.require, rep.Policies)
	var unmet []string
	for _, v := range rep.Required {
		if !v.Met {
			unmet = append(unmet, fmt.Sprintf("%s %s < %s", v.Ratio, bench.Ratio(v.Median, 1), bench.Ratio(v.Min, 1)))
		}
		fmt.Fprintln(stdout, v)
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
	if len(unmet) > 0 {
		return fmt.Errorf("required ratios not reached: %s", strings.Join(unmet, "; "))
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
// before its extension (cpu.pprof: cpu-write-back.pprof), and the round
// after it from the second round on (cpu-write-back-2.pprof); "" for none.
func profilePath(path, policy string, round int) string {
	if path == "" {
		return ""
	}
	if round > 1 {
		policy = fmt.Sprintf("%s-%d", policy, round)
	}
	return bench.NamedPath(path, policy)
}

// label names a run in the tables and the log: its policy, and its round
// when there are several (write-back #2).
func label(r tpcc.Outcome) string {
	if r.Round == 0 {
		return r.Policy
	}
	return fmt.Sprintf("%s #%d", r.Policy, r.Round)
}

// roundRatios is, per round in which policies a and b both ran, a's tpmC
// over b's.
func roundRatios(runs []tpcc.Outcome, a, b string) []float64 {
	type pair struct{ a, b float64 }
	byRound := map[int]*pair{}
	var order []int
	for _, r := range runs {
		p := byRound[r.Round]
		if p == nil {
			p = &pair{}
			byRound[r.Round] = p
			order = append(order, r.Round)
		}
		switch r.Policy {
		case a:
			p.a = r.TpmC
		case b:
			p.b = r.TpmC
		}
	}
	var out []float64
	for _, n := range order {
		if p := byRound[n]; p.a > 0 && p.b > 0 {
			out = append(out, p.a/p.b)
		}
	}
	return out
}
