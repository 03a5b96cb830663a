package ycsbrun

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/writeback/writeback/benchmarks/bench"
)

// report is one store's results: the JSON file's content.
type report struct {
	Environment bench.Environment `json:"environment"`
	Settings    settings          `json:"settings"`
	Runs        []*Run            `json:"runs"`
	Ratios      []ratio           `json:"ratios,omitempty"`
	Sweep       []*Run            `json:"sweep,omitempty"`
	Files       []string          `json:"files"`
	Notes       []string          `json:"notes"`
}

type settings struct {
	Store          string   `json:"store"`
	Records        int64    `json:"records"`
	Fields         int      `json:"fields"`
	FieldSize      int      `json:"field_size"`
	Threads        int      `json:"threads"`
	DurationS      float64  `json:"duration_s"`
	WarmupS        float64  `json:"warmup_s"`
	SweepDurationS float64  `json:"sweep_duration_s"`
	Distribution   string   `json:"distribution"`
	UpdateAll      bool     `json:"update_all"`
	ScanLength     int      `json:"scan_length"`
	Workloads      []string `json:"workloads"`
	Policies       []string `json:"policies"`
	SweepWorkers   []int    `json:"sweep_workers,omitempty"`
	SweepWorkloads []string `json:"sweep_workloads,omitempty"`
	BatchSize      int      `json:"batch_size"` // the sidecar's writeback.batchSize
	Seed           uint64   `json:"seed"`
}

// ratio is a throughput ratio of two policies on one workload.
type ratio struct {
	Workload string  `json:"workload"`
	Of       string  `json:"of"`
	To       string  `json:"to"`
	Ratio    float64 `json:"ratio"`
}

func newReport(o *options, store string) *report {
	rep := &report{
		Environment: bench.NewEnvironment("go run ./benchmarks/cmd/ycsb "+strings.Join(o.args, " "), o.quick),
		Settings: settings{
			Store: store, Records: o.records, Fields: o.fields, FieldSize: o.fieldSize, Threads: o.threads,
			DurationS: o.duration.Seconds(), WarmupS: o.warmup.Seconds(), SweepDurationS: o.sweepDuration.Seconds(),
			Distribution: o.distribution, UpdateAll: o.updateAll, ScanLength: o.scanLength,
			Workloads: o.workloads, Policies: o.policies, SweepWorkers: o.sweepWorkers, SweepWorkloads: o.sweepWorkloads, Seed: o.seed,
			BatchSize: sidecarBatch(o.batch(store)),
		},
		Notes: []string{
			"Every run loads a fresh table, starts a fresh sidecar and reads every record once before its warm-up (a warm cache and buffer pool).",
			"pending/pinned/applied are read when the measured window closes, before the flush; applied% = applied / (applied + pending) changes since the sidecar started.",
			"Latencies are in milliseconds, as the client saw them, from every operation of the measured window.",
		},
	}
	if !o.compare {
		rep.Runs = []*Run{}
	}
	return rep
}

// sortRuns orders the comparison's runs by workload, then policy, in the
// order of the flags, as the table shows them; the sweep's by workload,
// then appliers.
func (rep *report) sortRuns() {
	wi := func(w string) int { return slices.Index(workloadNames, w) }
	slices.SortStableFunc(rep.Runs, func(a, b *Run) int {
		if d := wi(a.Workload) - wi(b.Workload); d != 0 {
			return d
		}
		return slices.Index(bench.Policies, a.Policy) - slices.Index(bench.Policies, b.Policy)
	})
	slices.SortStableFunc(rep.Sweep, func(a, b *Run) int {
		if d := wi(a.Workload) - wi(b.Workload); d != 0 {
			return d
		}
		return a.Workers - b.Workers
	})
}

// find returns the run of a policy on a workload that ran, or nil.
func (rep *report) find(workload, policy string) *Run {
	for _, r := range rep.Runs {
		if r.Workload == workload && r.Policy == policy && r.Skipped == "" {
			return r
		}
	}
	return nil
}

// ratios are write-back's throughput against the database alone, its
// asynchronous commit and write-through on workloads A and B (the paper's
// headline comparisons), and the Redis-protocol front door's against the
// database.
func (rep *report) ratios() []ratio {
	var out []ratio
	pairs := [][2]string{
		{bench.WriteBack, bench.Database}, {bench.WriteBack, bench.DatabaseAsync}, {bench.WriteBack, bench.WriteThrough},
		{bench.WriteBackRESP, bench.Database}, {bench.WriteBackRESP, bench.DatabaseAsync}, {bench.WriteBackRESP, bench.WriteThrough},
	}
	for _, w := range []string{"A", "B"} {
		for _, pr := range pairs {
			a, b := rep.find(w, pr[0]), rep.find(w, pr[1])
			if a == nil || b == nil || b.Throughput == 0 {
				continue
			}
			out = append(out, ratio{Workload: w, Of: pr[0], To: pr[1], Ratio: a.Throughput / b.Throughput})
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
		fmt.Fprintf(w, "\nYCSB on %s: %d records × %d fields × %d B, %d threads, %s keys, %s; %gs measured per run (latencies in ms)\n",
			store, rep.Settings.Records, rep.Settings.Fields, rep.Settings.FieldSize, rep.Settings.Threads, rep.Settings.Distribution,
			map[bool]string{true: "updates set every field", false: "updates set one field"}[rep.Settings.UpdateAll], rep.Settings.DurationS)
		t := bench.Table{Header: []string{"workload", "policy", "ops/s", "read p50", "read p99", "update p50", "update p99", "scan p50", "scan p99", "pending", "pinned", "applied", "hits", "verify"}}
		var skipped []string
		for _, r := range rep.Runs {
			if r.Skipped != "" {
				t.Add(r.Workload, r.Policy, "n/a", "", "", "", "", "", "", "", "", "", "", "skipped")
				skipped = append(skipped, fmt.Sprintf("%s on %s: %s", r.Policy, r.Workload, r.Skipped))
				continue
			}
			pending, pinned, applied, hits := "-", "-", "-", "-"
			if r.Sidecar {
				pending, pinned = fmt.Sprint(r.PendingChanges), kib(float64(r.PinnedBytes))
				if r.AppliedChanges+float64(r.PendingChanges) > 0 {
					applied = fmt.Sprintf("%.1f%%", r.AppliedPercent)
				}
				hits = fmt.Sprintf("%.1f%%", r.CacheHitPercent)
			}
			t.Add(r.Workload, r.Policy, fmt.Sprintf("%.0f", r.Throughput), ms(r.Read), p99(r.Read), ms(r.Update), p99(r.Update),
				ms(r.Scan), p99(r.Scan), pending, pinned, applied, hits, verdict(r))
		}
		_ = t.Write(w)
		for _, s := range skipped {
			fmt.Fprintf(w, "  n/a: %s\n", s)
		}
		if rs := rep.Ratios; len(rs) > 0 {
			fmt.Fprintln(w)
			for _, x := range rs {
				fmt.Fprintf(w, "%s  %-15s / %-14s throughput %s\n", x.Workload, x.Of, x.To, bench.Ratio(x.Ratio, 1))
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

func verdict(r *Run) string {
	if r.ok() {
		return "ok"
	}
	return "FAILED"
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
