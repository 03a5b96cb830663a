package buffer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/rscript"
)

// PendingDocs returns, for each of parts, up to limit of its pending
// documents, the longest pending first, in one round trip; with age > 0
// only those whose oldest buffered write is at least age old (by Redis's
// clock, which stamped it).
func (b *Buffer) PendingDocs(ctx context.Context, parts []int, limit int, age time.Duration) ([][]string, error) {
	cmds, err := b.pendingRound(ctx, parts, age, int64(limit))
	if err != nil {
		return nil, fmt.Errorf("buffer: pending: %w", err)
	}
	out := make([][]string, len(parts))
	for i, c := range cmds {
		out[i], _ = c.StringSlice()
	}
	return out, nil
}

// agedScript counts (ARGV[2] "0") or lists (up to ARGV[2]) the members of
// pending index KEYS[1] pending for at least ARGV[1] ms by Redis's clock:
// scored at most now - ARGV[1]. The scores are the Redis time in ms of
// each document's oldest buffered write (writeScript, luaPop).
var agedScript = redis.NewScript(luaEntry + `
local max = string.format('%d', now_ms() - tonumber(ARGV[1]))
if ARGV[2] == '0' then return redis.call('ZCOUNT', KEYS[1], '-inf', max) end
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', max, 'LIMIT', 0, ARGV[2])
`)

// pendingRound reads each of parts' pending index in one round trip: its
// size (limit 0) or up to limit members, the longest pending first; with
// age > 0 only the members pending for at least age (agedScript, which
// changes nothing: no replica needs to confirm it).
func (b *Buffer) pendingRound(ctx context.Context, parts []int, age time.Duration, limit int64) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(parts))
	if age > 0 {
		calls := make([]rscript.Call, len(parts))
		for i, p := range parts {
			calls[i] = rscript.Call{Script: agedScript, Keys: []string{b.pendingKey(p)}, Args: []any{age.Milliseconds(), limit}}
		}
		replies, errs, _ := rscript.Durable{Client: b.rdb}.RunAll(ctx, calls)
		for i := range calls {
			if errs[i] != nil {
				return nil, errs[i]
			}
			cmds[i] = redis.NewCmd(ctx)
			cmds[i].SetVal(replies[i])
		}
		return cmds, nil
	}
	pipe := b.rdb.Pipeline()
	for i, p := range parts {
		if limit == 0 {
			cmds[i] = pipe.Do(ctx, "ZCARD", b.pendingKey(p))
		} else {
			cmds[i] = pipe.Do(ctx, "ZRANGE", b.pendingKey(p), 0, limit-1)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	return cmds, nil
}

// Cut is the oldest pending documents of one partition, read so that an
// applier can take them all as a cut (see store.PlanCut): Bound is a seq
// such that every change of the partition buffered at or below it belongs
// to one of Members. Its changes above Bound are not part of the cut.
//
// Why: the write script gives a change the seq max(previous + 1, Redis's
// clock in µs) and a document its oldest buffered change's clock in ms as
// its score (a trim re-scores it by its new oldest), so a document holding
// a change of seq s has a score of at most s / 1000. When more documents
// were pending than the limit, Bound stays below the first µs of the first
// one left out, whose score no member exceeds; and it is at most the
// partition's sequence, read with the members: a change buffered after the
// read is above it.
type Cut struct {
	Members []string // the longest pending first
	Seq     int64    // the partition's sequence when it was read
	Bound   int64
	More    bool // more documents were pending than the limit
}

// PendingCuts reads the oldest pending documents of each of parts as a
// Cut, up to limits[i] of parts[i], in one round trip: per partition, in
// one transaction (MULTI), its sequence, its first members and the score
// of the next one — the only score read (Redis spells every score it
// replies with in full, which costs more than the member).
func (b *Buffer) PendingCuts(ctx context.Context, parts, limits []int) ([]Cut, error) {
	if _, ok := b.rdb.(*redis.ClusterClient); !ok || len(parts) < 2 {
		return b.pendingCuts(ctx, parts, limits)
	}
	// go-redis sends a Cluster's transactions one slot after another: one
	// per partition, all at once.
	cuts := make([]Cut, len(parts))
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i := range parts {
		wg.Go(func() {
			var c []Cut
			if c, errs[i] = b.pendingCuts(ctx, parts[i:i+1], limits[i:i+1]); errs[i] == nil {
				cuts[i] = c[0]
			}
		})
	}
	wg.Wait()
	return cuts, errors.Join(errs...)
}

// pendingCuts is PendingCuts in one transaction.
func (b *Buffer) pendingCuts(ctx context.Context, parts, limits []int) ([]Cut, error) {
	pipe := b.rdb.TxPipeline()
	seqs := make([]*redis.StringCmd, len(parts))
	members := make([]*redis.StringSliceCmd, len(parts))
	next := make([]*redis.ZSliceCmd, len(parts))
	for i, p := range parts {
		seqs[i] = pipe.Get(ctx, b.seqKey(p))
		members[i] = pipe.ZRange(ctx, b.pendingKey(p), 0, int64(limits[i]-1))
		next[i] = pipe.ZRangeWithScores(ctx, b.pendingKey(p), int64(limits[i]), int64(limits[i]))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("buffer: pending: %w", err)
	}
	cuts := make([]Cut, len(parts))
	for i := range parts {
		c := &cuts[i]
		if v := seqs[i].Val(); v != "" {
			seq, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("buffer: the sequence of partition %d is %q, not a number", parts[i], v)
			}
			c.Seq = seq
		}
		c.Members, c.Bound = members[i].Val(), c.Seq
		if z := next[i].Val(); len(z) > 0 {
			c.Bound, c.More = min(c.Seq, int64(z[0].Score)*1000-1), true
		}
	}
	return cuts, nil
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
	// One array holds every document's changes, each capped at its own.
	n := 0
	for _, cmd := range cmds {
		n += len(cmd.Val())
	}
	all := make([]change.Change, 0, n)
	out := make([][]change.Change, len(docs))
	for i, cmd := range cmds {
		from := len(all)
		for _, e := range cmd.Val() {
			c, err := change.Decode(e)
			if err != nil {
				return nil, fmt.Errorf("buffer: %s: %w", docs[i].Member, err)
			}
			all = append(all, c)
		}
		out[i] = all[from:len(all):len(all)]
	}
	return out, nil
}

// Applied names a document and the last seq the store has applied for it.
type Applied struct {
	DocRef
	LastSeq int64
	// Count is how many buffered changes the applied prefix holds, as the
	// applier read them (0: unknown). Trim pops them in one command; a count
	// that no longer matches the list costs commands, never a change.
	Count int
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
		args := make([]any, 0, 3*len(ds))
		for _, d := range ds {
			keys = append(keys, b.bwKey(part, d.Member))
			args = append(args, d.Member, d.LastSeq, d.Count)
		}
		cmds = append(cmds, trimScript.EvalSha(ctx, pipe, keys, args...))
	}
	if _, err := pipe.Exec(ctx); err != nil && !rscript.IsNoScript(err) {
		return 0, fmt.Errorf("buffer: trim: %w", err)
	}
	var n int64
	for _, c := range cmds {
		if rscript.IsNoScript(c.Err()) {
			// First use on this server: Run loads the script. Trims are
			// idempotent, so redoing the ones that ran is harmless.
			return b.trimSlow(ctx, byPart)
		}
		v, _ := c.Int64()
		n += v
	}
	return n, nil
}

// trimSlow runs the trims one by one with Run, which loads the script.
func (b *Buffer) trimSlow(ctx context.Context, byPart map[int][]Applied) (int64, error) {
	var n int64
	for part, ds := range byPart {
		keys := []string{b.pendingKey(part), b.statsKey(part)}
		args := make([]any, 0, 3*len(ds))
		for _, d := range ds {
			keys = append(keys, b.bwKey(part, d.Member))
			args = append(args, d.Member, d.LastSeq, d.Count)
		}
		v, err := trimScript.Run(ctx, b.rdb, keys, args...).Int64()
		if err != nil {
			return n, fmt.Errorf("buffer: trim: %w", err)
		}
		n += v
	}
	return n, nil
}

// PendingCounts returns the number of pending documents of each of parts;
// with age > 0 of those pending for at least age (PendingDocs).
func (b *Buffer) PendingCounts(ctx context.Context, parts []int, age time.Duration) ([]int64, error) {
	cmds, err := b.pendingRound(ctx, parts, age, 0)
	if err != nil {
		return nil, fmt.Errorf("buffer: pending counts: %w", err)
	}
	out := make([]int64, len(parts))
	for i, c := range cmds {
		out[i], _ = c.Int64()
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
