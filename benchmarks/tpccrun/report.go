package tpccrun

import (
	"fmt"
	"io"
	"path/filepath"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/tpcc"
)

// report is the JSON file.
type report struct {
	Env   bench.Environment `json:"environment"`
	Store string            `json:"store"`
	// StoreLatencyMs is the delay a latency proxy added each way between
	// the runs and the store (0: loopback).
	StoreLatencyMs int64          `json:"store_latency_ms"`
	Warehouses     int            `json:"warehouses"`
	Terminals      int            `json:"terminals_per_warehouse"`
	Items          int            `json:"items"`
	Customers      int            `json:"customers_per_district"`
	Warmup         string         `json:"warmup"`
	Duration       string         `json:"duration"`
	Deviations     []string       `json:"deviations"`
	Policies       []tpcc.Outcome `json:"policies"`
	// Ratios are each pair's tpmC ratio, the median of the rounds' when
	// there are several (RatioRounds: each round's, in order).
	Ratios      map[string]string    `json:"ratios"`
	Rounds      int                  `json:"rounds"`
	RatioRounds map[string][]float64 `json:"ratio_rounds,omitempty"`
	// Required is --require's clauses as the run judged them.
	Required    []bench.Verdict `json:"required,omitempty"`
	Consistency string          `json:"consistency"`
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
		verdict := "ok (1-5, 7, 10, work)"
		if !r.Check.OK() {
			verdict = fmt.Sprintf("FAILED (%d)", len(r.Check.Violations))
		}
		t.Add(label(r), r.TpmC, r.TxPerSec, retries, rollbacks, fmt.Sprintf("%.1fs", r.LoadSeconds), flush, pinned, verdict)
	}
	fmt.Fprintln(w, t.String())
	var l bench.Table
	l.Header = []string{"policy", "transaction", "count", "p50 ms", "p90 ms", "p99 ms", "retries"}
	for _, r := range rs {
		for _, k := range tpcc.Kinds {
			s := r.Kinds[k.String()]
			l.Add(label(r), k.String(), s.Committed+s.Rollbacks, s.Latency.P50, s.Latency.P90, s.Latency.P99, s.Retries)
		}
	}
	fmt.Fprintln(w, l.String())
	// Where a saturated machine's processor time goes: the CPU of each
	// process over the measured run, per transaction (the servers' figures
	// count whatever else used them meanwhile).
	var c bench.Table
	c.Header = append([]string{"policy", "CPU ms/tx"}, bench.CPUColumns...)
	for _, r := range rs {
		if len(r.CPUPerTx) > 0 {
			c.Add(append([]any{label(r)}, bench.CPUCells(r.CPUPerTx)...)...)
		}
	}
	if len(c.Rows) > 0 {
		fmt.Fprintln(w, c.String())
	}
}

func plot(o *options, rs []tpcc.Outcome) ([]string, error) {
	prefix := filepath.Join(o.out, o.name())
	var paths []string
	var tpm []bench.Series
	for _, r := range rs {
		tpm = append(tpm, bench.Series{Name: label(r), Y: []float64{r.TpmC}})
	}
	title := fmt.Sprintf("TPC-C on %s, %d warehouses × %d terminals, %s measured", o.store, o.warehouses, o.terminals, o.duration)
	if o.latency > 0 {
		title += fmt.Sprintf(", store %v away each way", o.latency)
	}
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
		s := bench.Series{Name: label(r)}
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
		s := bench.Series{Name: label(r)}
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

// name is the stem of the output files: tpcc-<store>, with -<latency>
// when the store was behind a latency proxy (tpcc-mysql-1ms).
func (o *options) name() string {
	if o.latency > 0 {
		return fmt.Sprintf("tpcc-%s-%v", o.store, o.latency)
	}
	return "tpcc-" + o.store
}
