package bench

import (
	"runtime/metrics"
	"strconv"
)

// Mem is what this process's memory management has done so far: the
// bytes its goroutines allocated, the collections the runtime ran, and
// the minor page faults the kernel served it (a page the runtime had
// returned to the system, or never used, touched again). Per-run figures
// are the difference of two readings (Sub).
type Mem struct {
	Alloc  uint64 // bytes allocated on the heap
	GCs    uint64 // completed collections
	Faults uint64 // minor page faults
}

// TakeMem reads Mem now.
func TakeMem() Mem {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	m := Mem{Alloc: s[0].Value.Uint64(), GCs: s[1].Value.Uint64()}
	if f := statFields("/proc/self/stat"); len(f) > 7 {
		m.Faults, _ = strconv.ParseUint(f[7], 10, 64) // minflt, field 10
	}
	return m
}

// Sub returns m - earlier.
func (m Mem) Sub(earlier Mem) Mem {
	return Mem{Alloc: m.Alloc - earlier.Alloc, GCs: m.GCs - earlier.GCs, Faults: m.Faults - earlier.Faults}
}

// Add returns m + o.
func (m Mem) Add(o Mem) Mem {
	return Mem{Alloc: m.Alloc + o.Alloc, GCs: m.GCs + o.GCs, Faults: m.Faults + o.Faults}
}
