package ycsbrun

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/writeback/writeback/benchmarks/bench"
)

// write writes the JSON file and the plots under dir, and records their
// names in rep.Files (print shows them).
func (rep *report) write(dir string) error {
	rep.Ratios = rep.ratios()
	rep.SideBySide = rep.sideBySide()
	rep.Required = rep.judge()
	store := rep.Settings.Store
	path := func(suffix string) string { return filepath.Join(dir, "ycsb-"+store+suffix) }
	var files []string
	if len(rep.Runs) > 0 {
		var workloads []string
		for _, r := range rep.Runs {
			if !slices.Contains(workloads, r.Workload) {
				workloads = append(workloads, r.Workload)
			}
		}
		// One bar chart per distribution, store latency and number of
		// threads; a group per workload and cache state (the database
		// alone, which has no cache, shows the same bar in both).
		st := rep.Settings
		for _, l := range st.StoreLatencyMs {
			for _, th := range st.Threads {
				for _, d := range st.Distributions {
					var groups []string
					var vs []Variant
					for _, wl := range workloads {
						for _, c := range st.Caches {
							groups = append(groups, wl+" "+c)
							vs = append(vs, Variant{Distribution: d, Cache: c, StoreLatencyMs: l, Threads: th})
						}
					}
					var series []bench.Series
					for _, p := range bench.Policies {
						if !slices.Contains(st.Policies, p) {
							continue
						}
						s := bench.Series{Name: p, Y: make([]float64, len(groups))}
						for i := range groups {
							s.Y[i] = rep.throughput(workloads[i/len(st.Caches)], p, vs[i])
						}
						series = append(series, s)
					}
					title := fmt.Sprintf("YCSB throughput on %s, %s keys, %d threads", store, d, th)
					suffix := "-throughput-" + d
					if l > 0 {
						title += fmt.Sprintf(", store +%d ms each way", l)
						suffix += fmt.Sprintf("-%dms", l)
					}
					if len(st.Threads) > 1 {
						suffix += fmt.Sprintf("-%dt", th)
					}
					f := bench.Figure{Title: title + " (n/a bars are 0)", XLabel: "workload and the sidecar's cache at the start", YLabel: "throughput (ops/s)", YFromZero: true}
					if err := bench.Bars(path(suffix+".png"), f, groups, series); err != nil {
						return err
					}
					files = append(files, path(suffix+".png"))
				}
			}
		}

		var lines []bench.Series
		for _, r := range rep.Runs {
			// Workload C never writes: nothing is pinned.
			if r.Skipped != "" || r.Update.Count == 0 || len(r.PinnedOverTime) == 0 || (r.Policy != bench.WriteBack && r.Policy != bench.WriteBackRESP) {
				continue
			}
			// The warm runs of the first store latency and number of
			// threads: more lines would not be told apart.
			if r.Cache != cacheWarm || r.StoreLatencyMs != st.StoreLatencyMs[0] || r.Threads != st.Threads[0] {
				continue
			}
			name := r.Workload + " " + r.Distribution
			if r.Policy == bench.WriteBackRESP {
				name += " (RESP)"
			}
			x, y := bench.XY(r.PinnedOverTime, 1.0/1024)
			lines = append(lines, bench.Series{Name: name, X: x, Y: y})
		}
		if len(lines) > 0 {
			f := bench.Figure{Title: fmt.Sprintf("Pinned buffered writes during the warm write-back runs on %s (warm-up of %gs included)", store, rep.Settings.WarmupS),
				XLabel: "time since the run started (s)", YLabel: "pinned memory (KiB)", YFromZero: true}
			o := bench.LineOptions{YMax: headroom(lines), LegendRight: true}
			if err := bench.LinesWith(path("-pinned.png"), f, o, lines); err != nil {
				return err
			}
			files = append(files, path("-pinned.png"))
		}
	}
	if len(rep.Sweep) > 0 {
		var thr, applied, pinned []bench.Series
		for _, w := range rep.Settings.SweepWorkloads {
			var x, yt, ya, yp []float64
			base := rep.sweepBase(w)
			for _, r := range rep.Sweep {
				if r.Workload != w {
					continue
				}
				x = append(x, float64(r.Workers))
				if base > 0 {
					yt = append(yt, r.Throughput/base)
				} else {
					yt = append(yt, 0)
				}
				ya = append(ya, r.AppliedPercent)
				yp = append(yp, float64(r.PinnedBytes)/1024)
			}
			if len(x) == 0 {
				continue
			}
			name := "workload " + w
			thr = append(thr, bench.Series{Name: name, X: x, Y: yt})
			applied = append(applied, bench.Series{Name: name, X: x, Y: ya})
			pinned = append(pinned, bench.Series{Name: name, X: x, Y: yp})
		}
		xl := "appliers (writeback.workers, log scale)"
		var ticks []float64
		for _, n := range rep.Settings.SweepWorkers {
			ticks = append(ticks, float64(n))
		}
		top := bench.LineOptions{XLog: true, XTicks: ticks, LegendRight: true}
		plots := []struct {
			suffix string
			f      bench.Figure
			o      bench.LineOptions
			s      []bench.Series
		}{
			{"-sweep-throughput.png", bench.Figure{Title: fmt.Sprintf("Throughput vs appliers, write-back on %s (Figure 5a)", store), XLabel: xl,
				YLabel: fmt.Sprintf("throughput relative to %s (×)", plural(rep.Sweep[0].Workers, "applier")), YFromZero: true}, withYMax(top, headroom(thr)), thr},
			{"-sweep-applied.png", bench.Figure{Title: fmt.Sprintf("Changes applied by the end of the run, write-back on %s (Figure 5b)", store), XLabel: xl,
				YLabel: "changes applied by the end of the run (%)", YFromZero: true},
				bench.LineOptions{XLog: true, XTicks: ticks, YMax: 100, LegendBottom: true, LegendRight: true}, applied},
			{"-sweep-pinned.png", bench.Figure{Title: fmt.Sprintf("Pinned memory at the end of the run, write-back on %s (Figure 5c)", store), XLabel: xl,
				YLabel: "pinned memory at the end of the run (KiB)", YFromZero: true}, withYMax(top, headroom(pinned)), pinned},
		}
		for _, p := range plots {
			if err := bench.LinesWith(path(p.suffix), p.f, p.o, p.s); err != nil {
				return err
			}
			files = append(files, path(p.suffix))
		}
	}
	files = append(files, path(".json"))
	rep.Files = files
	return bench.WriteJSON(path(".json"), rep)
}

// headroom is a top for the y axis that leaves the legend room above the
// series' highest point.
func headroom(series []bench.Series) float64 {
	top := 0.0
	for _, s := range series {
		for _, y := range s.Y {
			top = max(top, y)
		}
	}
	if top == 0 {
		return 1
	}
	return top * (1.15 + 0.08*float64(len(series)))
}

func withYMax(o bench.LineOptions, y float64) bench.LineOptions {
	o.YMax = y
	return o
}
