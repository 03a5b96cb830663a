package buffer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Stats are the exact counters of the buffer, summed over partitions.
type Stats struct {
	PendingChanges   int64
	PendingDocuments int64
	PinnedBytes      int64
	DeadLetters      int64
	OldestPending    time.Duration // age of the oldest pending change; 0 when none
	PartitionPending []int64       // pending documents per partition
}

// Stats reads the per-partition counters in one round trip (no key scans).
func (b *Buffer) Stats(ctx context.Context) (Stats, error) {
	pipe := b.rdb.Pipeline()
	hs := make([]*redis.MapStringStringCmd, b.parts)
	zs := make([]*redis.ZSliceCmd, b.parts)
	t := pipe.Time(ctx)
	for p := range b.parts {
		hs[p] = pipe.HGetAll(ctx, b.statsKey(p))
		zs[p] = pipe.ZRangeWithScores(ctx, b.pendingKey(p), 0, 0)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Stats{}, fmt.Errorf("buffer: stats: %w", err)
	}
	now := t.Val()
	st := Stats{PartitionPending: make([]int64, b.parts)}
	oldest := int64(0)
	for p := range b.parts {
		h := hs[p].Val()
		n := func(k string) int64 { v, _ := strconv.ParseInt(h[k], 10, 64); return v }
		st.PendingChanges += n("changes")
		st.PendingDocuments += n("docs")
		st.PinnedBytes += n("bytes")
		st.DeadLetters += n("dead")
		st.PartitionPending[p] = n("docs")
		if z := zs[p].Val(); len(z) > 0 {
			if ms := int64(z[0].Score); oldest == 0 || ms < oldest {
				oldest = ms
			}
		}
	}
	if oldest > 0 {
		if age := now.Sub(time.UnixMilli(oldest)); age > 0 {
			st.OldestPending = age
		}
	}
	return st, nil
}
