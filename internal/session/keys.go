package session

import (
	"hash/crc32"
	"strconv"
	"strings"

	"github.com/writeback/writeback/internal/lease"
)

// Keys is the Redis layout of Design 2. Everything a commit or an applier
// touches in one script shares the hash tag of a queue partition, {q<n>},
// so that each script runs on one Redis Cluster slot:
//
//	<prefix>:{q<n>}:queues        zset   queues with pending sessions → ms of the oldest
//	<prefix>:{q<n>}:q:<queue>     list   "<seq>|<ms>|<session id>", commit order (pinned)
//	<prefix>:{q<n>}:n:<queue>     string the queue's sequence (pinned)
//	<prefix>:{q<n>}:o:<session>   string the session object: statements, affected keys (pinned)
//	<prefix>:{q<n>}:m:<key>       string seq of the last pending session affecting the key (pinned)
//	<prefix>:{q<n>}:c:<key>       string the cache entry: a JSON value (TTL)
//	<prefix>:{q<n>}:l:<key>       hash   the key's leases (package lease)
//	<prefix>:{q<n>}:w:<key>       zset   sessions waiting for a lease on the key, FIFO (TTL)
//	<prefix>:{q<n>}:stats         hash   sessions, bytes, dead
//	<prefix>:{q<n>}:dead          hash   stopped queue → its dead letter (pinned)
//	<prefix>:{q<n>}:owner         string the sidecar applying the partition's queues (TTL)
//	<prefix>:{s<id>}:r            hash   a session before commit: keys read → lease mode (TTL)
//
// n is the queue's partition: crc32(queue) mod the partitions. A cache key
// lives in its queue's partition (the queue its mapping names), or, when it
// depends on no queue, in the partition of its own name.
type Keys struct {
	prefix string
	parts  int
}

// NewKeys returns the layout under prefix with parts partitions.
func NewKeys(prefix string, parts int) Keys { return Keys{prefix: prefix, parts: parts} }

// Partitions is the number of queue partitions.
func (k Keys) Partitions() int { return k.parts }

// Partition returns the partition of a queue name (or of a key that
// depends on no queue).
func (k Keys) Partition(name string) int {
	return int(crc32.ChecksumIEEE([]byte(name)) % uint32(k.parts))
}

func (k Keys) tag(p int) string { return k.prefix + ":{q" + strconv.Itoa(p) + "}:" }

// Registry is partition p's index of queues with pending sessions.
func (k Keys) Registry(p int) string { return k.tag(p) + "queues" }

// Queue is the list of a queue's pending sessions.
func (k Keys) Queue(p int, queue string) string { return k.tag(p) + "q:" + queue }

// Counter is a queue's sequence.
func (k Keys) Counter(p int, queue string) string { return k.tag(p) + "n:" + queue }

// Object is a committed session's object.
func (k Keys) Object(p int, id string) string { return k.tag(p) + "o:" + id }

// Mapping is the pending-session mapping of a cache key.
func (k Keys) Mapping(p int, key string) string { return k.tag(p) + "m:" + key }

// Entry is a cache key's entry.
func (k Keys) Entry(p int, key string) string { return k.tag(p) + "c:" + key }

// Lease is a cache key's lease record.
func (k Keys) Lease(p int, key string) string { return k.tag(p) + "l:" + key }

// Wait is the queue of sessions waiting for a lease on a cache key.
func (k Keys) Wait(p int, key string) string { return k.tag(p) + "w:" + key }

// LeaseKey is a cache key's lease record, entry and wait queue, for
// package lease.
func (k Keys) LeaseKey(p int, key string) lease.Key {
	return lease.Key{Lease: k.Lease(p, key), Entry: k.Entry(p, key), Wait: k.Wait(p, key)}
}

// Stats is partition p's counters.
func (k Keys) Stats(p int) string { return k.tag(p) + "stats" }

// Dead is partition p's stopped queues and their dead letters.
func (k Keys) Dead(p int) string { return k.tag(p) + "dead" }

// Owner is partition p's ownership lease.
func (k Keys) Owner(p int) string { return k.tag(p) + "owner" }

// Record is a session's record before commit.
func (k Keys) Record(id string) string { return k.prefix + ":{s" + id + "}:r" }

// entryText is a queue list entry: "<seq>|<ms>|<session id>".
func entryText(seq, ms int64, id string) string {
	return strconv.FormatInt(seq, 10) + "|" + strconv.FormatInt(ms, 10) + "|" + id
}

// parseEntry decodes a queue list entry.
func parseEntry(e string) (seq, ms int64, id string, ok bool) {
	a, rest, ok1 := strings.Cut(e, "|")
	b, id, ok2 := strings.Cut(rest, "|")
	if !ok1 || !ok2 {
		return 0, 0, "", false
	}
	seq, err1 := strconv.ParseInt(a, 10, 64)
	ms, err2 := strconv.ParseInt(b, 10, 64)
	return seq, ms, id, err1 == nil && err2 == nil && id != ""
}
