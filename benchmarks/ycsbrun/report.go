package ycsbrun

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/writeback/writeback/benchmarks/bench"
)

// report is one store's results: the JSON file's content.
type report struct {
	Environment bench.Environment `json:"environment"`
	Settings    settings          `json:"settings"`
	Runs        []*Run            `json:"runs"`
	Rounds      int               `json:"rounds"`
	Ratios      []ratio           `json:"ratios,omitempty"`
	Required    []bench.Verdict   `json:"required,omitempty"`
	SideBySide  []sideBySide      `json:"side_by_side,omitempty"`
	Sweep       []*Run            `json:"sweep,omitempty"`
	Files       []string          `json:"files"`
	Notes       []string          `json:"notes"`

	require []bench.Requirement // --require, judged by write
}

type settings struct {
	Store          string   `json:"store"`
	Records        int64    `json:"records"`
	Fields         int      `json:"fields"`
	FieldSize      int      `json:"field_size"`
	Threads        []int    `json:"threads"`
	DurationS      float64  `json:"duration_s"`
	WarmupS        float64  `json:"warmup_s"`
	SweepDurationS float64  `json:"sweep_duration_s"`
	Distributions  []string `json:"distributions"`
	Caches         []string `json:"caches"`
	StoreLatencyMs []int64  `json:"store_latencies_ms"` // added each way by the proxy; 0: direct
	UpdateAll      bool     `json:"update_all"`
	ScanLength     int      `json:"scan_length"`
	Workloads      []string `json:"workloads"`
	Policies       []string `json:"policies"`
	SweepWorkers   []int    `json:"sweep_workers,omitempty"`
	SweepWorkloads []string `json:"sweep_workloads,omitempty"`
	BatchSize      int      `json:"batch_size"`              // the sidecar's writeback.batchSize
	HoldAppliers   bool     `json:"hold_appliers,omitempty"` // the appliers applied nothing until each run's flush
	ApplyDelayMs   float64  `json:"apply_delay_ms"`          // the sidecars' writeback.applyDelay
	RespSocket     bool     `json:"resp_socket"`             // write-back-resp's front door on a Unix socket (false: loopback TCP)
	Seed           uint64   `json:"seed"`
}

// ratio is a throughput ratio of two policies on one workload and variant
// (the cache state is the first policy's; the second, the database alone,
// may have none): the median of the rounds' ratios, each taken within its
// round (Rounds, with more than one).
type ratio struct {
	Workload string `json:"workload"`
	Variant
	Of     string    `json:"of"`
	To     string    `json:"to"`
	Ratio  float64   `json:"ratio"`
	Rounds []float64 `json:"rounds,omitempty"`
}

// sideBySide is write-back's throughput over HTTP, over the Redis
// protocol and embedded beside the database alone's, on one workload and
// variant: with several rounds, the medians of the rounds' throughputs and
// of their ratios.
type sideBySide struct {
	Workload string `json:"workload"`
	Variant
	Database          float64 `json:"database_ops_per_s"`
	WriteBack         float64 `json:"write_back_ops_per_s"`
	WriteBackRESP     float64 `json:"write_back_resp_ops_per_s"`
	WriteBackEmbedded float64 `json:"write_back_embedded_ops_per_s,omitempty"`
	// The ratios to the database alone; 0 where a run is missing.
	WriteBackRatio         float64 `json:"write_back_ratio"`
	WriteBackRESPRatio     float64 `json:"write_back_resp_ratio"`
	WriteBackEmbeddedRatio float64 `json:"write_back_embedded_ratio,omitempty"`
}

func newReport(o *options, store string) *report {
	var lat []int64
	for _, l := range o.latencies {
		lat = append(lat, l.Milliseconds())
	}
	rep := &report{
		Rounds: o.rounds, require: o.require,
		Environment: bench.NewEnvironment("go run ./benchmarks/cmd/ycsb "+strings.Join(o.args, " "), o.quick),
		Settings: settings{
			Store: store, Records: o.records, Fields: o.fields, FieldSize: o.fieldSize, Threads: o.threads,
			DurationS: o.duration.Seconds(), WarmupS: o.warmup.Seconds(), SweepDurationS: o.sweepDuration.Seconds(),
			Distributions: o.distributions, Caches: o.caches, StoreLatencyMs: lat, UpdateAll: o.updateAll, ScanLength: o.scanLength,
			Workloads: o.workloads, Policies: o.policies, SweepWorkers: o.sweepWorkers, SweepWorkloads: o.sweepWorkloads, Seed: o.seed,
			BatchSize: sidecarBatch(o.batch(store)), HoldAppliers: o.holdAppliers, RespSocket: o.respSocket,
			ApplyDelayMs: float64(o.delay()) / float64(time.Millisecond),
		},
		Notes: []string{
			"Every policy loads a fresh table and starts a fresh sidecar, then runs each workload with each distribution in each cache state.",
			"cache warm: every record is read once before the warm-up (a warm cache and buffer pool); cold: the collection's cache entries are dropped from Redis and there is no warm-up (cache_entries_at_start 0), while the database's buffer pool stays warm; none: the database alone, run once.",
			"store_latency_ms: delay added each way between the benchmark (clients and sidecar) and the store by an in-process toxiproxy latency toxic; Redis is local.",
			"pending/pinned/applied are read when the measured window closes, before the flush; applied% = applied / (applied + pending) changes since the sidecar started.",
			"Latencies are in milliseconds, as the client saw them, from every operation of the measured window.",
		},
	}
	if !o.compare {
		rep.Runs = []*Run{}
	}
	return rep
}

// sortRuns orders the comparison's runs by store latency, threads,
// distribution and workload, then policy and cache state, in the order of
// the flags, as the table shows them; the sweep's by workload, then
// appliers.
func (rep *report) sortRuns() {
	wi := func(w string) int { return slices.Index(workloadNames, w) }
	slices.SortStableFunc(rep.Runs, func(a, b *Run) int {
		for _, d := range []int{
			int(a.StoreLatencyMs - b.StoreLatencyMs),
			slices.Index(rep.Settings.Threads, a.Threads) - slices.Index(rep.Settings.Threads, b.Threads),
			slices.Index(rep.Settings.Distributions, a.Distribution) - slices.Index(rep.Settings.Distributions, b.Distribution),
			wi(a.Workload) - wi(b.Workload),
			slices.Index(bench.Policies, a.Policy) - slices.Index(bench.Policies, b.Policy),
			slices.Index(cacheStates, a.Cache) - slices.Index(cacheStates, b.Cache),
		} {
			if d != 0 {
				return d
			}
		}
		return 0
	})
	slices.SortStableFunc(rep.Sweep, func(a, b *Run) int {
		if d := wi(a.Workload) - wi(b.Workload); d != 0 {
			return d
		}
		return a.Workers - b.Workers
	})
}

// runs returns the runs of a policy on a workload and variant, in the
// rounds' order. The database alone (no sidecar) matches any cache state:
// it has no cache and runs once per round.
func (rep *report) runs(workload, policy string, v Variant) []*Run {
	if _, ok := bench.Sidecar(policy); !ok {
		v.Cache = cacheNone
	}
	var out []*Run
	for _, r := range rep.Runs {
		if r.Workload == workload && r.Policy == policy && r.Variant == v && r.Skipped == "" {
			out = append(out, r)
		}
	}
	return out
}

// throughput is the median throughput of a policy's runs on a workload
// and variant; 0 when none ran.
func (rep *report) throughput(workload, policy string, v Variant) float64 {
	var xs []float64
	for _, r := range rep.runs(workload, policy, v) {
		xs = append(xs, r.Throughput)
	}
	return bench.Median(xs)
}

// roundRatios is, per round in which both ran on a workload and variant,
// policy a's throughput over policy b's.
func (rep *report) roundRatios(workload, a, b string, v Variant) []float64 {
	return rep.metricRatios(runThroughput, workload, a, b, v)
}

// metricRatios is roundRatios of metric m: per round in which both ran
// and measured it (m's ok: a latency of operations that ran), policy a's m
// over policy b's.
func (rep *report) metricRatios(m func(*Run) (float64, bool), workload, a, b string, v Variant) []float64 {
	bs := map[int]float64{}
	for _, r := range rep.runs(workload, b, v) {
		if x, ok := m(r); ok {
			bs[r.Round] = x
		}
	}
	var out []float64
	for _, r := range rep.runs(workload, a, v) {
		if x, ok := m(r); ok && bs[r.Round] > 0 {
			out = append(out, x/bs[r.Round])
		}
	}
	return out
}

// runThroughput is a run's operations per second.
func runThroughput(r *Run) (float64, bool) { return r.Throughput, true }

// requireMetrics are the metrics besides throughput a --require clause
// can name, by name: the latencies' medians and 99th percentiles, of runs
// that had such operations.
var requireMetrics = map[string]func(*Run) (float64, bool){
	"read-p50":   func(r *Run) (float64, bool) { return r.Read.P50, r.Read.Count > 0 },
	"read-p99":   func(r *Run) (float64, bool) { return r.Read.P99, r.Read.Count > 0 },
	"update-p50": func(r *Run) (float64, bool) { return r.Update.P50, r.Update.Count > 0 },
	"update-p99": func(r *Run) (float64, bool) { return r.Update.P99, r.Update.Count > 0 },
}

// judge judges each requirement on every workload (its own, when it names
// one) and variant where both its policies ran (a requirement that none has
// is not met).
func (rep *report) judge() []bench.Verdict {
	var out []bench.Verdict
	for _, req := range rep.require {
		found := false
		for _, v := range rep.variants() {
			for _, w := range rep.Settings.Workloads {
				if req.On != "" && req.On != w {
					continue
				}
				m := runThroughput
				if req.Metric != "" {
					m = requireMetrics[req.Metric]
				}
				rounds := rep.metricRatios(m, w, req.A, req.B, v)
				if len(rounds) == 0 {
					continue
				}
				found = true
				vd := req.Judge(rounds)
				vd.Case = w + " " + v.label()
				out = append(out, vd)
			}
		}
		if !found {
			out = append(out, req.Judge(nil))
		}
	}
	return out
}

// variants are every variant of the comparison with a cache, in the
// order of the flags.
func (rep *report) variants() []Variant {
	var out []Variant
	st := rep.Settings
	for _, l := range st.StoreLatencyMs {
		for _, t := range st.Threads {
			for _, d := range st.Distributions {
				for _, c := range st.Caches {
					out = append(out, Variant{Distribution: d, Cache: c, StoreLatencyMs: l, Threads: t})
				}
			}
		}
	}
	return out
}

// ratios are write-back's throughput against the database alone, its
// asynchronous commit and write-through on workloads A and B (the paper's
// headline comparisons), and the Redis-protocol front door's against the
// database, for every variant.
func (rep *report) ratios() []ratio {
	var out []ratio
	pairs := [][2]string{
		{bench.WriteBack, bench.Database}, {bench.WriteBack, bench.DatabaseAsync}, {bench.WriteBack, bench.WriteThrough},
		{bench.WriteBackRESP, bench.Database}, {bench.WriteBackRESP, bench.DatabaseAsync}, {bench.WriteBackRESP, bench.WriteThrough},
		{bench.WriteBackEmbedded, bench.Database},
	}
	for _, v := range rep.variants() {
		for _, w := range []string{"A", "B"} {
			for _, pr := range pairs {
				rounds := rep.roundRatios(w, pr[0], pr[1], v)
				if len(rounds) == 0 {
					continue
				}
				x := ratio{Workload: w, Variant: v, Of: pr[0], To: pr[1], Ratio: bench.Median(rounds)}
				if len(rounds) > 1 {
					x.Rounds = rounds
				}
				out = append(out, x)
			}
		}
	}
	return out
}

// sideBySide is write-back (HTTP, Redis protocol, embedded) beside the
// database alone for workloads A, B and C in every variant where the
// database ran and write-back did in any of these ways.
func (rep *report) sideBySide() []sideBySide {
	var out []sideBySide
	for _, v := range rep.variants() {
		for _, w := range []string{"A", "B", "C"} {
			db := rep.throughput(w, bench.Database, v)
			x := sideBySide{Workload: w, Variant: v, Database: db}
			for _, p := range []struct {
				policy     string
				ops, ratio *float64
			}{
				{bench.WriteBack, &x.WriteBack, &x.WriteBackRatio},
				{bench.WriteBackRESP, &x.WriteBackRESP, &x.WriteBackRESPRatio},
				{bench.WriteBackEmbedded, &x.WriteBackEmbedded, &x.WriteBackEmbeddedRatio},
			} {
				*p.ops = rep.throughput(w, p.policy, v)
				*p.ratio = bench.Median(rep.roundRatios(w, p.policy, bench.Database, v))
			}
			if db == 0 || x.WriteBack == 0 && x.WriteBackRESP == 0 && x.WriteBackEmbedded == 0 {
				continue
			}
			out = append(out, x)
		}
	}
	return out
}

// ms formats a latency in milliseconds, "-" without samples.
func ms(l bench.Latency) string {
	if l.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", l.P50)
}

func p99(l bench.Latency) string {
	if l.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", l.P99)
}

// print writes the store's tables and ratios.
func (rep *report) print(w io.Writer) {
	store := rep.Settings.Store
	if len(rep.Runs) > 0 {
		held := ""
		if rep.Settings.HoldAppliers {
			held = "; the sidecars' appliers held until each run's flush (--hold-appliers)"
		}
		if rep.Settings.ApplyDelayMs > 0 {
			held += fmt.Sprintf("; the sidecars' writeback.applyDelay %gms", rep.Settings.ApplyDelayMs)
		}
		fmt.Fprintf(w, "\nYCSB on %s: %d records × %d fields × %d B, %s; %gs measured per run (latencies in ms; cache cold: no warm-up)%s\n",
			store, rep.Settings.Records, rep.Settings.Fields, rep.Settings.FieldSize,
			map[bool]string{true: "updates set every field", false: "updates set one field"}[rep.Settings.UpdateAll], rep.Settings.DurationS, held)
		t := bench.Table{Header: []string{"store +ms", "threads", "keys", "workload", "policy", "cache", "ops/s", "read p50", "read p99", "update p50", "update p99", "scan p50", "scan p99", "pending", "pinned", "applied", "hits", "L1 hits", "verify"}}
		var skipped []string
		for _, r := range rep.Runs {
			if r.Skipped != "" {
				t.Add(r.StoreLatencyMs, r.Threads, r.Distribution, r.Workload, r.policyLabel(), r.Cache, "n/a", "", "", "", "", "", "", "", "", "", "", "", "skipped")
				skipped = append(skipped, fmt.Sprintf("%s on %s: %s", r.Policy, r.Workload, r.Skipped))
				continue
			}
			pending, pinned, applied, hits, near := "-", "-", "-", "-", "-"
			if r.Sidecar {
				pending, pinned = fmt.Sprint(r.PendingChanges), kib(float64(r.PinnedBytes))
				if r.AppliedChanges+float64(r.PendingChanges) > 0 {
					applied = fmt.Sprintf("%.1f%%", r.AppliedPercent)
				}
				hits = fmt.Sprintf("%.1f%%", r.CacheHitPercent)
				if r.NearHitPercent > 0 {
					near = fmt.Sprintf("%.1f%%", r.NearHitPercent)
				}
			}
			t.Add(r.StoreLatencyMs, r.Threads, r.Distribution, r.Workload, r.policyLabel(), r.Cache, fmt.Sprintf("%.0f", r.Throughput), ms(r.Read), p99(r.Read), ms(r.Update), p99(r.Update),
				ms(r.Scan), p99(r.Scan), pending, pinned, applied, hits, near, verdict(r))
		}
		_ = t.Write(w)
		for _, s := range skipped {
			fmt.Fprintf(w, "  n/a: %s\n", s)
		}
		rep.printCPU(w)
		if rs := rep.Ratios; len(rs) > 0 {
			fmt.Fprintln(w)
			for _, x := range rs {
				fmt.Fprintf(w, "%s %-28s %-15s / %-14s throughput %s%s\n", x.Workload, x.label(), x.Of, x.To, bench.Ratio(x.Ratio, 1), roundsNote(x.Rounds))
			}
		}
		if sb := rep.SideBySide; len(sb) > 0 {
			fmt.Fprintf(w, "\nWrite-back / the database alone on %s (ops/s; write-back over HTTP, over the Redis-protocol front door and embedded in-process; store +ms: added each way)\n", store)
			t := bench.Table{Header: []string{"store +ms", "threads", "keys", "cache", "workload", "database", "write-back", "write-back-resp", "embedded", "write-back / db", "resp / db", "embedded / db"}}
			for _, x := range sb {
				t.Add(x.StoreLatencyMs, x.Threads, x.Distribution, x.Cache, x.Workload, fmt.Sprintf("%.0f", x.Database),
					opsOrNA(x.WriteBack), opsOrNA(x.WriteBackRESP), opsOrNA(x.WriteBackEmbedded),
					ratioOrNA(x.WriteBackRatio), ratioOrNA(x.WriteBackRESPRatio), ratioOrNA(x.WriteBackEmbeddedRatio))
			}
			_ = t.Write(w)
		}
		if len(rep.Required) > 0 {
			fmt.Fprintln(w)
			for _, v := range rep.Required {
				fmt.Fprintln(w, v)
			}
		}
	}
	if len(rep.Sweep) > 0 {
		fmt.Fprintf(w, "\nApplier sweep on %s (write-back, paper's Figure 5): %gs measured per run; throughput normalized to %s\n",
			store, rep.Settings.SweepDurationS, plural(rep.Sweep[0].Workers, "applier"))
		t := bench.Table{Header: []string{"workload", "appliers", "ops/s", "normalized", "applied", "pending", "pinned", "docs/batch", "update p50", "verify"}}
		for _, r := range rep.Sweep {
			t.Add(r.Workload, r.Workers, fmt.Sprintf("%.0f", r.Throughput), bench.Ratio(r.Throughput, rep.sweepBase(r.Workload)),
				fmt.Sprintf("%.1f%%", r.AppliedPercent), r.PendingChanges, kib(float64(r.PinnedBytes)), fmt.Sprintf("%.1f", r.ApplierBatchDocs), ms(r.Update), verdict(r))
		}
		_ = t.Write(w)
	}
	for _, f := range rep.Files {
		fmt.Fprintf(w, "wrote %s\n", f)
	}
}

// unmet lists the requirements the run did not meet.
func (rep *report) unmet() []string {
	var out []string
	for _, v := range rep.Required {
		if !v.Met {
			out = append(out, v.String())
		}
	}
	return out
}

// roundsNote is ", the median of n rounds: r1, r2 …" for more than one
// round's ratio.
func roundsNote(rounds []float64) string {
	if len(rounds) < 2 {
		return ""
	}
	each := make([]string, len(rounds))
	for i, r := range rounds {
		each[i] = bench.Ratio(r, 1)
	}
	return fmt.Sprintf(", the median of %d rounds: %s", len(rounds), strings.Join(each, ", "))
}

func opsOrNA(v float64) string {
	if v == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f", v)
}

func ratioOrNA(r float64) string {
	if r == 0 {
		return "n/a"
	}
	return bench.Ratio(r, 1)
}

func verdict(r *Run) string {
	if r.ok() {
		return "ok"
	}
	return "FAILED"
}

// printCPU prints where a saturated machine's processor time went: each
// process's CPU time over the measured window, per operation.
func (rep *report) printCPU(w io.Writer) {
	t := bench.Table{Header: append([]string{"store +ms", "threads", "keys", "workload", "policy", "cache", "CPU µs/op"}, bench.CPUColumns...)}
	for _, r := range rep.Runs {
		if len(r.CPUPerOp) > 0 {
			t.Add(append([]any{r.StoreLatencyMs, r.Threads, r.Distribution, r.Workload, r.policyLabel(), r.Cache}, bench.CPUCells(r.CPUPerOp)...)...)
		}
	}
	if len(t.Rows) > 0 {
		fmt.Fprintln(w, "\nCPU time per operation of the measured window, by process (µs; the servers' count whatever else used them meanwhile)")
		_ = t.Write(w)
	}
}

// sweepBase is the throughput of the workload's first sweep run, which the
// others are normalized to.
func (rep *report) sweepBase(workload string) float64 {
	for _, r := range rep.Sweep {
		if r.Workload == workload {
			return r.Throughput
		}
	}
	return 0
}
