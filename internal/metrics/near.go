package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Label values of NearMetrics.Leases' outcome.
const (
	LeaseGranted   = "granted"     // a read took a lease and installed its copy
	LeaseExtended  = "extended"    // a renewal extended the lease of the copy held, reading nothing again
	LeaseHot       = "hot"         // written within the hot window: served from Redis, no lease
	LeaseRevoking  = "revoking"    // a writer waits for the holders: no lease
	LeaseRefused   = "refused"     // granted, but a revocation or a local write came first: no copy kept
	LeaseUncached  = "uncached"    // a miss in Redis: the value came from the store (its fill leased like a hit)
	LeaseUnconfirm = "unconfirmed" // granted, but the replicas did not confirm it: no copy kept
)

// NearMetrics are the near cache's collectors (writeback_nearcache_…),
// per collection.
type NearMetrics struct {
	Hits        *prometheus.CounterVec   // nearcache_hits_total{collection}
	Misses      *prometheus.CounterVec   // nearcache_misses_total{collection}
	Evictions   *prometheus.CounterVec   // nearcache_evictions_total{collection}
	Bytes       *prometheus.GaugeVec     // nearcache_bytes{collection}
	Leases      *prometheus.CounterVec   // nearcache_leases_total{collection,outcome}
	RevokesSent *prometheus.CounterVec   // nearcache_revocations_sent_total{collection}
	RevokesRecv *prometheus.CounterVec   // nearcache_revocations_received_total{collection}
	WriteWait   *prometheus.HistogramVec // nearcache_write_wait_seconds{collection}
}

func newNear(f promauto.Factory) *NearMetrics {
	opts := func(name, help string) prometheus.CounterOpts {
		return prometheus.CounterOpts{Namespace: Namespace, Subsystem: "nearcache", Name: name, Help: help}
	}
	coll := []string{"collection"}
	return &NearMetrics{
		Hits:      f.NewCounterVec(opts("hits_total", "Document reads answered from the near cache (no Redis round trip), by collection."), coll),
		Misses:    f.NewCounterVec(opts("misses_total", "Document reads of near-cached collections that went to Redis, by collection."), coll),
		Evictions: f.NewCounterVec(opts("evictions_total", "Near-cache entries dropped for room, by collection."), coll),
		Bytes: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Subsystem: "nearcache", Name: "bytes",
			Help: "Estimated bytes held by the near cache, by collection.",
		}, coll),
		Leases:      f.NewCounterVec(opts("leases_total", "Outcomes of near-cache lease requests, by collection and outcome (granted, extended, hot, revoking, refused, uncached, unconfirmed)."), []string{"collection", "outcome"}),
		RevokesSent: f.NewCounterVec(opts("revocations_sent_total", "Writes that found other sidecars holding leases and sent them revocations, by collection."), coll),
		RevokesRecv: f.NewCounterVec(opts("revocations_received_total", "Revocations this sidecar received and answered, by collection."), coll),
		WriteWait: f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "nearcache", Name: "write_wait_seconds",
			Help:    "Time writes waited for near-cache lease holders to let go, by collection.",
			Buckets: RequestBuckets,
		}, coll),
	}
}

// initNear creates a collection's near-cache series with value 0.
func (n *NearMetrics) initNear(name string) {
	n.Hits.WithLabelValues(name)
	n.Misses.WithLabelValues(name)
	n.Evictions.WithLabelValues(name)
	n.RevokesSent.WithLabelValues(name)
	n.RevokesRecv.WithLabelValues(name)
}

// InitNear creates the near-cache series of a collection that has a near
// cache.
func (m *Metrics) InitNear(name string) { m.Near.initNear(name) }
