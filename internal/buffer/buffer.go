// Package buffer owns Design 1's state in Redis: cache entries (one hash per
// document), buffered writes (one list of changes per document), the α
// partitions of the pending index, per-partition counters, I leases, dead
// letters and partition ownership leases. Every state change is one Lua
// script on one partition's hash-tagged keys. It knows nothing about the
// store.
package buffer

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/writeback/writeback/internal/groupcommit"
	"github.com/writeback/writeback/internal/rscript"
)

// Buffer is the Redis side of the write-back cache.
type Buffer struct {
	rdb    redis.UniversalClient
	prefix string
	parts  int
	lease  time.Duration // I-lease lifetime

	// Reseed recreates the partitions' sequences above every seq the stores
	// recorded as applied (bgt.Applier.Prepare). Writes call it when they
	// find a sequence missing — Redis lost it — and try again. Nil: the
	// sequences are recreated from 0, which only a fresh deployment or a
	// test may do.
	Reseed func(context.Context) error

	// Replicas is how many replicas must confirm a buffered write (WAIT)
	// within ReplicaTimeout before it counts as buffered; 0: none.
	Replicas       int
	ReplicaTimeout time.Duration
	// InSync, when set, tracks the in-sync replicas a write waits for
	// (rscript.InSync).
	InSync *rscript.InSync
	// MaxDeadLetters caps the dead letters a partition keeps: beyond it the
	// oldest are dropped and counted (Stats.DeadLettersDropped). 0: no cap.
	MaxDeadLetters int
	// Combine makes concurrent WriteBatch calls share rounds: one round
	// trip for the writes of many requests (combiner).
	Combine bool
	// Instance is this sidecar's instance id: the holder of its near-cache
	// read leases (near.go).
	Instance string

	comb *groupcommit.Group[WriteRequest, written] // the rounds Combine shares (combine.go)
	// seen holds, per partition, the highest seq this process knows was
	// given out or applied: its own writes' seqs and the floors of its last
	// rollback check. A write refuses to take a seq from a sequence below
	// it (the node went back; CheckRollback).
	seen []atomic.Int64
}

// durable runs scripts that change pinned state, waiting for Replicas.
func (b *Buffer) durable() rscript.Durable {
	return rscript.Durable{Client: b.rdb, Replicas: b.Replicas, Timeout: b.ReplicaTimeout, InSync: b.InSync}
}

// anyBuffered reports whether a call of writeScript buffered a write.
func anyBuffered(reply any) bool {
	replies, _ := reply.([]any)
	for _, r := range replies {
		if v, _ := r.([]any); len(v) > 0 {
			if code, _ := v[0].(int64); code > 0 {
				return true
			}
		}
	}
	return false
}

// saw raises what the process knows partition part handed out to seq.
func (b *Buffer) saw(part int, seq int64) {
	if part < 0 || part >= len(b.seen) {
		return
	}
	for {
		cur := b.seen[part].Load()
		if seq <= cur || b.seen[part].CompareAndSwap(cur, seq) {
			return
		}
	}
}

// New returns a Buffer over rdb whose keys start with prefix and whose
// pending index has partitions partitions.
func New(rdb redis.UniversalClient, prefix string, partitions int, leaseLifetime time.Duration) *Buffer {
	b := &Buffer{rdb: rdb, prefix: prefix, parts: partitions, lease: leaseLifetime, seen: make([]atomic.Int64, partitions)}
	b.comb = groupcommit.New(maxRounds, maxCombined, combineTimeout, b.round)
	return b
}

// Partitions is α, the number of partitions.
func (b *Buffer) Partitions() int { return b.parts }

// Client is the Redis client the buffer uses.
func (b *Buffer) Client() redis.UniversalClient { return b.rdb }

// Partition returns the partition of a document.
func (b *Buffer) Partition(coll, id string) int {
	h := crc32.NewIEEE()
	h.Write([]byte(coll))
	h.Write([]byte{0})
	h.Write([]byte(id))
	return int(h.Sum32() % uint32(b.parts))
}

// Member is a document's name in the pending index: "<collection>:<id>".
// Collection names contain no ':' so the first one separates them.
func Member(coll, id string) string { return coll + ":" + id }

// SplitMember is the inverse of Member.
func SplitMember(m string) (coll, id string) {
	i := strings.IndexByte(m, ':')
	if i < 0 {
		return m, ""
	}
	return m[:i], m[i+1:]
}

func (b *Buffer) tag(part int) string { return b.prefix + ":{" + strconv.Itoa(part) + "}:" }

func (b *Buffer) cacheKey(part int, m string) string  { return b.tag(part) + "c:" + m }
func (b *Buffer) bwKey(part int, m string) string     { return b.tag(part) + "b:" + m }
func (b *Buffer) ileaseKey(part int, m string) string { return b.tag(part) + "i:" + m }
func (b *Buffer) pendingKey(part int) string          { return b.tag(part) + "pending" }
func (b *Buffer) statsKey(part int) string            { return b.tag(part) + "stats" }
func (b *Buffer) seqKey(part int) string              { return b.tag(part) + "seq" }
func (b *Buffer) ownerKey(part int) string            { return b.tag(part) + "owner" }
func (b *Buffer) deadKey(part int) string             { return b.tag(part) + "dead" }
func (b *Buffer) membersKey(part int) string          { return b.tag(part) + "members" }
func (b *Buffer) sidecarsKey() string                 { return b.prefix + ":sidecars" }

// NewToken returns a random I-lease token.
//
// Tokens need to be unique among the leases of one document, not
// unpredictable: a fast per-goroutine generator (math/rand/v2, ChaCha8)
// serves, where crypto/rand costs a system call per request.
func NewToken() string {
	var t [16]byte
	binary.LittleEndian.PutUint64(t[:8], mrand.Uint64())
	binary.LittleEndian.PutUint64(t[8:], mrand.Uint64())
	return hex.EncodeToString(t[:])
}

const (
	// Buffered: the change is buffered with the returned sequence number.
	Buffered Outcome = iota
	// NeedBase: the document is neither cached nor pending; read it from
	// the store and call Write again with the base and the same token.
	NeedBase
	// NotFound: a patch of a document that does not exist.
	NotFound
	// Voided: a concurrent write voided the token between the two calls;
	// start over with a new token.
	Voided
	// Exists: a put with IfAbsent found the document; nothing was buffered.
	Exists
	// NeedCache: a counting patch found the document only as a buffered
	// write, not cached; read it through (which installs the entry) and
	// write again. Nothing was buffered.
	NeedCache
	// Overflow: a counting increment would overflow an integer or make a
	// float infinite; nothing was buffered.
	Overflow
)
