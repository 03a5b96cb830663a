// Package metrics owns the sidecar's Prometheus collectors, all under the
// namespace "writeback". It registers them on the Registerer it is given
// (never the global default registry) and does nothing else: the packages
// that do the work update the exported fields. Label values must stay
// bounded: collections, stores, operations, codes and kinds — never a key or
// a document id.
package metrics

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Namespace prefixes every metric name.
const Namespace = "writeback"

// Label values of ApplyErrors' kind.
const (
	ErrorTransient = "transient" // retried with backoff
	ErrorPermanent = "permanent" // the change went to the dead-letter list
)

// Label values of the dead letters counters' reason.
const (
	// DeadPermanent: the store rejected the change (session) with an error
	// of the permanent list (constraint, type, range …).
	DeadPermanent = "permanent"
	// DeadRetries: its batch failed maxRetries times in a row with other
	// errors, and the change (session) alone kept failing while the store
	// was up (a trigger's RAISE/SIGNAL, an index row too large …).
	DeadRetries = "retries"
)

// Metrics is every collector of one sidecar.
type Metrics struct {
	// HTTP API.
	Requests        *prometheus.CounterVec   // requests_total{op,code}
	RequestDuration *prometheus.HistogramVec // request_duration_seconds{op}

	// Near cache, per collection.
	Near *NearMetrics

	// Cache and buffer, per collection.
	CacheHits       *prometheus.CounterVec // cache_hits_total{collection}
	CacheMisses     *prometheus.CounterVec // cache_misses_total{collection}
	BufferedChanges *prometheus.CounterVec // buffered_changes_total{collection}
	AppliedChanges  *prometheus.CounterVec // applied_changes_total{collection}

	// Scan cache, per collection.
	ScanCacheHits   *prometheus.CounterVec // scan_cache_hits_total{collection}
	ScanCacheMisses *prometheus.CounterVec // scan_cache_misses_total{collection}

	// The buffer as a whole.
	PendingChanges   prometheus.Gauge // pending_changes
	PendingDocuments prometheus.Gauge // pending_documents
	PinnedBytes      prometheus.Gauge // pinned_bytes
	OldestPendingAge prometheus.Gauge // oldest_pending_age_seconds
	DeadLetters      prometheus.Gauge // dead_letters
	// DeadLettersDropped counts, from Redis's own counters, the dead
	// letters dropped over writeback.maxDeadLetters.
	DeadLettersDropped prometheus.Gauge // dead_letters_dropped

	// Appliers.
	OwnedPartitions   prometheus.Gauge       // owned_partitions
	Sidecars          prometheus.Gauge       // sidecars
	ApplyBatchSize    prometheus.Histogram   // apply_batch_size
	ApplyDuration     prometheus.Histogram   // apply_duration_seconds
	ApplyErrors       *prometheus.CounterVec // apply_errors_total{kind}
	ApplyRetries      prometheus.Counter     // apply_retries_total
	BatchSplits       prometheus.Counter     // batch_splits_total
	DeadLettered      *prometheus.CounterVec // deadletters_total{reason}
	DuplicatesSkipped prometheus.Counter     // duplicates_skipped_total
	RedisRollbacks    prometheus.Counter     // redis_rollbacks_total
	ReplicasInSync    prometheus.Gauge       // redis_replicas_in_sync
	EvictionUnsafe    prometheus.Gauge       // redis_eviction_unsafe
	ReplicaShortfalls prometheus.Counter     // replica_shortfalls_total
	ConvertedWrites   prometheus.Counter     // converted_writes_total
	LeaseConflicts    *prometheus.CounterVec // lease_conflicts_total{kind}
	StoreUp           *prometheus.GaugeVec   // store_up{store}
	// BatchTimeouts counts apply rounds that outlived the batch timeout;
	// BatchShrinks those after which the partition's rounds got smaller.
	BatchTimeouts prometheus.Counter // apply_batch_timeouts_total
	BatchShrinks  prometheus.Counter // apply_batch_shrinks_total

	// Redis.
	RedisUp             prometheus.Gauge   // redis_up
	ReplicationFailures prometheus.Counter // redis_replication_failures_total
	// SharedCalls counts the requests' commands and pipelines sent in
	// shared round trips, SharedRounds those round trips (package
	// pipeshare).
	SharedCalls  prometheus.Counter // redis_shared_calls_total
	SharedRounds prometheus.Counter // redis_shared_round_trips_total

	// Overload.
	WriteThroughFallback *prometheus.GaugeVec // write_through_fallback{collection}

	// BuildInfo is 1, labelled with the running build; see SetBuildInfo.
	BuildInfo *prometheus.GaugeVec // build_info{version,commit,goversion}
}

// RequestBuckets are the request latency buckets: 50µs to 5s, about 2.5×
// apart, so that both a cache hit and a write that waits for replicas and a
// store fallback land in a meaningful bucket.
var RequestBuckets = []float64{
	.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5,
}

// ApplyBuckets are the apply latency buckets: one store round trip of a
// batch, 500µs to 30s.
var ApplyBuckets = []float64{
	.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30,
}

// New creates the collectors and registers them on reg; it panics if one is
// already registered there (a programming error, caught at start). A nil reg
// creates them unregistered. BuildInfo starts out describing the running
// binary as runtime/debug.ReadBuildInfo sees it.
func New(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		Near: newNear(f),
		Requests: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "requests_total",
			Help: "HTTP API requests answered, by operation and status code.",
		}, []string{"op", "code"}),
		RequestDuration: f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "request_duration_seconds",
			Help:    "Time from receiving an HTTP API request to writing its response, by operation.",
			Buckets: RequestBuckets,
		}, []string{"op"}),

		CacheHits: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "cache_hits_total",
			Help: "Document reads answered from the cache, by collection.",
		}, []string{"collection"}),
		CacheMisses: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "cache_misses_total",
			Help: "Document reads that had to query the store, by collection.",
		}, []string{"collection"}),
		BufferedChanges: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "buffered_changes_total",
			Help: "Changes acknowledged after being buffered (pinned) in Redis, by collection.",
		}, []string{"collection"}),
		AppliedChanges: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "applied_changes_total",
			Help: "Buffered changes committed to the store by the appliers, by collection.",
		}, []string{"collection"}),
		ScanCacheHits: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "scan_cache", Name: "hits_total",
			Help: "Scans answered from a cached list of ids (no store query, no pending-index read), by collection.",
		}, []string{"collection"}),
		ScanCacheMisses: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "scan_cache", Name: "misses_total",
			Help: "Scans of collections with a scan cache that queried the store, by collection.",
		}, []string{"collection"}),

		PendingChanges: f.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "pending_changes",
			Help: "Buffered changes not yet applied to the store, over all sidecars.",
		}),
		PendingDocuments: f.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "pending_documents",
			Help: "Documents with at least one buffered change not yet applied, over all sidecars.",
		}),
		PinnedBytes: f.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "pinned_bytes",
			Help: "Bytes of buffered writes pinned in Redis (never evicted until applied).",
		}),
		OldestPendingAge: f.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "oldest_pending_age_seconds",
			Help: "Age of the oldest change still waiting to be applied; 0 when nothing is pending.",
		}),
		DeadLetters: f.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "dead_letters",
			Help: "Changes the store rejected permanently, waiting in the dead-letter list to be replayed or dropped.",
		}),
		DeadLettersDropped: f.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "dead_letters_dropped",
			Help: "Dead letters dropped, oldest first, because a partition held writeback.maxDeadLetters (counted in Redis, over the deployment's life).",
		}),

		OwnedPartitions: f.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "owned_partitions",
			Help: "Partitions of the pending index whose ownership lease this sidecar holds.",
		}),
		Sidecars: f.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "sidecars",
			Help: "Live sidecars sharing the partitions, as this sidecar last saw them.",
		}),
		ApplyBatchSize: f.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "apply_batch_size",
			Help:    "Documents applied to the store in one round trip.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 13), // 1 .. 4096
		}),
		ApplyDuration: f.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "apply_duration_seconds",
			Help:    "Time to apply one batch to the store, including its commit.",
			Buckets: ApplyBuckets,
		}),
		ApplyErrors: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "apply_errors_total",
			Help: "Store errors while applying, by kind: transient (retried) or permanent (dead-lettered).",
		}, []string{"kind"}),
		ApplyRetries: f.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "apply_retries_total",
			Help: "Batches of buffered writes that failed with an error outside the permanent list and wait to be retried with backoff.",
		}),
		BatchSplits: f.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "batch_splits_total",
			Help: "Splits of a batch of buffered writes in two, to isolate what keeps failing after maxRetries failed rounds.",
		}),
		DeadLettered: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "deadletters_total",
			Help: "Buffered changes moved to the dead letters, by reason: permanent (an error of the permanent list) or retries (kept failing alone after maxRetries failed rounds).",
		}, []string{"reason"}),
		DuplicatesSkipped: f.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "duplicates_skipped_total",
			Help: "Changes skipped because the store's applied records show an earlier attempt applied them.",
		}),
		RedisRollbacks: f.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "redis_rollbacks_total",
			Help: "Redis nodes found holding older data than the stores applied (restarted from an older snapshot, failed over to a lagging replica): their cache entries were dropped and sequences raised before any write.",
		}),
		ReplicasInSync: f.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "redis_replicas_in_sync",
			Help: "Replicas of the Redis primary that are online and acknowledged within 1 s, the ones a write waits for (only with redis.replicas > 0; in a Redis Cluster, the fewest of any primary).",
		}),
		EvictionUnsafe: f.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "redis_eviction_unsafe",
			Help: "1 while a Redis primary's maxmemory-policy (allkeys-*) could evict buffered writes: write-back collections and queues write through meanwhile.",
		}),
		ReplicaShortfalls: f.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "replica_shortfalls_total",
			Help: "Writes and commits refused before changing anything because fewer replicas were in sync than redis.replicas requires.",
		}),
		ConvertedWrites: f.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "converted_writes_total",
			Help: "Buffered writes whose changes an applier replaced by compacted, idempotent equivalents before applying them (MongoDB: the paper's Algorithm 2).",
		}),
		LeaseConflicts: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "lease_conflicts_total",
			Help: "Lease requests refused or voided by a conflicting lease, by kind of conflict.",
		}, []string{"kind"}),
		StoreUp: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "store_up",
			Help: "1 when the store answered its last check, 0 when it did not.",
		}, []string{"store"}),

		BatchTimeouts: f.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "apply_batch_timeouts_total",
			Help: "Apply rounds that outlived the batch timeout (and were retried).",
		}),
		BatchShrinks: f.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "apply_batch_shrinks_total",
			Help: "Times a partition's apply rounds were halved after one outlived the batch timeout.",
		}),
		RedisUp: f.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "redis_up",
			Help: "1 when Redis answered the sidecar's last check, 0 when it did not.",
		}),
		ReplicationFailures: f.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "redis_replication_failures_total",
			Help: "Writes answered as not acknowledged because fewer than redis.replicas replicas confirmed them in time.",
		}),
		SharedCalls: f.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "redis_shared_calls_total",
			Help: "Redis commands and pipelines of concurrent requests sent together in shared round trips (redis.shareRoundTrips).",
		}),
		SharedRounds: f.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "redis_shared_round_trips_total",
			Help: "Round trips that carried the shared calls: redis_shared_calls_total over this is the calls per round trip.",
		}),

		WriteThroughFallback: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "write_through_fallback",
			Help: "1 while a collection's writes fall back to write-through because pinned memory is over its limit, else 0.",
		}, []string{"collection"}),

		BuildInfo: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "build_info",
			Help: "Always 1; the labels describe the running build.",
		}, []string{"version", "commit", "goversion"}),
	}
	// Both kinds exist from the start, so a rate over them is 0, not absent.
	m.ApplyErrors.WithLabelValues(ErrorTransient)
	m.ApplyErrors.WithLabelValues(ErrorPermanent)
	m.DeadLettered.WithLabelValues(DeadPermanent)
	m.DeadLettered.WithLabelValues(DeadRetries)

	version, commit := "dev", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			version = v
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				commit = s.Value
			}
		}
	}
	m.SetBuildInfo(version, commit)
	return m
}

// SetBuildInfo replaces the labels of build_info. Whoever creates the
// Metrics and knows the version and commit set at link time (internal/cli's
// Version and Commit) calls it; New's guess from the build info stands
// otherwise.
func (m *Metrics) SetBuildInfo(version, commit string) {
	m.BuildInfo.Reset()
	m.BuildInfo.WithLabelValues(version, commit, runtime.Version()).Set(1)
}

// InitCollection creates the per-collection series with value 0, so that
// dashboards and rates see every configured collection before its first
// request.
func (m *Metrics) InitCollection(name string) {
	m.CacheHits.WithLabelValues(name)
	m.CacheMisses.WithLabelValues(name)
	m.BufferedChanges.WithLabelValues(name)
	m.AppliedChanges.WithLabelValues(name)
	m.ScanCacheHits.WithLabelValues(name)
	m.ScanCacheMisses.WithLabelValues(name)
	m.WriteThroughFallback.WithLabelValues(name).Set(0)
}
