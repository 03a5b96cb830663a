package rscript

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
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
// Refresh keeps it current; until the first Refresh it is unknown and
// writes wait for the minimum alone.
//
// In a Redis Cluster every primary has replicas of its own: Refresh counts
// them per primary, and a write is held to the count of the primary that
// owns its key, so one primary short of replicas refuses only the writes
// to its slots. A primary the last Refresh did not see (a failover, a
// resharding since) is unknown until the next one: WAIT alone decides.
type InSync struct {
	n atomic.Int64 // in-sync replicas (the least of any primary in a Cluster); -1: unknown
	// nodes holds a Cluster's count per primary address (nil elsewhere).
	nodes atomic.Pointer[map[string]int]

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

// Count returns the in-sync replicas as last refreshed (-1: unknown); in
// a Cluster, the fewest any primary has, the primary a shortfall refuses
// writes on first.
func (s *InSync) Count() int { return int(s.n.Load()) }

// CountOf returns the in-sync replicas of the Cluster primary at addr as
// last refreshed (-1: unknown).
func (s *InSync) CountOf(addr string) int {
	if m := s.nodes.Load(); m != nil {
		if n, ok := (*m)[addr]; ok {
			return n
		}
	}
	return -1
}

// Refresh reads the primary's replicas (INFO replication) and returns how
// many are in sync; in a Cluster it reads every primary's and returns the
// fewest. A primary that cannot be read keeps its last count (WAIT still
// guards its writes), and the error is returned.
func (s *InSync) Refresh(ctx context.Context, rdb redis.UniversalClient) (int, error) {
	if cc, cluster := rdb.(*redis.ClusterClient); cluster {
		return s.refreshCluster(ctx, cc)
	}
	info, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return s.Count(), fmt.Errorf("rscript: reading the primary's replicas: %w", err)
	}
	n := inSyncReplicas(info)
	s.n.Store(int64(n))
	return n, nil
}

// refreshCluster is Refresh on every primary of a Cluster.
func (s *InSync) refreshCluster(ctx context.Context, cc *redis.ClusterClient) (int, error) {
	var mu sync.Mutex
	counts := map[string]int{}
	var failed error
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		addr := node.Options().Addr
		info, err := node.Info(ctx, "replication").Result()
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed = fmt.Errorf("rscript: reading the replicas of primary %s: %w", addr, err)
			if n := s.CountOf(addr); n >= 0 {
				counts[addr] = n
			}
			return nil // the other primaries are still counted
		}
		counts[addr] = inSyncReplicas(info)
		return nil
	})
	if err != nil { // no slot map: the last counts stand
		return s.Count(), fmt.Errorf("rscript: listing the Cluster's primaries: %w", err)
	}
	least := -1
	for _, n := range counts {
		if least < 0 || n < least {
			least = n
		}
	}
	s.nodes.Store(&counts)
	s.n.Store(int64(least))
	return least, failed
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
// that refuses it, given the in-sync replicas of the primary that takes it
// (-1: unknown).
func (d Durable) await(inSync int) (int, error) {
	switch {
	case d.InSync == nil || inSync < 0:
		return d.Replicas, nil
	case inSync < d.Replicas:
		if d.InSync.OnRefuse != nil {
			d.InSync.OnRefuse()
		}
		return 0, &ShortfallError{InSync: inSync, Want: d.Replicas}
	}
	return inSync, nil
}
