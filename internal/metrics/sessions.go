package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Sessions is the collectors of Design 2: sessions, their queues and the
// appliers of those queues. Label values are bounded: queue families (not
// queue keys), outcomes and reasons.
type Sessions struct {
	Begun          prometheus.Counter     // sessions_begun_total
	Commits        *prometheus.CounterVec // session_commits_total{family}
	Aborts         *prometheus.CounterVec // session_aborts_total{reason}
	Reads          *prometheus.CounterVec // session_cache_reads_total{result}
	CommitDuration prometheus.Histogram   // session_commit_duration_seconds

	PendingSessions  prometheus.Gauge // pending_sessions
	PinnedBytes      prometheus.Gauge // session_pinned_bytes
	OldestPendingAge prometheus.Gauge // oldest_pending_session_age_seconds
	StoppedQueues    prometheus.Gauge // stopped_queues (one dead letter each)

	Applied           *prometheus.CounterVec // applied_sessions_total{family}
	DuplicatesSkipped prometheus.Counter     // session_duplicates_skipped_total
	ApplyBatchSize    prometheus.Histogram   // session_apply_batch_size
	ApplyDuration     prometheus.Histogram   // session_apply_duration_seconds
	ApplyErrors       *prometheus.CounterVec // session_apply_errors_total{kind}
	ApplyRetries      prometheus.Counter     // session_apply_retries_total
	BatchSplits       prometheus.Counter     // session_batch_splits_total
	DeadLettered      *prometheus.CounterVec // session_deadletters_total{reason}
	OwnedPartitions   prometheus.Gauge       // owned_queue_partitions
	AppliedRecords    *prometheus.GaugeVec   // applied_sessions_records{store}
	Compacted         prometheus.Counter     // applied_sessions_compacted_total
	BatchTimeouts     prometheus.Counter     // session_apply_batch_timeouts_total
	BatchShrinks      prometheus.Counter     // session_apply_batch_shrinks_total

	LeaseWaits       *prometheus.CounterVec // session_lease_waits_total{outcome}
	LeaseWaitSeconds prometheus.Histogram   // session_lease_wait_seconds
}

// Label values of Sessions.LeaseWaits' outcome.
const (
	WaitGranted   = "granted"   // the lease was granted after the wait
	WaitTimeout   = "timeout"   // the wait outlasted leaseWait or the session's first lease: 409
	WaitCancelled = "cancelled" // the request ended first (the client went away, an error)
)

// Label values of Sessions.Aborts' reason.
const (
	AbortVoided   = "voided"   // a lease the session held was voided (wounded) or expired
	AbortConflict = "conflict" // a lease it asked for was refused too long
	AbortClient   = "client"   // the client aborted
)

// NewSessions creates the session collectors and registers them on reg (nil:
// unregistered).
func NewSessions(reg prometheus.Registerer) *Sessions {
	f := promauto.With(reg)
	s := &Sessions{
		Begun: f.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "sessions_begun_total",
			Help: "Sessions begun.",
		}),
		Commits: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "session_commits_total",
			Help: "Sessions committed (their changes durable in Redis), by queue family; read-only sessions count under family \"\".",
		}, []string{"family"}),
		Aborts: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "session_aborts_total",
			Help: "Sessions aborted, by reason: voided (a lease was wounded or expired), conflict (a lease was refused), client.",
		}, []string{"reason"}),
		Reads: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "session_cache_reads_total",
			Help: "Reads of mapped cache entries, by result: hit, miss, conflict, near (an immutable mapping's entry served from its copy in process).",
		}, []string{"result"}),
		CommitDuration: f.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "session_commit_duration_seconds",
			Help:    "Time to commit a session: validation, X leases, the commit script and WAIT.",
			Buckets: RequestBuckets,
		}),
		PendingSessions: f.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "pending_sessions",
			Help: "Committed sessions not yet applied to their store, over all sidecars.",
		}),
		PinnedBytes: f.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "session_pinned_bytes",
			Help: "Bytes of session objects and queue entries pinned in Redis.",
		}),
		OldestPendingAge: f.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "oldest_pending_session_age_seconds",
			Help: "Age of the oldest committed session not yet applied; 0 when none.",
		}),
		StoppedQueues: f.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "stopped_queues",
			Help: "Queues stopped by a dead-lettered session, waiting to be replayed or dropped.",
		}),
		Applied: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "applied_sessions_total",
			Help: "Sessions applied to their store, by queue family.",
		}, []string{"family"}),
		DuplicatesSkipped: f.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "session_duplicates_skipped_total",
			Help: "Sessions skipped because writeback_applied_sessions shows an earlier attempt applied them.",
		}),
		ApplyBatchSize: f.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "session_apply_batch_size",
			Help:    "Sessions applied in one store transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11), // 1 .. 1024
		}),
		ApplyDuration: f.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "session_apply_duration_seconds",
			Help:    "Time to apply one batch of sessions to the store, including its commit.",
			Buckets: ApplyBuckets,
		}),
		ApplyErrors: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "session_apply_errors_total",
			Help: "Store errors while applying sessions, by kind: transient (retried) or permanent (dead-lettered).",
		}, []string{"kind"}),
		ApplyRetries: f.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "session_apply_retries_total",
			Help: "Batches of a queue's sessions that failed with an error outside the permanent list and wait to be retried with backoff.",
		}),
		BatchSplits: f.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "session_batch_splits_total",
			Help: "Splits of a batch of a queue's sessions in two, to isolate the session that keeps failing after maxRetries failed batches.",
		}),
		DeadLettered: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "session_deadletters_total",
			Help: "Sessions dead-lettered (each stops its queue), by reason: permanent (an error of the permanent list) or retries (kept failing alone after maxRetries failed batches).",
		}, []string{"reason"}),
		OwnedPartitions: f.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "owned_queue_partitions",
			Help: "Queue partitions whose ownership lease this sidecar holds.",
		}),
		AppliedRecords: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "applied_sessions_records",
			Help: "Rows of writeback_applied_sessions, as the last compaction counted them, by store.",
		}, []string{"store"}),
		Compacted: f.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "applied_sessions_compacted_total",
			Help: "Rows of writeback_applied_sessions deleted by compaction.",
		}),
		BatchTimeouts: f.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "session_apply_batch_timeouts_total",
			Help: "Batches of sessions that outlived the batch timeout (and were retried).",
		}),
		BatchShrinks: f.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "session_apply_batch_shrinks_total",
			Help: "Times a queue's batches were halved after one outlived the batch timeout.",
		}),
		LeaseWaits: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "session_lease_waits_total",
			Help: "Lease requests that waited for an older session's lease (wound-wait), by outcome: granted, timeout (answered 409), cancelled.",
		}, []string{"outcome"}),
		LeaseWaitSeconds: f.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "session_lease_wait_seconds",
			Help:    "Time a lease request waited for an older session's lease, whatever the outcome.",
			Buckets: RequestBuckets,
		}),
	}
	for _, o := range []string{WaitGranted, WaitTimeout, WaitCancelled} {
		s.LeaseWaits.WithLabelValues(o)
	}
	s.ApplyErrors.WithLabelValues(ErrorTransient)
	s.ApplyErrors.WithLabelValues(ErrorPermanent)
	s.DeadLettered.WithLabelValues(DeadPermanent)
	s.DeadLettered.WithLabelValues(DeadRetries)
	for _, r := range []string{AbortVoided, AbortConflict, AbortClient} {
		s.Aborts.WithLabelValues(r)
	}
	return s
}
