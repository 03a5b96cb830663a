package buffer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// PendingDocOverhead is what Redis spends on a pending document beyond its
// changes' bytes: the buffered write's key (dict entry, object, name,
// quicklist) and its member in the pending index (skiplist node, dict entry,
// name). Measured on Redis 7 with 20-byte names: about 320 bytes for the
// first change, under one byte for each further one.
const PendingDocOverhead = 320

// Stats are the exact counters of the buffer, summed over partitions.
type Stats struct {
	PendingChanges   int64
	PendingDocuments int64
	// PinnedBytes is what buffered writes and dead letters hold in Redis:
	// the changes' bytes, PendingDocOverhead per pending document, and the
	// dead-letter lists as Redis measures them (MEMORY USAGE).
	PinnedBytes int64
	// ChangeBytes is the buffered changes' own bytes, exactly.
	ChangeBytes        int64
	DeadLetters        int64
	DeadLettersDropped int64         // dropped over writeback.maxDeadLetters, ever
	OldestPending      time.Duration // age of the oldest pending change; 0 when none
	PartitionPending   []int64       // pending documents per partition
}

// Stats reads the per-partition counters in one round trip (no key scans).
func (b *Buffer) Stats(ctx context.Context) (Stats, error) {
	pipe := b.rdb.Pipeline()
	hs := make([]*redis.MapStringStringCmd, b.parts)
	zs := make([]*redis.ZSliceCmd, b.parts)
	ds := make([]*redis.IntCmd, b.parts)
	ns := make([]*redis.IntCmd, b.parts)
	t := pipe.Time(ctx)
	for p := range b.parts {
		hs[p] = pipe.HGetAll(ctx, b.statsKey(p))
		zs[p] = pipe.ZRangeWithScores(ctx, b.pendingKey(p), 0, 0)
		ns[p] = pipe.ZCard(ctx, b.pendingKey(p)) // the pending documents
		ds[p] = pipe.MemoryUsage(ctx, b.deadKey(p))
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
		docs := ns[p].Val()
		st.PendingDocuments += docs
		st.ChangeBytes += n("bytes")
		st.PinnedBytes += n("bytes") + docs*PendingDocOverhead + ds[p].Val()
		st.DeadLetters += n("dead")
		st.DeadLettersDropped += n("deaddropped")
		st.PartitionPending[p] = docs
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
