package metrics

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// allNames is every metric New registers, without the namespace.
var allNames = []string{
	"requests_total", "request_duration_seconds",
	"cache_hits_total", "cache_misses_total", "buffered_changes_total", "applied_changes_total",
	"scan_cache_hits_total", "scan_cache_misses_total",
	"pending_changes", "pending_documents", "pinned_bytes", "oldest_pending_age_seconds", "dead_letters",
	"owned_partitions", "sidecars", "apply_batch_size", "apply_duration_seconds", "apply_errors_total",
	"apply_retries_total", "batch_splits_total", "deadletters_total",
	"duplicates_skipped_total", "redis_rollbacks_total", "redis_replicas_in_sync", "redis_eviction_unsafe", "dead_letters_dropped", "replica_shortfalls_total", "converted_writes_total", "lease_conflicts_total", "store_up", "write_through_fallback", "build_info",
	"apply_batch_timeouts_total", "apply_batch_shrinks_total", "redis_up", "redis_replication_failures_total",
	"redis_shared_calls_total", "redis_shared_round_trips_total",
}

// touch gives every vector one series so that Gather reports it.
func touch(m *Metrics) {
	m.Requests.WithLabelValues("get", "200").Inc()
	m.RequestDuration.WithLabelValues("get").Observe(0.001)
	m.InitCollection("usertable")
	m.LeaseConflicts.WithLabelValues("x_on_x").Inc()
	m.StoreUp.WithLabelValues("pg").Set(1)
}

func TestNewRegistersEverything(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	touch(m)

	mfs, err := reg.Gather()
	require.NoError(t, err)
	var got []string
	for _, mf := range mfs {
		got = append(got, strings.TrimPrefix(mf.GetName(), Namespace+"_"))
		assert.NotEmpty(t, mf.GetHelp(), "%s has no help", mf.GetName())
	}
	assert.ElementsMatch(t, allNames, got)
}

func TestLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	touch(New(reg))
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

func TestNewDoesNotTouchTheDefaultRegistry(t *testing.T) {
	before, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	touch(New(prometheus.NewRegistry()))
	touch(New(nil))
	after, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	assert.Equal(t, len(before), len(after))
}

func TestNewTwiceOnOneRegistryPanics(t *testing.T) {
	reg := prometheus.NewRegistry()
	New(reg)
	assert.Panics(t, func() { New(reg) })
}

func TestCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	m.Requests.WithLabelValues("put", "200").Add(3)
	m.Requests.WithLabelValues("get", "404").Inc()
	m.ApplyErrors.WithLabelValues(ErrorTransient).Add(2)
	m.DuplicatesSkipped.Inc()
	m.InitCollection("usertable")
	m.WriteThroughFallback.WithLabelValues("usertable").Set(1)

	const want = `
# HELP writeback_requests_total HTTP API requests answered, by operation and status code.
# TYPE writeback_requests_total counter
writeback_requests_total{code="200",op="put"} 3
writeback_requests_total{code="404",op="get"} 1
# HELP writeback_apply_errors_total Store errors while applying, by kind: transient (retried) or permanent (dead-lettered).
# TYPE writeback_apply_errors_total counter
writeback_apply_errors_total{kind="permanent"} 0
writeback_apply_errors_total{kind="transient"} 2
# HELP writeback_duplicates_skipped_total Changes skipped because the store's applied records show an earlier attempt applied them.
# TYPE writeback_duplicates_skipped_total counter
writeback_duplicates_skipped_total 1
# HELP writeback_cache_hits_total Document reads answered from the cache, by collection.
# TYPE writeback_cache_hits_total counter
writeback_cache_hits_total{collection="usertable"} 0
# HELP writeback_write_through_fallback 1 while a collection's writes fall back to write-through because pinned memory is over its limit, else 0.
# TYPE writeback_write_through_fallback gauge
writeback_write_through_fallback{collection="usertable"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"writeback_requests_total", "writeback_apply_errors_total", "writeback_duplicates_skipped_total",
		"writeback_cache_hits_total", "writeback_write_through_fallback"))
}

func TestGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	m.PendingChanges.Set(120)
	m.PendingDocuments.Set(14)
	m.PinnedBytes.Set(4096)
	m.OldestPendingAge.Set(1.5)
	m.DeadLetters.Set(2)
	m.OwnedPartitions.Set(32)
	m.Sidecars.Set(2)

	for name, want := range map[string]float64{
		"pending_changes": 120, "pending_documents": 14, "pinned_bytes": 4096,
		"oldest_pending_age_seconds": 1.5, "dead_letters": 2, "owned_partitions": 32, "sidecars": 2,
	} {
		t.Run(name, func(t *testing.T) {
			mfs, err := reg.Gather()
			require.NoError(t, err)
			for _, mf := range mfs {
				if mf.GetName() == Namespace+"_"+name {
					require.Len(t, mf.GetMetric(), 1)
					assert.Equal(t, want, mf.GetMetric()[0].GetGauge().GetValue())
					return
				}
			}
			t.Fatalf("%s_%s not gathered", Namespace, name)
		})
	}
}

func TestHistograms(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	m.ApplyBatchSize.Observe(1)
	m.ApplyBatchSize.Observe(100)
	m.ApplyBatchSize.Observe(4096)
	m.ApplyDuration.Observe(0.02)
	m.RequestDuration.WithLabelValues("get").Observe(0.00004)
	m.RequestDuration.WithLabelValues("put").Observe(4)

	assert.Equal(t, 2, testutil.CollectAndCount(m.RequestDuration, "writeback_request_duration_seconds"))
	assert.Equal(t, 1, testutil.CollectAndCount(m.ApplyBatchSize))

	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		switch mf.GetName() {
		case "writeback_apply_batch_size":
			h := mf.GetMetric()[0].GetHistogram()
			b := h.GetBucket()
			require.Len(t, b, 13)
			assert.Equal(t, 1.0, b[0].GetUpperBound())
			assert.Equal(t, 4096.0, b[len(b)-1].GetUpperBound())
			assert.Equal(t, uint64(3), h.GetSampleCount())
			assert.Equal(t, uint64(3), b[len(b)-1].GetCumulativeCount(), "4096 falls in the last bucket")
		case "writeback_request_duration_seconds":
			for _, s := range mf.GetMetric() {
				b := s.GetHistogram().GetBucket()
				assert.Equal(t, 50e-6, b[0].GetUpperBound())
				assert.Equal(t, 5.0, b[len(b)-1].GetUpperBound())
			}
		}
	}
}

func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	assert.Equal(t, 1, testutil.CollectAndCount(m.BuildInfo))

	m.SetBuildInfo("v1.2.3", "abc123")
	want := `
# HELP writeback_build_info Always 1; the labels describe the running build.
# TYPE writeback_build_info gauge
writeback_build_info{commit="abc123",goversion="` + runtime.Version() + `",version="v1.2.3"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "writeback_build_info"))
}

// The retries, splits and dead letters counters exist from the start, both
// reasons included, so that a rate over them is 0, not absent.
func TestStuckCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	s := NewSessions(reg)
	m.ApplyRetries.Add(3)
	m.BatchSplits.Inc()
	m.DeadLettered.WithLabelValues(DeadRetries).Inc()
	s.DeadLettered.WithLabelValues(DeadPermanent).Inc()
	want := `
# HELP writeback_apply_retries_total Batches of buffered writes that failed with an error outside the permanent list and wait to be retried with backoff.
# TYPE writeback_apply_retries_total counter
writeback_apply_retries_total 3
# HELP writeback_batch_splits_total Splits of a batch of buffered writes in two, to isolate what keeps failing after maxRetries failed rounds.
# TYPE writeback_batch_splits_total counter
writeback_batch_splits_total 1
# HELP writeback_deadletters_total Buffered changes moved to the dead letters, by reason: permanent (an error of the permanent list) or retries (kept failing alone after maxRetries failed rounds).
# TYPE writeback_deadletters_total counter
writeback_deadletters_total{reason="permanent"} 0
writeback_deadletters_total{reason="retries"} 1
# HELP writeback_session_deadletters_total Sessions dead-lettered (each stops its queue), by reason: permanent (an error of the permanent list) or retries (kept failing alone after maxRetries failed batches).
# TYPE writeback_session_deadletters_total counter
writeback_session_deadletters_total{reason="permanent"} 1
writeback_session_deadletters_total{reason="retries"} 0
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want),
		"writeback_apply_retries_total", "writeback_batch_splits_total", "writeback_deadletters_total", "writeback_session_deadletters_total"))
}
