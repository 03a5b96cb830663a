package ycsbrun

import (
	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/ycsb"
)

// workload is one of the paper's Table 3: the fractions of reads and scans;
// the other operations are updates.
type workload struct {
	name       string
	read, scan float64
}

var workloadList = []workload{
	{"A", 0.5, 0},
	{"B", 0.95, 0},
	{"C", 1, 0},
	{"S", 0, 0.95},
}

var workloadNames = []string{"A", "B", "C", "S"}

func workloadByName(name string) workload {
	for _, w := range workloadList {
		if w.name == name {
			return w
		}
	}
	panic("ycsb: unknown workload " + name) // parseFlags allows only known ones
}

// Reasons a policy does not run a workload or on a store.
const (
	respNoScan  = "the Redis-protocol front door has no scan command (docs/api.md, Redis protocol)"
	respNoMongo = "the Redis-protocol front door serves SQL collections only (docs/api.md, MongoDB collections)"
)

// skipReason says why policy p cannot run workload w on store, or "".
func skipReason(store, p string, w workload) string {
	if p != bench.WriteBackRESP {
		return ""
	}
	if store == ycsb.MongoDB {
		return respNoMongo
	}
	if w.scan > 0 {
		return respNoScan
	}
	return ""
}
