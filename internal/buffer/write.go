package buffer

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/rscript"
)

// The write script's answers to one write that buffered nothing: the
// first element of its reply (a buffered write answers its seq, > 0). The
// script names them as luaReplies does.
const (
	replyNeedBase  = 0  // NeedBase
	replyNotFound  = -1 // NotFound
	replyVoided    = -2 // Voided
	replyExists    = -3 // Exists
	replyNeedCache = -4 // NeedCache
	replyOverflow  = -5 // Overflow
	replyLostSeq   = -6 // the partition's sequence is missing (errLostSeq)
	replyRefused   = -7 // Redis refused a command of the write; its message follows
)

// luaReplies declares the reply codes in Lua, from the constants above.
var luaReplies = fmt.Sprintf("local NEED_BASE, NOT_FOUND, VOIDED, EXISTS, NEED_CACHE, OVERFLOW, LOST_SEQ, REFUSED = %d, %d, %d, %d, %d, %d, %d, %d\n",
	replyNeedBase, replyNotFound, replyVoided, replyExists, replyNeedCache, replyOverflow, replyLostSeq, replyRefused)

// Outcome is what a Write did.
type Outcome int

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
	// Near makes the write wait for the document's near-cache lease
	// holders (Leased), then mark it hot for HotWindow.
	Near      bool
	HotWindow time.Duration
	// Grant (with Near, HotWindow 0) asks for a near-cache read lease of
	// generation Grant for LeaseTTL on the entry the write leaves, granted
	// to this sidecar (Instance) in the same step: WriteResult.Entry.
	Grant    uint64
	LeaseTTL time.Duration
	// Copy is, with Grant, the writer's copy of the document (field →
	// canonical JSON text, as the cache entry holds it), leased under
	// generation CopyGen. When the lease record still names CopyGen, live
	// — so nothing was written to the document since that grant (see
	// extendScript) — and the write only sets fields of the cached entry,
	// the script grants the lease without sending the entry back:
	// WriteResult.Entry is then the copy with the write's fields set.
	Copy    map[string]string
	CopyGen uint64
}

// fromCopy reports whether the entry a write leaves can be computed from
// the writer's copy: a patch that only sets and unsets fields of the
// entry it updates (no increments, no operators the script cannot apply).
func fromCopy(r *WriteRequest) bool {
	c, o := &r.Change, &r.Options
	return o.Copy != nil && o.CopyGen > 0 && !o.Invalidate && c.Kind == change.Patch &&
		len(c.Inc) == 0 && len(c.JSON) == 0 && len(c.Ops) == 0
}

// copyEntry returns the entry a write of r leaves when the script derived
// it from the writer's copy: the copy with r's sets, in the order the
// script sets them (appendWriteArgs).
func copyEntry(r *WriteRequest) map[string]string {
	c := &r.Change
	h := make(map[string]string, len(r.Options.Copy)+len(c.Set))
	for f, v := range r.Options.Copy {
		h[f] = v
	}
	for f, v := range c.Set {
		h[f] = string(v)
	}
	for _, f := range c.Unset {
		h[f] = "null"
	}
	return h
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
	// Wait is, for Leased, how long until the last lease expires.
	Wait time.Duration
	// Entry is, for a Buffered write with Options.Grant, the cache entry
	// the write left, on which it granted the lease (nil: none granted —
	// no entry, a hot document, a writer waiting for holders).
	Entry map[string]string
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
	return code == replyLostSeq
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
//
// With Combine set, concurrent calls share rounds (combiner).
func (b *Buffer) WriteBatch(ctx context.Context, reqs []WriteRequest) ([]WriteResult, []error) {
	if b.Combine && len(reqs) > 0 {
		return b.combined(ctx, reqs)
	}
	return b.writeBatch(ctx, reqs)
}

func (b *Buffer) writeBatch(ctx context.Context, reqs []WriteRequest) ([]WriteResult, []error) {
	results, errs := make([]WriteResult, len(reqs)), make([]error, len(reqs))
	if len(reqs) == 0 {
		return results, errs
	}
	calls := b.writeCalls(reqs)
	b.runWrites(ctx, reqs, calls, results, errs)
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
		b.runWrites(ctx, reqs[i:i+1], b.writeCalls(reqs[i:i+1]), results[i:i+1], errs[i:i+1])
	}
	return results, errs
}

// runWrites runs calls of writeScript (in one round trip on one Redis
// node, with one WAIT for the replicas when they are required) and
// settles their writes' results.
func (b *Buffer) runWrites(ctx context.Context, reqs []WriteRequest, calls []*writeCall, results []WriteResult, errs []error) {
	rcalls := make([]rscript.Call, len(calls))
	for i, wc := range calls {
		rcalls[i] = rscript.Call{Script: writeScript, Keys: wc.keys, Args: wc.args}
	}
	replies, cerrs, repls := b.durable().RunAll(ctx, rcalls)
	for i, wc := range calls {
		var replErr error
		if cerrs[i] == nil && anyBuffered(replies[i]) {
			replErr = repls[i] // it concerns the buffered writes only
		}
		v, _ := replies[i].([]any)
		b.settle(reqs, wc, v, replErr, cerrs[i], results, errs)
	}
}

// errLostSeq is a write that found its partition's sequence missing; it
// did nothing.
var errLostSeq = errors.New("buffer: write: the partition's sequence is missing")

// settle records the outcome of a call of writeScript: err is the call's,
// replErr (the replicas' answer) concerns the writes it buffered.
func (b *Buffer) settle(reqs []WriteRequest, wc *writeCall, replies []any, replErr, err error, results []WriteResult, errs []error) {
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
		results[i], errs[i] = parseWrite(replies[k], &reqs[i])
		if errs[i] == nil && results[i].Outcome == Buffered {
			b.saw(wc.parts[k], results[i].Seq)
			if replErr != nil {
				results[i], errs[i] = WriteResult{}, replErr
			}
		}
	}
}

// writeCall is one call of writeScript.
type writeCall struct {
	keys  []string
	args  []any
	reqs  []int // the indexes in the batch of its writes, in the order of its replies
	parts []int // their partitions, in the same order
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
		keys:  make([]string, 0, 3*len(is)+12),
		args:  make([]any, 0, 9*len(is)+4),
		reqs:  is,
		parts: make([]int, len(is)),
	}
	for k, i := range is {
		wc.parts[k] = parts[i]
	}
	wc.args = append(wc.args, b.lease.Milliseconds(), b.Instance, b.NearChannel(""))
	for g := 0; g < len(is); {
		part := parts[is[g]]
		n := 1
		for g+n < len(is) && parts[is[g+n]] == part {
			n++
		}
		tag := b.tag(part)
		wc.keys = append(wc.keys, b.pendingKey(part), b.statsKey(part), b.seqKey(part), b.membersKey(part))
		wc.args = append(wc.args, n, b.seen[part].Load())
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
	flags := writeModes[mode]
	if o.Near {
		flags += "n" + strconv.FormatInt(o.HotWindow.Milliseconds(), 10)
		if o.Grant > 0 && o.HotWindow <= 0 {
			flags += "g" + strconv.FormatUint(o.Grant, 10) + ":" + strconv.FormatInt(o.LeaseTTL.Milliseconds(), 10)
			if fromCopy(&r) {
				flags += ":" + strconv.FormatUint(o.CopyGen, 10)
			}
		}
	}
	args = append(args, 0, change.Encode(c), flags, ttlMillis(o.TTL), o.Token)
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

// parseWrite decodes writeScript's reply to write r.
func parseWrite(reply any, req *WriteRequest) (WriteResult, error) {
	v, _ := reply.([]any)
	if len(v) == 0 {
		return WriteResult{}, errors.New("buffer: write: malformed reply")
	}
	code, _ := v[0].(int64)
	switch code {
	case replyNeedBase:
		return WriteResult{Outcome: NeedBase}, nil
	case replyNotFound:
		return WriteResult{Outcome: NotFound}, nil
	case replyVoided:
		return WriteResult{Outcome: Voided}, nil
	case replyExists:
		return WriteResult{Outcome: Exists}, nil
	case replyNeedCache:
		return WriteResult{Outcome: NeedCache}, nil
	case replyOverflow:
		return WriteResult{Outcome: Overflow}, nil
	case replyLeased:
		var ms int64
		if len(v) > 1 {
			ms, _ = v[1].(int64)
		}
		return WriteResult{Outcome: Leased, Wait: time.Duration(ms) * time.Millisecond}, nil
	case replyRefused:
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
	// A granted lease's entry ends the reply (a Lua nil ends it early);
	// 1 instead says the entry is the writer's copy with its sets.
	if len(v) == 2 || len(v) == 5 {
		if n, ok := v[len(v)-1].(int64); ok && n == 1 {
			r.Entry = copyEntry(req)
		}
		if h, ok := v[len(v)-1].([]any); ok {
			r.Entry = make(map[string]string, len(h)/2)
			for j := 0; j+1 < len(h); j += 2 {
				f, _ := h[j].(string)
				val, _ := h[j+1].(string)
				r.Entry[f] = val
			}
		}
	}
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
