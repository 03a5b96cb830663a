package rscript

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// MaxLag is how long a replica may go without acknowledging the primary's
// stream and still count as in sync (INFO replication's lag, in seconds).
const MaxLag = 1

// InSync tracks the primary's in-sync replicas, the ones a write waits for,
// as Kafka's in-sync replica set: connected, online, and acknowledged within
// MaxLag. A write waits for every one of them and needs at least the
// required minimum (Durable.Replicas); with fewer in sync it is refused at
// once, before it changes anything, instead of waiting out WAIT's timeout.
// Refresh keeps it current; until the first Refresh (and in a Cluster,
// where each primary has its own) it is unknown and writes wait for the
// minimum alone.
type InSync struct {
	n atomic.Int64 // in-sync replicas; -1: unknown

	// OnRefuse, when set before use, is called for every refused write
	// (a metric).
	OnRefuse func()
}

// NewInSync returns an InSync that knows nothing yet.
func NewInSync() *InSync {
	s := &InSync{}
	s.n.Store(-1)
	return s
}

// Count returns the in-sync replicas as last refreshed (-1: unknown).
func (s *InSync) Count() int { return int(s.n.Load()) }

// Refresh reads the primary's replicas (INFO replication) and returns how
// many are in sync. In a Cluster it leaves the count unknown.
func (s *InSync) Refresh(ctx context.Context, rdb redis.UniversalClient) (int, error) {
	if _, cluster := rdb.(*redis.ClusterClient); cluster {
		s.n.Store(-1)
		return -1, nil
	}
	info, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return s.Count(), fmt.Errorf("rscript: reading the primary's replicas: %w", err)
	}
	n := inSyncReplicas(info)
	s.n.Store(int64(n))
	return n, nil
}

// inSyncReplicas counts the replicas of an INFO replication reply that are
// online with a lag of at most MaxLag.
func inSyncReplicas(info string) int {
	n := 0
	for line := range strings.SplitSeq(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(k, "slave") || strings.HasPrefix(k, "slave_") {
			continue
		}
		fields := map[string]string{}
		for f := range strings.SplitSeq(v, ",") {
			if a, b, ok := strings.Cut(f, "="); ok {
				fields[a] = b
			}
		}
		lag, err := strconv.Atoi(fields["lag"])
		if fields["state"] == "online" && err == nil && lag <= MaxLag {
			n++
		}
	}
	return n
}

// ShortfallError says a write was refused before it changed anything:
// fewer replicas are in sync than it requires. Retrying is safe.
type ShortfallError struct{ InSync, Want int }

func (e *ShortfallError) Error() string {
	return fmt.Sprintf("rscript: only %d of the %d required Redis replicas are in sync", e.InSync, e.Want)
}

// await returns how many replicas a write waits for, or the shortfall
// that refuses it.
func (d Durable) await() (int, error) {
	if d.InSync == nil {
		return d.Replicas, nil
	}
	n := d.InSync.Count()
	switch {
	case n < 0:
		return d.Replicas, nil
	case n < d.Replicas:
		if d.InSync.OnRefuse != nil {
			d.InSync.OnRefuse()
		}
		return 0, &ShortfallError{InSync: n, Want: d.Replicas}
	}
	return n, nil
}
