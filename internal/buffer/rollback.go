package buffer

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Floors are the highest seqs the stores recorded as applied: per
// partition where a store keeps its records by partition, and over all of
// them (Global). AnyPart is the highest seq of the stores that cannot say
// which partition a record came from (MongoDB's stamps).
type Floors struct {
	Part    map[int]int64
	AnyPart int64
	Global  int64
}

// Rollback is what CheckRollback found on one Redis node.
type Rollback struct {
	// RolledBack reports that a partition's sequence was below what the
	// store already applied from it (or missing while the node held other
	// keys of the buffer): the node came back with older data.
	RolledBack bool
	// Partitions is the number of partitions whose sequence lives on the
	// node; Raised the number whose sequence was raised.
	Partitions, Raised int
	// Dropped is the number of cache entries and I leases deleted.
	Dropped int64
}

// CheckRollback makes the sequences that live on node c safe to hand out
// again after a restart or a failover, as one step of the node's start:
//
//   - A sequence below the highest seq the store recorded for its partition
//     (or, for stores without partitions, all sequences below what was
//     applied), or below a seq this process saw the partition give out,
//     means the node came back from an older snapshot or a lagging
//     replica. Seqs handed out from it could be at or below an applied
//     record (writeScript's clock makes that unlikely, not impossible), and
//     the appliers would skip the new, acknowledged change as a duplicate.
//     Its cache entries are older than the store, too: every cache entry
//     and I lease of the buffer on the node is deleted, so that the next
//     read fills from the store (buffered writes stay: their changes at or
//     below a record are skipped as the duplicates they are), and so is
//     every membership token, so that the next scans miss.
//   - Then every sequence on the node is raised to at least f.Global, as at
//     start-up (a document may have moved partitions since its record),
//     and to what this process saw it give out; and writes refuse a
//     sequence below the store's record from then on (writeScript's floor),
//     so that a rollback that keeps the connections is caught at the next
//     write of a partition the store applied from.
//
// Entries are deleted before sequences are raised: another sidecar that
// checks the node meanwhile still sees the low sequence and deletes them
// too, so no sidecar writes on a stale entry once its own check is done.
//
// c is one node: a plain client, a Sentinel-managed primary, or the
// connection a Cluster node was just dialled on; partitions whose keys live
// on another node (MOVED) are left to that node's check.
func (b *Buffer) CheckRollback(ctx context.Context, c redis.Cmdable, f Floors) (Rollback, error) {
	var r Rollback
	var mine []int
	var seqs []int64
	var top int64 = -1
	for p := range b.parts {
		v, err := c.Get(ctx, b.seqKey(p)).Int64()
		switch {
		case isMoved(err):
			continue
		case errors.Is(err, redis.Nil):
			v = -1
		case err != nil:
			return r, fmt.Errorf("buffer: reading sequence of partition %d: %w", p, err)
		}
		mine = append(mine, p)
		seqs = append(seqs, v)
		top = max(top, v)
		if fl, ok := f.Part[p]; ok && v >= 0 && v < fl {
			r.RolledBack = true
		}
		// Below a seq this process saw it give out: the node went back
		// even if nothing it lost was applied yet.
		if v >= 0 && v < b.seen[p].Load() {
			r.RolledBack = true
		}
	}
	r.Partitions = len(mine)
	if len(mine) == 0 {
		return r, nil
	}
	if f.AnyPart > 0 && top < f.AnyPart && top >= 0 {
		r.RolledBack = true
	}
	// No sequence at all (a new or emptied node, or one that lost them):
	// entries found next to none are as suspect as the sequences.
	if r.RolledBack || top < 0 {
		n, err := b.dropCache(ctx, c)
		if err != nil {
			return r, err
		}
		r.Dropped = n
		r.RolledBack = r.RolledBack || n > 0
		// Buffered puts and deletes may be lost, and the membership tokens
		// may be ones an older snapshot held: scans cached under them may
		// list documents that no longer exist, or miss some that do.
		if err := b.dropMembers(ctx, c, mine); err != nil {
			return r, err
		}
	}
	for i, p := range mine {
		floor := max(f.Global, b.seen[p].Load())
		if err := raiseSeqScript.Run(ctx, c, []string{b.seqKey(p)}, floor).Err(); err != nil {
			return r, fmt.Errorf("buffer: raising sequence of partition %d: %w", p, err)
		}
		if seqs[i] < floor {
			r.Raised++
		}
		// From now on a write refuses a sequence below what the store
		// applied from the partition (writeScript's floor).
		if fl, ok := f.Part[p]; ok {
			b.saw(p, fl)
		}
	}
	return r, nil
}

// dropCache deletes every cache entry and I lease of the buffer on node c
// and returns how many it deleted.
func (b *Buffer) dropCache(ctx context.Context, c redis.Cmdable) (int64, error) {
	var dropped int64
	for _, match := range []string{CachePattern(b.prefix, ""), keyPattern(b.prefix, "i:")} {
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, match, 1000).Result()
			if err != nil {
				return dropped, fmt.Errorf("buffer: scanning for stale cache entries: %w", err)
			}
			if len(keys) > 0 {
				// Keys of different slots: one DEL each (UNLINK frees
				// large entries off the main thread).
				pipe := c.Pipeline()
				for _, k := range keys {
					pipe.Unlink(ctx, k)
				}
				cmds, err := pipe.Exec(ctx)
				if err != nil {
					return dropped, fmt.Errorf("buffer: deleting stale cache entries: %w", err)
				}
				for _, cmd := range cmds {
					if n, err := cmd.(*redis.IntCmd).Result(); err == nil {
						dropped += n
					}
				}
			}
			cursor = next
			if cursor == 0 {
				break
			}
		}
	}
	return dropped, nil
}

// dropMembers deletes the membership tokens of partitions parts on node c
// (MembershipTokens), so that every scan cached under them misses.
func (b *Buffer) dropMembers(ctx context.Context, c redis.Cmdable, parts []int) error {
	pipe := c.Pipeline()
	for _, p := range parts {
		pipe.Del(ctx, b.membersKey(p))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("buffer: deleting membership tokens: %w", err)
	}
	return nil
}

// isMoved reports a Cluster redirection: the key lives on another node.
func isMoved(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.HasPrefix(s, "MOVED ") || strings.HasPrefix(s, "ASK ")
}

// CachePattern is the SCAN pattern of the cache entries under prefix: of
// collection coll, or of every collection when coll is "".
func CachePattern(prefix, coll string) string {
	if coll == "" {
		return keyPattern(prefix, "c:")
	}
	return keyPattern(prefix, "c:"+globEscape(coll)+":")
}

// keyPattern is the SCAN pattern of the keys of a kind ("c:", "i:" …) in
// every partition (see Buffer.tag).
func keyPattern(prefix, kind string) string { return globEscape(prefix) + ":{*}:" + kind + "*" }

// globEscape escapes the characters SCAN's MATCH treats as pattern.
func globEscape(s string) string {
	var sb strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			sb.WriteByte('\\')
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// ForEachNode calls fn with every Redis node the buffer's keys live on: the
// client itself, or each primary of a Cluster.
func (b *Buffer) ForEachNode(ctx context.Context, fn func(context.Context, redis.Cmdable) error) error {
	if cc, ok := b.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return fn(ctx, node) })
	}
	return fn(ctx, b.rdb)
}
