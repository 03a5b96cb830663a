package demorun

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/ycsb"
)

// printTable prints one aligned row per run.
func printTable(w io.Writer, rs []*runResult) {
	const row = "%-14s %9s %9s %9s %11s %11s %9s %9s %11s\n"
	fmt.Fprintf(w, row, "policy", "ops/s", "read p50", "read p99", "update p50", "update p99", "pending", "pinned", "cache hits")
	for _, r := range rs {
		if r.res == nil {
			continue
		}
		pending, pinned, hits := "-", "-", "-"
		if r.sidecar {
			pending, pinned = fmt.Sprint(r.pending), bytesString(r.pinned)
			if r.hits+r.misses > 0 {
				hits = fmt.Sprintf("%.1f%%", 100*r.hits/(r.hits+r.misses))
			}
		}
		fmt.Fprintf(w, row, r.policy, fmt.Sprintf("%.0f", r.res.Throughput()),
			ms(r.res.Reads.Percentile(50)), ms(r.res.Reads.Percentile(99)),
			ms(r.res.Updates.Percentile(50)), ms(r.res.Updates.Percentile(99)),
			pending, pinned, hits)
	}
}

// printRatios prints what write-back buys over the database alone and
// over write-through, and the flush time, for the runs that happened.
func printRatios(w io.Writer, rs []*runResult) {
	by := map[string]*runResult{}
	for _, r := range rs {
		if r.res != nil {
			by[r.policy] = r
		}
	}
	wb := by[bench.WriteBack]
	if wb == nil {
		return
	}
	fmt.Fprintln(w)
	if db := by[bench.Database]; db != nil {
		fmt.Fprintf(w, "write-back / database       throughput  %5.2f×  (target ≥ 3×)\n", ratio(wb.res.Throughput(), db.res.Throughput()))
	}
	if wt := by[bench.WriteThrough]; wt != nil {
		fmt.Fprintf(w, "write-back / write-through  throughput  %5.2f×  (target ≥ 2×)\n", ratio(wb.res.Throughput(), wt.res.Throughput()))
	}
	if db := by[bench.Database]; db != nil {
		fmt.Fprintf(w, "write-back / database       update p50  %5.2f   (target ≤ 0.33)\n",
			ratio(float64(wb.res.Updates.Percentile(50)), float64(db.res.Updates.Percentile(50))))
	}
	fmt.Fprintf(w, "flush after write-back: %d pending changes drained in %v\n", wb.pending, wb.flush.Round(time.Millisecond))
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// ms formats a latency in milliseconds with three significant digits.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v < 10:
		return fmt.Sprintf("%.2fms", v)
	case v < 100:
		return fmt.Sprintf("%.1fms", v)
	}
	return fmt.Sprintf("%.0fms", v)
}

func bytesString(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%dB", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2fGiB", float64(n)/(1<<30))
}

// The JSON report.
type (
	jsonReport struct {
		Date      time.Time          `json:"date"`
		CPUs      int                `json:"cpus"`
		GoVersion string             `json:"goVersion"`
		Config    jsonConfig         `json:"config"`
		Runs      []jsonRun          `json:"runs"`
		Ratios    map[string]float64 `json:"ratios,omitempty"`
		Failed    bool               `json:"failed"`
	}
	jsonConfig struct {
		Store        string  `json:"store"`
		Records      int64   `json:"records"`
		Fields       int     `json:"fields"`
		FieldSize    int     `json:"fieldSize"`
		Clients      int     `json:"clients"`
		Distribution string  `json:"distribution"`
		ReadRatio    float64 `json:"readRatio"`
		WarmupSec    float64 `json:"warmupSeconds"`
		DurationSec  float64 `json:"durationSeconds"`
	}
	jsonRun struct {
		Policy         string      `json:"policy"`
		LoadSeconds    float64     `json:"loadSeconds"`
		WindowSeconds  float64     `json:"windowSeconds"`
		Ops            int64       `json:"ops"`
		OpsPerSecond   float64     `json:"opsPerSecond"`
		Read           jsonLatency `json:"read"`
		Update         jsonLatency `json:"update"`
		Errors         int64       `json:"errors"`
		ReadChecks     int64       `json:"readChecks"`
		StaleReads     int64       `json:"staleReads"`
		Pending        *int64      `json:"pending,omitempty"`
		PinnedBytes    *int64      `json:"pinnedBytes,omitempty"`
		CacheHits      *float64    `json:"cacheHits,omitempty"`
		CacheMisses    *float64    `json:"cacheMisses,omitempty"`
		FlushSeconds   *float64    `json:"flushSeconds,omitempty"`
		FlushApplied   *int64      `json:"flushApplied,omitempty"`
		VerifiedFields int         `json:"verifiedFields"`
	}
	jsonLatency struct {
		Count  int     `json:"count"`
		MeanMs float64 `json:"meanMs"`
		P50Ms  float64 `json:"p50Ms"`
		P90Ms  float64 `json:"p90Ms"`
		P99Ms  float64 `json:"p99Ms"`
		P999Ms float64 `json:"p999Ms"`
		MaxMs  float64 `json:"maxMs"`
	}
)

func latencyJSON(l ycsb.Latencies) jsonLatency {
	f := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return jsonLatency{Count: len(l), MeanMs: f(l.Mean()), P50Ms: f(l.Percentile(50)), P90Ms: f(l.Percentile(90)),
		P99Ms: f(l.Percentile(99)), P999Ms: f(l.Percentile(99.9)), MaxMs: f(l.Max())}
}

func writeJSON(o *options, rs []*runResult, failed bool) error {
	rep := jsonReport{
		Date: time.Now().UTC(), CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Failed: failed,
		Config: jsonConfig{Store: o.store, Records: o.records, Fields: o.fields, FieldSize: o.fieldSize, Clients: o.clients,
			Distribution: o.distribution, ReadRatio: o.readRatio, WarmupSec: o.warmup.Seconds(), DurationSec: o.duration.Seconds()},
		Ratios: map[string]float64{},
	}
	by := map[string]*runResult{}
	for _, r := range rs {
		if r.res == nil {
			continue
		}
		by[r.policy] = r
		jr := jsonRun{Policy: r.policy, LoadSeconds: r.load.Seconds(), WindowSeconds: r.res.Window.Seconds(), Ops: r.res.Ops,
			OpsPerSecond: r.res.Throughput(), Read: latencyJSON(r.res.Reads), Update: latencyJSON(r.res.Updates),
			Errors: r.res.Errors, ReadChecks: r.res.ReadChecks, StaleReads: r.res.StaleReads, VerifiedFields: r.checked}
		if r.sidecar {
			pending, pinned, flush := r.pending, r.pinned, r.flush.Seconds()
			applied := r.applied
			jr.Pending, jr.PinnedBytes, jr.FlushSeconds, jr.FlushApplied = &pending, &pinned, &flush, &applied
			hits, misses := r.hits, r.misses
			jr.CacheHits, jr.CacheMisses = &hits, &misses
		}
		rep.Runs = append(rep.Runs, jr)
	}
	if wb := by[bench.WriteBack]; wb != nil {
		if db := by[bench.Database]; db != nil {
			rep.Ratios["writeBackOverDatabaseThroughput"] = ratio(wb.res.Throughput(), db.res.Throughput())
			rep.Ratios["writeBackOverDatabaseUpdateP50"] = ratio(float64(wb.res.Updates.Percentile(50)), float64(db.res.Updates.Percentile(50)))
		}
		if wt := by[bench.WriteThrough]; wt != nil {
			rep.Ratios["writeBackOverWriteThroughThroughput"] = ratio(wb.res.Throughput(), wt.res.Throughput())
		}
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(o.jsonOut, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", o.jsonOut, err)
	}
	return nil
}
