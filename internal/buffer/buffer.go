// Package buffer owns Design 1's state in Redis: cache entries (one hash per
// document), buffered writes (one list of changes per document), the α
// partitions of the pending index, per-partition counters, I leases, dead
// letters and partition ownership leases. Every state change is one Lua
// script on one partition's hash-tagged keys. It knows nothing about the
// store.
package buffer

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/change"
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
}

// ReplicationError says a write was buffered on the primary but fewer
// replicas than required confirmed it in time: it is not acknowledged (it
// may still be applied).
type ReplicationError struct{ Got, Want int }

func (e *ReplicationError) Error() string {
	return fmt.Sprintf("buffer: the write reached %d of the %d required Redis replicas in time", e.Got, e.Want)
}

// runWrite runs one call of writeScript and returns its replies, one per
// write. When replicas are required and a write was buffered, it waits for
// them on the same connection — a pipeline is one connection, and WAIT
// counts the replicas that have that connection's writes — and returns in
// replErr what WAIT said, which concerns the buffered writes only.
func (b *Buffer) runWrite(ctx context.Context, wc *writeCall) (replies []any, replErr, err error) {
	if b.Replicas <= 0 {
		replies, err = writeScript.Run(ctx, b.rdb, wc.keys, wc.args...).Slice()
		return replies, nil, err
	}
	// WAIT must run on the connection, hence the node, that took the
	// writes: in a cluster, the primary of the keys' slot.
	var node redis.Cmdable = b.rdb
	if cc, ok := b.rdb.(*redis.ClusterClient); ok {
		c, err := cc.MasterForKey(ctx, wc.keys[0])
		if err != nil {
			return nil, nil, err
		}
		node = c
	}
	for attempt := 0; ; attempt++ {
		pipe := node.Pipeline()
		ev := writeScript.EvalSha(ctx, pipe, wc.keys, wc.args...)
		wait := pipe.Do(ctx, "WAIT", b.Replicas, b.ReplicaTimeout.Milliseconds())
		_, _ = pipe.Exec(ctx) // each command carries its own error
		v, err := ev.Slice()
		if isNoScript(err) && attempt == 0 {
			if err := writeScript.Load(ctx, node).Err(); err != nil {
				return nil, nil, err
			}
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		if anyBuffered(v) {
			replErr = b.checkReplicas(wait)
		}
		return v, replErr, nil
	}
}

// anyBuffered reports whether a call of writeScript buffered a write.
func anyBuffered(replies []any) bool {
	for _, r := range replies {
		if v, _ := r.([]any); len(v) > 0 {
			if code, _ := v[0].(int64); code > 0 {
				return true
			}
		}
	}
	return false
}

func (b *Buffer) checkReplicas(wait *redis.Cmd) error {
	n, err := wait.Int64()
	if err != nil {
		return fmt.Errorf("buffer: waiting for replicas: %w", err)
	}
	if int(n) < b.Replicas {
		return &ReplicationError{Got: int(n), Want: b.Replicas}
	}
	return nil
}

// New returns a Buffer over rdb whose keys start with prefix and whose
// pending index has partitions partitions.
func New(rdb redis.UniversalClient, prefix string, partitions int, leaseLifetime time.Duration) *Buffer {
	return &Buffer{rdb: rdb, prefix: prefix, parts: partitions, lease: leaseLifetime}
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

// Outcome is what a Write did.
type Outcome int

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

// WriteOptions qualify a Write.
type WriteOptions struct {
	TTL        time.Duration // lifetime of the cache entry it installs or updates
	Invalidate bool          // delete the cache entry instead of updating it (write-around)
	Token      string        // I-lease token; required for patches
	// HaveBase says Base is the store's current document (nil: no row),
	// read after a NeedBase answer.
	HaveBase bool
	Base     change.Doc
	// Count makes the write report what it found, atomically with it (see
	// WriteResult): a patch then needs the entry cached (NeedCache), a
	// delete of a missing document buffers nothing (NotFound), and an
	// increment that would overflow buffers nothing (Overflow). A counting
	// patch holds either only $set/$unset or exactly one $inc.
	Count bool
	// IfAbsent makes a put only create the document: Exists when it exists.
	IfAbsent bool
	// Replace updates fields of the cache entry that a patch's operators
	// change but the write script cannot compute (operators inside JSON
	// columns, document operators): the writer applied them to the value
	// it read, and the script sets each field to New only if the entry
	// still holds exactly Old (a concurrent write to the field would have
	// changed it); otherwise it drops the entry and the next read computes
	// it. A nil Old or New is an absent field. Operators on a field
	// without a Replace drop the entry.
	Replace map[string]Replace
}

// Replace is a compare-and-set of one field of a cache entry.
type Replace struct{ Old, New json.RawMessage }

// appendReplace appends a Replace as the value of writeScript's "C"
// operation: 'p' <len(Old)> ':' Old, or 'a' for absent; then 'p' New, or
// 'a'.
func appendReplace(b []byte, r Replace) []byte {
	if r.Old == nil {
		b = append(b, 'a')
	} else {
		b = append(b, 'p')
		b = strconv.AppendInt(b, int64(len(r.Old)), 10)
		b = append(b, ':')
		b = append(b, r.Old...)
	}
	if r.New == nil {
		return append(b, 'a')
	}
	b = append(b, 'p')
	return append(b, r.New...)
}

// WriteResult is what a Write did and, for a counting write, what it found.
type WriteResult struct {
	Seq     int64
	Outcome Outcome
	// Added counts the fields a counting $set gave a value that were absent
	// or null before; Removed the fields a counting $unset made null that
	// were not.
	Added, Removed int64
	// Value is, for a counting $inc of an integer column, the field's new
	// value; of a float column, its value before the write (nil when null),
	// since the cache entry is dropped and the sum is left to the reader.
	Value json.RawMessage
}

// Write buffers c for the document (coll, id) in one atomic step: it
// appends c with the next sequence number, indexes the document as pending,
// voids I leases, counts pinned bytes and updates (or invalidates) the cache
// entry. schema tells integer columns (incremented in place) from others.
func (b *Buffer) Write(ctx context.Context, coll, id string, c change.Change, s *change.Schema, o WriteOptions) (int64, Outcome, error) {
	r, err := b.WriteCounted(ctx, coll, id, c, s, o)
	return r.Seq, r.Outcome, err
}

// WriteCounted is Write with its whole result, for writes with o.Count or
// o.IfAbsent.
func (b *Buffer) WriteCounted(ctx context.Context, coll, id string, c change.Change, s *change.Schema, o WriteOptions) (WriteResult, error) {
	rs, errs := b.WriteBatch(ctx, []WriteRequest{{Coll: coll, ID: id, Change: c, Schema: s, Options: o}})
	return rs[0], errs[0]
}

// missingSeq reports whether a write found its partition's sequence
// missing.
func missingSeq(reply any) bool {
	v, _ := reply.([]any)
	if len(v) == 0 {
		return false
	}
	code, _ := v[0].(int64)
	return code == -6
}

// reseed recreates missing sequences (see Reseed).
func (b *Buffer) reseed(ctx context.Context) error {
	if b.Reseed != nil {
		if err := b.Reseed(ctx); err != nil {
			return fmt.Errorf("buffer: recreating lost sequences: %w", err)
		}
		return nil
	}
	for p := range b.parts {
		if err := b.RaiseSeq(ctx, p, 0); err != nil {
			return err
		}
	}
	return nil
}

// WriteRequest is one write of a WriteBatch.
type WriteRequest struct {
	Coll, ID string
	Change   change.Change
	Schema   *change.Schema
	Options  WriteOptions
}

// maxCallWrites bounds the writes of one call of writeScript, and so how
// long one call keeps Redis busy.
const maxCallWrites = 64

// WriteBatch runs the writes in one round trip, as WriteCounted would run
// them one by one: each is its own atomic step (they are not a
// transaction). results[i] and errs[i] belong to reqs[i].
//
// The writes share script calls (writeCalls): a batch costs Redis one call
// per maxCallWrites writes (in a Redis Cluster, per partition it touches)
// rather than one per write. The writes of one partition run in their
// order; those of different partitions, hence of different documents, may
// run in any order.
func (b *Buffer) WriteBatch(ctx context.Context, reqs []WriteRequest) ([]WriteResult, []error) {
	results, errs := make([]WriteResult, len(reqs)), make([]error, len(reqs))
	if len(reqs) == 0 {
		return results, errs
	}
	calls := b.writeCalls(reqs)
	if _, cluster := b.rdb.(*redis.ClusterClient); len(calls) == 1 || cluster && b.Replicas > 0 {
		// One call needs no pipeline. And one WAIT cannot cover writes
		// spread over several nodes: each call waits on its own node.
		for _, wc := range calls {
			v, replErr, err := b.runWrite(ctx, wc)
			b.settle(wc, v, replErr, err, results, errs)
		}
	} else {
		pipe := b.rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(calls))
		for i, wc := range calls {
			cmds[i] = writeScript.EvalSha(ctx, pipe, wc.keys, wc.args...)
		}
		var wait *redis.Cmd
		if b.Replicas > 0 {
			wait = pipe.Do(ctx, "WAIT", b.Replicas, b.ReplicaTimeout.Milliseconds()) // covers every write above
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
		for i, cmd := range cmds {
			v, err := cmd.Slice()
			var replErr error
			switch {
			case isNoScript(err):
				// The script was not loaded (first use, or a Redis
				// restart): these writes did not run. runWrite loads it.
				v, replErr, err = b.runWrite(ctx, calls[i])
			case err == nil && wait != nil && anyBuffered(v):
				replErr = b.checkReplicas(wait)
			}
			b.settle(calls[i], v, replErr, err, results, errs)
		}
	}
	// Writes that found their partition's sequence missing did nothing:
	// recreate the sequences and run them again, one by one, in order.
	var lost []int
	for i, err := range errs {
		if errors.Is(err, errLostSeq) {
			lost = append(lost, i)
		}
	}
	if len(lost) == 0 {
		return results, errs
	}
	if err := b.reseed(ctx); err != nil {
		for _, i := range lost {
			errs[i] = err
		}
		return results, errs
	}
	for _, i := range lost {
		wc := b.writeCalls(reqs[i : i+1])[0]
		v, replErr, err := b.runWrite(ctx, wc)
		b.settle(wc, v, replErr, err, results[i:i+1], errs[i:i+1])
	}
	return results, errs
}

// errLostSeq is a write that found its partition's sequence missing; it
// did nothing.
var errLostSeq = errors.New("buffer: write: the partition's sequence is missing")

// settle records the outcome of a call of writeScript: err is the call's,
// replErr (the replicas' answer) concerns the writes it buffered.
func (b *Buffer) settle(wc *writeCall, replies []any, replErr, err error, results []WriteResult, errs []error) {
	if err == nil && len(replies) != len(wc.reqs) {
		err = errors.New("malformed reply")
	}
	for k, i := range wc.reqs {
		if err != nil {
			errs[i] = fmt.Errorf("buffer: write: %w", err)
			continue
		}
		if missingSeq(replies[k]) {
			errs[i] = errLostSeq
			continue
		}
		results[i], errs[i] = parseWrite(replies[k])
		if errs[i] == nil && results[i].Outcome == Buffered && replErr != nil {
			results[i], errs[i] = WriteResult{}, replErr
		}
	}
}

// writeCall is one call of writeScript.
type writeCall struct {
	keys []string
	args []any
	reqs []int // the indexes in the batch of its writes, in the order of its replies
}

// writeCalls groups a batch's writes into calls of writeScript, at most
// maxCallWrites each, and the writes of a call into groups by partition,
// each in its order. In a Redis Cluster every key of a call must be in one
// slot, so a call holds the writes of one partition. A single Redis
// (standalone or Sentinel-managed) has no such limit: a call holds
// consecutive writes of any partitions, since a pipeline's writes spread
// over the partitions and most calls would otherwise carry one write.
func (b *Buffer) writeCalls(reqs []WriteRequest) []*writeCall {
	parts := make([]int, len(reqs))
	for i, r := range reqs {
		parts[i] = b.Partition(r.Coll, r.ID)
	}
	var calls []*writeCall
	if _, cluster := b.rdb.(*redis.ClusterClient); cluster {
		var order []int // partitions, by first write
		byPart := map[int][]int{}
		for i, p := range parts {
			if byPart[p] == nil {
				order = append(order, p)
			}
			byPart[p] = append(byPart[p], i)
		}
		for _, p := range order {
			for is := byPart[p]; len(is) > 0; {
				n := min(len(is), maxCallWrites)
				calls = append(calls, b.writeCall(reqs, parts, is[:n]))
				is = is[n:]
			}
		}
		return calls
	}
	is := make([]int, len(reqs))
	for i := range is {
		is[i] = i
	}
	for len(is) > 0 {
		n := min(len(is), maxCallWrites)
		calls = append(calls, b.writeCall(reqs, parts, is[:n]))
		is = is[n:]
	}
	return calls
}

// writeCall builds the call of writeScript for the writes is of reqs,
// whose partitions are parts.
func (b *Buffer) writeCall(reqs []WriteRequest, parts, is []int) *writeCall {
	// Stable: a partition's writes keep their order.
	is = slices.Clone(is)
	slices.SortStableFunc(is, func(i, j int) int { return cmp.Compare(parts[i], parts[j]) })
	wc := &writeCall{
		keys: make([]string, 0, 3*len(is)+9),
		args: make([]any, 0, 9*len(is)+4),
		reqs: is,
	}
	wc.args = append(wc.args, b.lease.Milliseconds())
	for g := 0; g < len(is); {
		part := parts[is[g]]
		n := 1
		for g+n < len(is) && parts[is[g+n]] == part {
			n++
		}
		tag := b.tag(part)
		wc.keys = append(wc.keys, b.pendingKey(part), b.statsKey(part), b.seqKey(part))
		wc.args = append(wc.args, n)
		for _, i := range is[g : g+n] {
			r := reqs[i]
			wc.keys = appendDocKeys(wc.keys, tag, r.Coll, r.ID)
			wc.args = appendWriteArgs(wc.args, r)
		}
		g += n
	}
	return wc
}

// appendDocKeys appends a document's cache entry, buffered write and I
// leases, named as cacheKey, bwKey and ileaseKey name them, in one
// allocation.
func appendDocKeys(keys []string, tag, coll, id string) []string {
	n := len(tag) + len("c:") + len(coll) + len(":") + len(id)
	var sb strings.Builder
	sb.Grow(3 * n)
	for _, kind := range [...]string{"c:", "b:", "i:"} {
		sb.WriteString(tag)
		sb.WriteString(kind)
		sb.WriteString(coll)
		sb.WriteByte(':')
		sb.WriteString(id)
	}
	all := sb.String()
	return append(keys, all[:n], all[n:2*n], all[2*n:])
}

// writeModes are the cache modes and flags of writeScript, by
// invalidate<<2 | ifAbsent<<1 | count.
var writeModes = [8]string{"u", "uc", "ua", "uca", "x", "xc", "xa", "xca"}

// appendWriteArgs appends a write's arguments of writeScript.
func appendWriteArgs(args []any, r WriteRequest) []any {
	c, o := r.Change, r.Options
	mode := 0
	if o.Invalidate {
		mode |= 4
	}
	if o.IfAbsent {
		mode |= 2
	}
	if o.Count {
		mode |= 1
	}
	at := len(args)
	args = append(args, 0, change.Encode(c), writeModes[mode], ttlMillis(o.TTL), o.Token)
	switch {
	case !o.HaveBase:
		args = append(args, "-")
	default:
		args = append(args, len(o.Base))
		for f, v := range o.Base {
			args = append(args, f, []byte(v))
		}
	}
	switch c.Kind {
	case change.Put:
		for f, v := range c.Doc {
			args = append(args, f, []byte(v))
		}
	case change.Patch:
		for f, v := range c.Set {
			args = append(args, "S", f, []byte(v))
		}
		for _, f := range c.Unset {
			args = append(args, "S", f, "null")
		}
		for f, n := range c.Inc {
			if col, ok := r.Schema.Column(f); ok && col.Type == change.TypeInt {
				args = append(args, "I", f, string(n))
			} else {
				// Float sums are left to the next read so that the cached
				// value is computed exactly as the store will compute it.
				args = append(args, "X", f, string(n))
			}
		}
		for f := range c.JSON {
			// Operators inside a JSON column are not applied in Lua: the
			// writer computed the column (Replace), or the entry is
			// dropped and the next read computes it (as the store will,
			// from the same operators).
			args = appendOpaque(args, f, o.Replace)
		}
		var seen map[string]bool // top-level fields of document operators
		for _, op := range c.Ops {
			f, _, _ := strings.Cut(op.Path, ".")
			if !seen[f] {
				if seen == nil {
					seen = map[string]bool{}
				}
				seen[f] = true
				args = appendOpaque(args, f, o.Replace)
			}
		}
	}
	args[at] = len(args) - at - 1
	return args
}

// appendOpaque appends the cache operation of field f, changed by
// operators the script cannot apply: a compare-and-set when rs has it,
// else the entry's deletion.
func appendOpaque(args []any, f string, rs map[string]Replace) []any {
	if r, ok := rs[f]; ok {
		return append(args, "C", f, appendReplace(nil, r))
	}
	return append(args, "X", f, "0")
}

// parseWrite decodes writeScript's reply to one write.
func parseWrite(reply any) (WriteResult, error) {
	v, _ := reply.([]any)
	if len(v) == 0 {
		return WriteResult{}, errors.New("buffer: write: malformed reply")
	}
	code, _ := v[0].(int64)
	switch code {
	case 0:
		return WriteResult{Outcome: NeedBase}, nil
	case -1:
		return WriteResult{Outcome: NotFound}, nil
	case -2:
		return WriteResult{Outcome: Voided}, nil
	case -3:
		return WriteResult{Outcome: Exists}, nil
	case -4:
		return WriteResult{Outcome: NeedCache}, nil
	case -5:
		return WriteResult{Outcome: Overflow}, nil
	case -7:
		msg := "malformed reply"
		if len(v) > 1 {
			msg, _ = v[1].(string)
		}
		return WriteResult{}, fmt.Errorf("buffer: write: %s", msg)
	}
	if code < 0 {
		return WriteResult{}, fmt.Errorf("buffer: write: unknown answer %d", code)
	}
	r := WriteResult{Seq: code, Outcome: Buffered}
	if len(v) >= 4 {
		r.Added, _ = v[1].(int64)
		r.Removed, _ = v[2].(int64)
		if s, ok := v[3].(string); ok {
			r.Value = json.RawMessage(s)
		}
	}
	return r, nil
}

func ttlMillis(d time.Duration) int64 {
	if d <= 0 {
		d = time.Hour
	}
	return d.Milliseconds()
}

// ReadResult is what Read found.
type ReadResult struct {
	Hit     bool
	Doc     change.Doc      // the cache entry, on a hit
	Pending []change.Change // the buffered write, on a miss (oldest first)
}

// Read looks the document up. On a miss it registers token as an I lease
// and returns the document's buffered write, both in the same atomic step,
// so that a value computed from (store row + these changes) may be
// installed with Fill exactly when no write came in between.
func (b *Buffer) Read(ctx context.Context, coll, id, token string) (ReadResult, error) {
	part := b.Partition(coll, id)
	m := Member(coll, id)
	// A hit needs no script: HGETALL is atomic by itself and costs Redis a
	// fraction of an EVALSHA. Only a miss runs the script, which looks again.
	h, err := b.rdb.HGetAll(ctx, b.cacheKey(part, m)).Result()
	if err != nil {
		return ReadResult{}, fmt.Errorf("buffer: read: %w", err)
	}
	if len(h) > 0 {
		doc := make(change.Doc, len(h))
		for f, v := range h {
			doc[f] = json.RawMessage(v)
		}
		return ReadResult{Hit: true, Doc: doc}, nil
	}
	keys := []string{b.cacheKey(part, m), b.bwKey(part, m), b.ileaseKey(part, m)}
	v, err := readScript.Run(ctx, b.rdb, keys, token, b.lease.Milliseconds()).Slice()
	if err != nil {
		return ReadResult{}, fmt.Errorf("buffer: read: %w", err)
	}
	if len(v) != 2 {
		return ReadResult{}, errors.New("buffer: read: malformed reply")
	}
	items, _ := v[1].([]any)
	if hit, _ := v[0].(int64); hit == 1 {
		doc := make(change.Doc, len(items)/2)
		for i := 0; i+1 < len(items); i += 2 {
			f, _ := items[i].(string)
			val, _ := items[i+1].(string)
			doc[f] = json.RawMessage(val)
		}
		return ReadResult{Hit: true, Doc: doc}, nil
	}
	pending, err := decodeEntries(items)
	if err != nil {
		return ReadResult{}, err
	}
	return ReadResult{Pending: pending}, nil
}

// Peek returns the cache entries of docs as Redis holds them (field →
// canonical JSON text), nil where a document is not cached, in one round
// trip. It is the hit half of Read for many documents: a miss must still go
// through Read.
func (b *Buffer) Peek(ctx context.Context, docs []DocRef) ([]map[string]string, error) {
	pipe := b.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(docs))
	for i, d := range docs {
		cmds[i] = pipe.HGetAll(ctx, b.cacheKey(d.Part, d.Member))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("buffer: read: %w", err)
	}
	out := make([]map[string]string, len(docs))
	for i, c := range cmds {
		if h := c.Val(); len(h) > 0 {
			out[i] = h
		}
	}
	return out, nil
}

func decodeEntries(items []any) ([]change.Change, error) {
	out := make([]change.Change, 0, len(items))
	for _, it := range items {
		s, _ := it.(string)
		c, err := change.Decode(s)
		if err != nil {
			return nil, fmt.Errorf("buffer: %w", err)
		}
		out = append(out, c)
	}
	return out, nil
}

// Fill installs doc as the document's cache entry if token's I lease is
// still valid, and gives the lease back either way. A nil doc only gives
// the lease back. It reports whether it installed the value.
func (b *Buffer) Fill(ctx context.Context, coll, id, token string, doc change.Doc, ttl time.Duration) (bool, error) {
	part := b.Partition(coll, id)
	m := Member(coll, id)
	args := make([]any, 0, 2+2*len(doc))
	args = append(args, token, ttlMillis(ttl))
	for f, v := range doc {
		args = append(args, f, []byte(v))
	}
	n, err := fillScript.Run(ctx, b.rdb, []string{b.cacheKey(part, m), b.ileaseKey(part, m)}, args...).Int64()
	if err != nil {
		return false, fmt.Errorf("buffer: fill: %w", err)
	}
	return n == 1, nil
}

// Evict deletes a document's cache entry (never its buffered write). Tests
// use it to simulate eviction.
func (b *Buffer) Evict(ctx context.Context, coll, id string) error {
	part := b.Partition(coll, id)
	return b.rdb.Del(ctx, b.cacheKey(part, Member(coll, id))).Err()
}

// PendingDocs returns, for each of parts, up to limit of its pending
// documents, the longest pending first, in one round trip.
func (b *Buffer) PendingDocs(ctx context.Context, parts []int, limit int) ([][]string, error) {
	pipe := b.rdb.Pipeline()
	cmds := make([]*redis.StringSliceCmd, len(parts))
	for i, p := range parts {
		cmds[i] = pipe.ZRange(ctx, b.pendingKey(p), 0, int64(limit-1))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("buffer: pending: %w", err)
	}
	out := make([][]string, len(parts))
	for i, c := range cmds {
		out[i] = c.Val()
	}
	return out, nil
}

// DocRef names a document in the pending index: its partition and member.
type DocRef struct {
	Part   int
	Member string
}

// Ref returns the DocRef of a document.
func (b *Buffer) Ref(coll, id string) DocRef {
	return DocRef{Part: b.Partition(coll, id), Member: Member(coll, id)}
}

// Changes returns the buffered writes of docs, at most max changes each, in
// one round trip.
func (b *Buffer) Changes(ctx context.Context, docs []DocRef, max int) ([][]change.Change, error) {
	pipe := b.rdb.Pipeline()
	cmds := make([]*redis.StringSliceCmd, len(docs))
	for i, d := range docs {
		cmds[i] = pipe.LRange(ctx, b.bwKey(d.Part, d.Member), 0, int64(max-1))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("buffer: changes: %w", err)
	}
	out := make([][]change.Change, len(docs))
	for i, cmd := range cmds {
		entries := cmd.Val()
		cs := make([]change.Change, 0, len(entries))
		for _, e := range entries {
			c, err := change.Decode(e)
			if err != nil {
				return nil, fmt.Errorf("buffer: %s: %w", docs[i].Member, err)
			}
			cs = append(cs, c)
		}
		out[i] = cs
	}
	return out, nil
}

// Applied names a document and the last seq the store has applied for it.
type Applied struct {
	DocRef
	LastSeq int64
}

// Trim removes, for each document, the buffered changes up to and including
// its LastSeq (changes buffered since stay), unpins emptied buffered writes
// and keeps the counters exact: one script per partition, all in one round
// trip. It returns how many changes it removed.
func (b *Buffer) Trim(ctx context.Context, done []Applied) (int64, error) {
	if len(done) == 0 {
		return 0, nil
	}
	byPart := map[int][]Applied{}
	for _, d := range done {
		byPart[d.Part] = append(byPart[d.Part], d)
	}
	pipe := b.rdb.Pipeline()
	cmds := make([]*redis.Cmd, 0, len(byPart))
	for part, ds := range byPart {
		keys := make([]string, 0, 2+len(ds))
		keys = append(keys, b.pendingKey(part), b.statsKey(part))
		args := make([]any, 0, 2*len(ds))
		for _, d := range ds {
			keys = append(keys, b.bwKey(part, d.Member))
			args = append(args, d.Member, d.LastSeq)
		}
		cmds = append(cmds, trimScript.EvalSha(ctx, pipe, keys, args...))
	}
	if _, err := pipe.Exec(ctx); err != nil && !isNoScript(err) {
		return 0, fmt.Errorf("buffer: trim: %w", err)
	}
	var n int64
	for _, c := range cmds {
		if isNoScript(c.Err()) {
			// First use on this server: Run loads the script. Trims are
			// idempotent, so redoing the ones that ran is harmless.
			return b.trimSlow(ctx, byPart)
		}
		v, _ := c.Int64()
		n += v
	}
	return n, nil
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// trimSlow runs the trims one by one with Run, which loads the script.
func (b *Buffer) trimSlow(ctx context.Context, byPart map[int][]Applied) (int64, error) {
	var n int64
	for part, ds := range byPart {
		keys := []string{b.pendingKey(part), b.statsKey(part)}
		args := make([]any, 0, 2*len(ds))
		for _, d := range ds {
			keys = append(keys, b.bwKey(part, d.Member))
			args = append(args, d.Member, d.LastSeq)
		}
		v, err := trimScript.Run(ctx, b.rdb, keys, args...).Int64()
		if err != nil {
			return n, fmt.Errorf("buffer: trim: %w", err)
		}
		n += v
	}
	return n, nil
}

// DeadLetter is a buffered prefix the store rejected for good.
type DeadLetter struct {
	Collection string          `json:"collection"`
	ID         string          `json:"id"`
	Seq        int64           `json:"seq"` // last seq of the rejected prefix
	Error      string          `json:"error"`
	At         time.Time       `json:"at"`
	Changes    json.RawMessage `json:"changes"` // the rejected entries, as a JSON array of strings
}

// Reject removes a document's buffered changes up to lastSeq, drops its
// cache entry and, when dl is not nil, records them as a dead letter.
func (b *Buffer) Reject(ctx context.Context, coll, id string, lastSeq int64, dl *DeadLetter) (int64, error) {
	part := b.Partition(coll, id)
	m := Member(coll, id)
	rec := ""
	if dl != nil {
		bs, err := json.Marshal(dl)
		if err != nil {
			return 0, err
		}
		rec = string(bs)
	}
	keys := []string{b.pendingKey(part), b.statsKey(part), b.bwKey(part, m), b.cacheKey(part, m), b.deadKey(part), b.ileaseKey(part, m)}
	n, err := deadScript.Run(ctx, b.rdb, keys, m, lastSeq, rec).Int64()
	if err != nil {
		return 0, fmt.Errorf("buffer: reject: %w", err)
	}
	return n, nil
}

// dropDeadScript removes one dead-letter record and counts it out.
// KEYS: 1 dead letters, 2 stats. ARGV: 1 the record as stored.
var dropDeadScript = redis.NewScript(`
local n = redis.call('LREM', KEYS[1], 1, ARGV[1])
if n > 0 then redis.call('HINCRBY', KEYS[2], 'dead', -n) end
return n
`)

// DropDeadLetter removes the dead letter of (coll, id) with sequence seq.
// It reports whether there was one.
func (b *Buffer) DropDeadLetter(ctx context.Context, coll, id string, seq int64) (bool, error) {
	part := b.Partition(coll, id)
	raws, err := b.rdb.LRange(ctx, b.deadKey(part), 0, -1).Result()
	if err != nil {
		return false, fmt.Errorf("buffer: dead letters: %w", err)
	}
	for _, raw := range raws {
		var d DeadLetter
		if json.Unmarshal([]byte(raw), &d) != nil || d.Collection != coll || d.ID != id || d.Seq != seq {
			continue
		}
		n, err := dropDeadScript.Run(ctx, b.rdb, []string{b.deadKey(part), b.statsKey(part)}, raw).Int64()
		if err != nil {
			return false, fmt.Errorf("buffer: drop dead letter: %w", err)
		}
		return n > 0, nil
	}
	return false, nil
}

// DeadChanges decodes the changes a dead letter holds.
func (d DeadLetter) DeadChanges() ([]change.Change, error) {
	var entries []string
	if err := json.Unmarshal(d.Changes, &entries); err != nil {
		return nil, fmt.Errorf("buffer: dead letter %s/%s@%d: %w", d.Collection, d.ID, d.Seq, err)
	}
	out := make([]change.Change, 0, len(entries))
	for _, e := range entries {
		c, err := change.Decode(e)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// DeadLetters returns up to limit dead letters over all partitions.
func (b *Buffer) DeadLetters(ctx context.Context, limit int) ([]DeadLetter, error) {
	pipe := b.rdb.Pipeline()
	cmds := make([]*redis.StringSliceCmd, b.parts)
	for p := range b.parts {
		cmds[p] = pipe.LRange(ctx, b.deadKey(p), 0, int64(limit-1))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("buffer: dead letters: %w", err)
	}
	var out []DeadLetter
	for _, c := range cmds {
		for _, s := range c.Val() {
			var d DeadLetter
			if json.Unmarshal([]byte(s), &d) == nil {
				out = append(out, d)
			}
			if len(out) >= limit {
				return out, nil
			}
		}
	}
	return out, nil
}

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

// PendingCounts returns the number of pending documents of each of parts.
func (b *Buffer) PendingCounts(ctx context.Context, parts []int) ([]int64, error) {
	pipe := b.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(parts))
	for i, p := range parts {
		cmds[i] = pipe.ZCard(ctx, b.pendingKey(p))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("buffer: pending counts: %w", err)
	}
	out := make([]int64, len(parts))
	for i, c := range cmds {
		out[i] = c.Val()
	}
	return out, nil
}

// PendingOf returns every pending document of collection coll, over all
// partitions (the scan path uses it to merge buffered writes into a range).
func (b *Buffer) PendingOf(ctx context.Context, coll string) ([]string, error) {
	pipe := b.rdb.Pipeline()
	cmds := make([]*redis.StringSliceCmd, b.parts)
	for p := range b.parts {
		cmds[p] = pipe.ZRange(ctx, b.pendingKey(p), 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("buffer: pending of %s: %w", coll, err)
	}
	var ids []string
	for _, c := range cmds {
		for _, m := range c.Val() {
			if mc, id := SplitMember(m); mc == coll {
				ids = append(ids, id)
			}
		}
	}
	return ids, nil
}

// HasBuffered reports, for each member, whether it has a buffered write.
func (b *Buffer) HasBuffered(ctx context.Context, members []string) ([]bool, error) {
	pipe := b.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(members))
	for i, m := range members {
		coll, id := SplitMember(m)
		cmds[i] = pipe.Exists(ctx, b.bwKey(b.Partition(coll, id), m))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("buffer: exists: %w", err)
	}
	out := make([]bool, len(members))
	for i, c := range cmds {
		out[i] = c.Val() == 1
	}
	return out, nil
}

// RaiseSeq makes partition part's sequence at least min.
func (b *Buffer) RaiseSeq(ctx context.Context, part int, min int64) error {
	return raiseSeqScript.Run(ctx, b.rdb, []string{b.seqKey(part)}, min).Err()
}

// Acquire takes or renews ownership of partition part for instance id.
func (b *Buffer) Acquire(ctx context.Context, part int, id string, lifetime time.Duration) (bool, error) {
	n, err := acquireScript.Run(ctx, b.rdb, []string{b.ownerKey(part)}, id, lifetime.Milliseconds()).Int64()
	return n == 1, err
}

// Release gives up ownership of partition part if id holds it.
func (b *Buffer) Release(ctx context.Context, part int, id string) error {
	return releaseScript.Run(ctx, b.rdb, []string{b.ownerKey(part)}, id).Err()
}

// Heartbeat registers instance id as live for lifetime and returns how many
// sidecars are live.
func (b *Buffer) Heartbeat(ctx context.Context, id string, lifetime time.Duration) (int, error) {
	n, err := heartbeatScript.Run(ctx, b.rdb, []string{b.sidecarsKey()}, id, lifetime.Milliseconds()).Int64()
	return int(n), err
}

// Leave removes instance id from the live sidecars.
func (b *Buffer) Leave(ctx context.Context, id string) error {
	return b.rdb.ZRem(ctx, b.sidecarsKey(), id).Err()
}

// CheckEvictionPolicy refuses a Redis whose maxmemory-policy could evict
// pinned keys (allkeys-*). It returns a warning when the policy cannot be
// read (CONFIG disabled).
func CheckEvictionPolicy(ctx context.Context, rdb redis.UniversalClient) (warning string, err error) {
	res, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		if ctx.Err() != nil {
			return "", err
		}
		return fmt.Sprintf("cannot read Redis maxmemory-policy (%v); make sure it is noeviction or volatile-*, or buffered writes may be evicted", err), nil
	}
	policy := res["maxmemory-policy"]
	if strings.HasPrefix(policy, "allkeys-") {
		return "", fmt.Errorf("redis maxmemory-policy is %s, which can evict buffered writes; set it to noeviction or a volatile-* policy (CONFIG SET maxmemory-policy noeviction)", policy)
	}
	return "", nil
}
