package sidecar

import (
	"context"
	"fmt"

	"github.com/writeback/writeback/internal/buffer"
)

// entryPattern matches the Redis keys of the collection's cache entries.
func (s *Sidecar) entryPattern() string { return buffer.CachePattern(s.Prefix, s.coll) }

// CacheEntries counts the collection's cache entries in Redis.
func (s *Sidecar) CacheEntries(ctx context.Context) (int64, error) {
	var n int64
	iter := s.rdb.Scan(ctx, 0, s.entryPattern(), 1000).Iterator()
	for iter.Next(ctx) {
		n++
	}
	return n, iter.Err()
}

// DropCache deletes the collection's cache entries from Redis and returns
// how many there were: the next read of every document misses and fills
// its entry from the store. Call it only when nothing is pending (after a
// Flush) and no client is running: an entry with buffered changes is the
// only place they are visible before they are applied.
func (s *Sidecar) DropCache(ctx context.Context) (int64, error) {
	st, err := s.Client.Status(ctx)
	if err != nil {
		return 0, err
	}
	if st.Pending > 0 {
		return 0, fmt.Errorf("dropping the cache of %s: %d changes still pending; flush first", s.coll, st.Pending)
	}
	return s.unlinkMatching(ctx, s.entryPattern())
}
