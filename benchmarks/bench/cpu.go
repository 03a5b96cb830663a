package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CPU is the processor time the processes of a run used, by name:
// "self" (this process: the clients, and the sidecar and its appliers
// when they run in it), "postgres" (every server process, the backends
// that exited included), "mariadbd" and "redis-server". It is read from
// Linux's /proc; elsewhere it is empty.
type CPU map[string]time.Duration

// cpuProcs are the processes CPU reads besides this one.
var cpuProcs = []string{"postgres", "mariadbd", "redis-server"}

// TakeCPU reads the CPU time used so far. Per-run figures are the
// difference of two readings (Sub): on a machine that runs other work
// with the same servers, they count that work too.
func TakeCPU() CPU {
	out := CPU{}
	tick := 100.0 // USER_HZ on every Linux platform Go runs on
	if t, ok := procTimes("/proc/self/stat", false); ok {
		out["self"] = time.Duration(t / tick * float64(time.Second))
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		comm, err := os.ReadFile(d + "/comm")
		if err != nil {
			continue
		}
		name := strings.TrimSpace(string(comm))
		for _, p := range cpuProcs {
			if name != p {
				continue
			}
			// A server's exited children (PostgreSQL's backends) count in
			// its children's times once reaped.
			if t, ok := procTimes(d+"/stat", true); ok {
				out[p] += time.Duration(t / tick * float64(time.Second))
			}
		}
	}
	return out
}

// CPUColumns heads a table's per-process CPU columns, in the order of
// CPUCells.
var CPUColumns = []string{"this process", "postgres", "mariadbd", "redis-server"}

// CPUCells returns a run's CPU figures by process (CPU's names, "self"
// first) as table cells: their sum, then one per CPUColumns.
func CPUCells(u map[string]float64) []any {
	var sum float64
	for _, v := range u {
		sum += v
	}
	cells := []any{sum, u["self"]}
	for _, p := range cpuProcs {
		cells = append(cells, u[p])
	}
	return cells
}

// Sub returns c - earlier, process by process.
func (c CPU) Sub(earlier CPU) CPU {
	out := CPU{}
	for k, v := range c {
		out[k] = v - earlier[k]
	}
	return out
}

// procTimes reads utime+stime (and cutime+cstime with children) of a
// /proc/<pid>/stat, in clock ticks.
func procTimes(path string, children bool) (float64, bool) {
	// utime is field 14, stime 15, cutime 16, cstime 17.
	f := statFields(path)
	if len(f) < 15 {
		return 0, false
	}
	n := 2 // utime, stime
	if children {
		n = 4
	}
	var sum float64
	for _, s := range f[11 : 11+n] {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return 0, false
		}
		sum += v
	}
	return sum, true
}

// statFields returns the fields of a /proc/<pid>/stat after the command
// name, which may hold spaces, in parentheses: f[0] is field 3 (state),
// f[n] field n+3. nil when it cannot be read.
func statFields(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}
