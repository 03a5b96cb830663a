package ycsbrun

import (
	"fmt"
	"strings"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/ycsb"
)

// Run is what one run measured, as the JSON has it.
type Run struct {
	Store    string `json:"store"`
	Policy   string `json:"policy"`
	Workload string `json:"workload"`
	// Round is the comparison's round that ran it (--rounds), 0 with one.
	Round int `json:"round,omitempty"`
	// Workers is the sidecar's writeback.workers (appliers); 0 for the
	// database alone.
	Workers int `json:"workers,omitempty"`
	Variant
	// CacheEntriesAtStart counts the collection's entries in Redis when
	// the run's warm-up (cold runs: its measured window) started: 0 for a
	// cold run, every record for a warm one. Sidecar runs only.
	CacheEntriesAtStart int64 `json:"cache_entries_at_start"`
	// Skipped says why the policy cannot run the workload; nothing else is
	// set then.
	Skipped string `json:"skipped,omitempty"`

	Throughput float64       `json:"ops_per_s"`
	Ops        int64         `json:"ops"`
	WindowS    float64       `json:"window_s"`
	Read       bench.Latency `json:"read"`
	Update     bench.Latency `json:"update"`
	Scan       bench.Latency `json:"scan"`
	LoadS      float64       `json:"load_s"`
	WarmS      float64       `json:"warm_s"`

	Errors       int64    `json:"errors"`
	ErrorSamples []string `json:"error_samples,omitempty"`
	ReadChecks   int64    `json:"read_checks"`
	StaleReads   int64    `json:"stale_reads"`
	StaleSamples []string `json:"stale_samples,omitempty"`
	// Verified is the number of updated fields compared with the database
	// after the run (and the flush); Mismatches the first that differed.
	Verified   int      `json:"verified_fields"`
	Mismatches []string `json:"mismatches,omitempty"`
	Mismatched int      `json:"mismatched_fields"`

	// Sidecar runs: the buffer when the measured window closed (before the
	// flush), the changes applied by then (writeback_applied_changes_total
	// since the sidecar started), applied / (applied + pending) in percent,
	// the cache hit ratios of the measured window (Redis's and the near
	// cache's), and the flush.
	Sidecar           bool           `json:"sidecar"`
	PendingChanges    int64          `json:"pending_changes_at_end"`
	PendingDocuments  int64          `json:"pending_documents_at_end"`
	PinnedBytes       int64          `json:"pinned_bytes_at_end"`
	AppliedChanges    float64        `json:"applied_changes_at_end"`
	AppliedPercent    float64        `json:"applied_percent_at_end"`
	CacheHitPercent   float64        `json:"cache_hit_percent"`
	NearHitPercent    float64        `json:"near_hit_percent,omitempty"` // reads served from the near cache, of those that looked (none: no near cache)
	FlushS            float64        `json:"flush_s"`
	FlushApplied      int64          `json:"flush_applied"`
	PinnedOverTime    []bench.Sample `json:"pinned_bytes_over_time,omitempty"` // t_s since the workload started (warm-up included)
	WarmupS           float64        `json:"warmup_s"`
	ApplierBatches    uint64         `json:"applier_batches"`
	ApplierBatchDocs  float64        `json:"applier_docs_per_batch"`
	ApplierBatchMeanS float64        `json:"applier_batch_mean_s"`
	// Redis per buffered write over the measured window (issue 18's "Redis
	// time per buffered write"): the changes the sidecar buffered, the
	// time Redis spent in script calls per change (INFO commandstats: wall
	// time inside Redis, the scripts' own commands included; every
	// script's — writes, the appliers' trims, lease renewals) and Redis's
	// CPU time per change (the whole process, its system calls included).
	BufferedChanges    float64 `json:"buffered_changes,omitempty"`
	RedisScriptUsPerWr float64 `json:"redis_script_us_per_buffered_write,omitempty"`
	RedisCPUUsPerWr    float64 `json:"redis_cpu_us_per_buffered_write,omitempty"`
	// CPUPerOp is the processor time per operation of the measured window,
	// in µs, by process (bench.CPU's names: "self" is this process — the
	// clients, and the sidecar and its appliers, which run in it); on two
	// CPUs a saturated run's throughput is set by their sum.
	CPUPerOp map[string]float64 `json:"cpu_us_per_op,omitempty"`
}

// Variant is what sets a run apart besides its policy and workload.
type Variant struct {
	Distribution string `json:"distribution"` // uniform | zipfian
	// Cache is the sidecar's cache when the run started: cold (its entries
	// dropped, no warm-up), warm (every record read first), or none for
	// the database alone.
	Cache          string `json:"cache"`
	StoreLatencyMs int64  `json:"store_latency_ms"` // added each way by the proxy; 0: direct
	Threads        int    `json:"threads"`
}

// label is the variant in a table or a progress line, e.g. "zipfian cold
// +1ms 16t".
func (v Variant) label() string {
	s := v.Distribution + " " + v.Cache
	if v.StoreLatencyMs > 0 {
		s += fmt.Sprintf(" +%dms", v.StoreLatencyMs)
	}
	return s + fmt.Sprintf(" %dt", v.Threads)
}

// ok reports whether the run verified: no failed operation, no stale read,
// no mismatch.
func (r *Run) ok() bool {
	return r.Skipped != "" || (r.Errors == 0 && r.StaleReads == 0 && r.Mismatched == 0)
}

// problem describes why the run did not verify, in one sentence.
func (r *Run) problem() string {
	var parts []string
	if r.Errors > 0 {
		parts = append(parts, fmt.Sprintf("%d operations failed (%s)", r.Errors, strings.Join(r.ErrorSamples, "; ")))
	}
	if r.StaleReads > 0 {
		parts = append(parts, fmt.Sprintf("%d reads returned a value older than the client's last acknowledged write (%s)", r.StaleReads, strings.Join(r.StaleSamples, "; ")))
	}
	if r.Mismatched > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d updated fields differ in the database after the flush (%s)", r.Mismatched, r.Verified, strings.Join(r.Mismatches, "; ")))
	}
	return strings.Join(parts, "; ")
}

// fill copies the workload's result into the run.
func (r *Run) fill(res *ycsb.Result) {
	r.Throughput, r.Ops, r.WindowS = res.Throughput(), res.Ops, res.Window.Seconds()
	r.Read, r.Update, r.Scan = latency(res.Reads), latency(res.Updates), latency(res.Scans)
	r.Errors, r.ErrorSamples = res.Errors, res.ErrorSamples
	r.ReadChecks, r.StaleReads, r.StaleSamples = res.ReadChecks, res.StaleReads, res.StaleSamples
}

// policyLabel is the run's policy, with its round when there are several
// ("write-back-resp #2").
func (r *Run) policyLabel() string {
	if r.Round > 0 {
		return fmt.Sprintf("%s #%d", r.Policy, r.Round)
	}
	return r.Policy
}

// setCPU sets CPUPerOp from the CPU time of the measured window.
func (r *Run) setCPU(cpu bench.CPU) {
	if r.Ops == 0 || len(cpu) == 0 {
		return
	}
	r.CPUPerOp = map[string]float64{}
	for p, d := range cpu {
		r.CPUPerOp[p] = float64(d.Microseconds()) / float64(r.Ops)
	}
}

func latency(l ycsb.Latencies) bench.Latency {
	return bench.Latency{
		Count: int64(len(l)), P50: bench.Ms(l.Percentile(50)), P90: bench.Ms(l.Percentile(90)),
		P95: bench.Ms(l.Percentile(95)), P99: bench.Ms(l.Percentile(99)), Mean: bench.Ms(l.Mean()),
	}
}
