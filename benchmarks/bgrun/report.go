package bgrun

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/bg"
)

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
	// EmbeddedDatabase is write-back-embedded's SoAR over the database's.
	EmbeddedDatabase float64 `json:"embedded_vs_database,omitempty"`
}

func printTable(w io.Writer, o *options, runs []*storeRun) {
	var t bench.Table
	t.Header = []string{"store", "mix", "policy", "SoAR/s", "threads", "p95 ms", "≤SLA %", "stale %", "reads", "pending", "pinned", "drained in", "L1 hits %"}
	for _, sr := range runs {
		for k, m := range o.mixes {
			for _, p := range o.policies {
				mix := m.Name + "%"
				if r := sr.byPolicy[p]; r != nil && k < len(r.Mixes) {
					mr := r.Mixes[k]
					within, near := "-", "-"
					for _, s := range mr.Steps {
						if s.Threads == mr.SoARThreads {
							within = bench.F(s.WithinSLA)
							if s.NearHitPct >= 0 {
								near = bench.F(s.NearHitPct)
							}
						}
					}
					pending, pinned, drained := "-", "-", "-"
					if mr.Pending >= 0 {
						pending, pinned, drained = fmt.Sprint(mr.Pending), bytesString(mr.PinnedBytes), fmt.Sprintf("%.1fs", mr.FlushSeconds)
					}
					t.Add(sr.Store, mix, p, mr.SoAR, mr.SoARThreads, mr.P95, within, fmt.Sprintf("%.3f", mr.StalePct()), mr.Validation.Reads, pending, pinned, drained, near)
					continue
				}
				why := "failed"
				if e, ok := sr.Errors[p]; ok {
					why = "failed: " + e
				}
				for _, na := range sr.NotApplicable {
					if na.Policy == p {
						why = "n/a"
					}
				}
				t.Add(sr.Store, mix, p, why, "", "", "", "", "", "", "", "", "")
			}
		}
	}
	_ = t.Write(w)
	for _, sr := range runs {
		for _, na := range sr.NotApplicable {
			fmt.Fprintf(w, "%s %s: not applicable: %s\n", sr.Store, na.Policy, na.Reason)
		}
	}
}

func printRatios(w io.Writer, o *options, runs []*storeRun) {
	fmt.Fprintln(w)
	for _, sr := range runs {
		for k, m := range o.mixes {
			// cell is policy of's SoAR over policy p's, or why there is none.
			cell := func(of, p string) string {
				a, r := sr.byPolicy[of], sr.byPolicy[p]
				switch {
				case a == nil || r == nil || k >= len(a.Mixes) || k >= len(r.Mixes):
					return "-"
				case a.Mixes[k].SoAR == 0 && r.Mixes[k].SoAR == 0:
					return "(neither met the SLA)"
				case r.Mixes[k].SoAR == 0:
					return "∞ (" + p + " never met the SLA)"
				}
				return bench.Ratio(a.Mixes[k].SoAR, r.Mixes[k].SoAR)
			}
			if wb := sr.byPolicy[bench.WriteBack]; wb != nil && k < len(wb.Mixes) {
				fmt.Fprintf(w, "%-8s %5s%% reads  write-back SoAR / database %s   / write-through %s   / database-async %s\n",
					sr.Store, m.Name, cell(bench.WriteBack, bench.Database), cell(bench.WriteBack, bench.WriteThrough), cell(bench.WriteBack, bench.DatabaseAsync))
			}
			if emb := sr.byPolicy[bench.WriteBackEmbedded]; emb != nil && k < len(emb.Mixes) {
				fmt.Fprintf(w, "%-8s %5s%% reads  write-back-embedded SoAR / database %s\n", sr.Store, m.Name, cell(bench.WriteBackEmbedded, bench.Database))
			}
		}
	}
}

func printValidation(w io.Writer, runs []*storeRun) {
	fmt.Fprintln(w)
	for _, sr := range runs {
		for _, r := range sr.Results {
			fmt.Fprintf(w, "validate: %s %s: %d reads checked against the acknowledged writes, %d stale (%.3f%%); after the run the store holds %d of %d member lists as the acknowledged writes left them\n",
				sr.Store, r.Policy, r.Validation.Reads, r.Validation.Stale, r.Validation.StalePct(), r.FinalLists-r.FinalBad, r.FinalLists)
			for _, s := range r.Validation.Samples {
				fmt.Fprintf(w, "  stale: %s\n", s)
			}
			for _, s := range r.FinalDiffs {
				fmt.Fprintf(w, "  store: %s\n", s)
			}
		}
		for _, f := range sr.failed {
			fmt.Fprintf(w, "FAILED: %s\n", f)
		}
	}
}

func bytesString(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

// writeOutputs writes bg-<store>.json, a throughput-vs-threads plot per
// mix and a SoAR bar chart.
func writeOutputs(o *options, sr *storeRun) error {
	if err := bench.WriteJSON(filepath.Join(o.out, "bg-"+sr.Store+".json"), sr); err != nil {
		return fmt.Errorf("writing the results of %s: %w", sr.Store, err)
	}
	groups := make([]string, len(o.mixes))
	var bars []bench.Series
	for k, m := range o.mixes {
		groups[k] = m.Name + "% reads"
		var lines []bench.Series
		for _, r := range sr.Results {
			if k >= len(r.Mixes) {
				continue
			}
			s := bench.Series{Name: r.Policy}
			for _, st := range r.Mixes[k].Steps {
				s.X = append(s.X, float64(st.Threads))
				s.Y = append(s.Y, st.Throughput)
			}
			lines = append(lines, s)
		}
		f := bench.Figure{Title: fmt.Sprintf("BG on %s, %s%% reads: throughput while ramping threads", sr.Store, m.Name),
			XLabel: "threads", YLabel: "throughput (actions/s)", YFromZero: true}
		ticks := make([]float64, len(o.threads))
		for i, n := range o.threads {
			ticks[i] = float64(n)
		}
		f.XLabel = "threads (log scale)"
		if err := bench.LinesWith(plotPath(o, sr.Store, "throughput-"+m.Name), f, bench.LineOptions{XLog: true, XTicks: ticks}, lines); err != nil {
			return err
		}
	}
	for _, r := range sr.Results {
		s := bench.Series{Name: r.Policy, Y: make([]float64, len(o.mixes))}
		for k := range o.mixes {
			if k < len(r.Mixes) {
				s.Y[k] = r.Mixes[k].SoAR
			}
		}
		bars = append(bars, s)
	}
	f := bench.Figure{Title: fmt.Sprintf("BG on %s: SoAR (%g%% of actions ≤ %gms)", sr.Store, o.slaPct, o.slaMs),
		XLabel: "mix", YLabel: "SoAR (actions/s)"}
	return bench.Bars(plotPath(o, sr.Store, "soar"), f, groups, bars)
}

func plotPath(o *options, store, what string) string {
	return filepath.Join(o.out, "bg-"+store+"-"+strings.ReplaceAll(what, ".", "_")+".png")
}
