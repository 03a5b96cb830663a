package tpccrun

import (
	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/tpcc"
)

// judge checks each requirement against the runs: the median over the
// rounds of the pair's tpmC ratio.
func judge(reqs []bench.Requirement, runs []tpcc.Outcome) []bench.Verdict {
	out := make([]bench.Verdict, 0, len(reqs))
	for _, r := range reqs {
		out = append(out, r.Judge(roundRatios(runs, r.A, r.B)))
	}
	return out
}
