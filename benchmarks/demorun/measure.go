package demorun

import (
	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/sidecar"
)

// measurement is what happens when a run's measured window opens and
// closes: profiles and traces start and stop, the sidecar's cache counters
// are read.
type measurement struct {
	tag                   string
	logf                  func(string, ...any)
	sc                    *sidecar.Sidecar
	cpuPath, tracePath    string
	stops                 []func() // of the profiles and traces started
	hits0, misses0        float64
	hits, misses          float64 // in the window
	batchDocs0, applySec0 float64
	batches0, applies0    uint64
	batchDocs, applySec   float64 // applier batches in the window: documents and seconds
	batches               uint64
}

func (m *measurement) start() {
	if m.sc != nil {
		m.hits0, _, _ = m.sc.Metric("writeback_cache_hits_total")
		m.misses0, _, _ = m.sc.Metric("writeback_cache_misses_total")
		m.batchDocs0, m.batches0, _ = m.sc.Metric("writeback_apply_batch_size")
		m.applySec0, m.applies0, _ = m.sc.Metric("writeback_apply_duration_seconds")
	}
	if m.cpuPath != "" {
		m.record("CPU profile", m.cpuPath, bench.StartCPUProfile)
	}
	if m.tracePath != "" {
		m.record("trace", m.tracePath, bench.StartTrace)
	}
}

// record starts a profile or trace (what) to path; stop ends it. One that
// cannot start is logged, and the run goes on without it.
func (m *measurement) record(what, path string, start func(string) (func(), error)) {
	stop, err := start(path)
	if err != nil {
		m.logf("%s %s: %v", m.tag, what, err)
		return
	}
	m.stops = append(m.stops, func() {
		stop()
		m.logf("%s wrote %s %s", m.tag, what, path)
	})
}

func (m *measurement) stop() {
	for _, stop := range m.stops {
		stop()
	}
	m.stops = nil
	if m.sc != nil {
		h, _, _ := m.sc.Metric("writeback_cache_hits_total")
		ms, _, _ := m.sc.Metric("writeback_cache_misses_total")
		m.hits, m.misses = h-m.hits0, ms-m.misses0
		docs, n, _ := m.sc.Metric("writeback_apply_batch_size")
		sec, _, _ := m.sc.Metric("writeback_apply_duration_seconds")
		m.batchDocs, m.batches, m.applySec = docs-m.batchDocs0, n-m.batches0, sec-m.applySec0
	}
}

// profilePath names the profile of one policy's run: "cpu.prof" becomes
// "cpu-write-back.prof" when several runs are profiled.
func profilePath(path, policy string, several bool) string {
	if !several {
		return path
	}
	return bench.NamedPath(path, policy)
}
