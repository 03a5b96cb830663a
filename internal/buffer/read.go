package buffer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/rscript"
)

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

// FillLease is Fill for a near-cached collection (r names the document,
// this sidecar's request number and the lease lifetime): the value it
// installs is also leased to this sidecar (Instance), in the same atomic
// step, as LeaseRead leases a hit. installed is false when a write voided
// the I lease; outcome is LeaseGranted (the caller may keep doc as its copy
// until the deadline it computes from when it sent this call),
// LeaseUnconfirmed (granted, but the replicas did not confirm it), LeaseHot
// or LeaseRevoking (no lease). With the replicas short, it fills without
// a lease (outcome 0).
func (b *Buffer) FillLease(ctx context.Context, r NearRead, token string, doc change.Doc, ttl time.Duration) (installed bool, outcome LeaseOutcome, err error) {
	if doc == nil {
		// Nothing to install, nothing to lease: give the I lease back.
		_, err := b.Fill(ctx, r.Coll, r.ID, token, nil, 0)
		return false, 0, err
	}
	part := b.Partition(r.Coll, r.ID)
	m := Member(r.Coll, r.ID)
	args := make([]any, 0, 5+2*len(doc))
	args = append(args, token, ttlMillis(ttl), b.Instance, strconv.FormatUint(r.Gen, 10), r.TTL.Milliseconds())
	for f, v := range doc {
		args = append(args, f, []byte(v))
	}
	// As a lease read's: the lease must reach the replicas before the
	// holder serves under it.
	reply, repl, err := b.durable().Run(ctx, rscript.Call{
		Script: fillLeaseScript,
		Keys:   []string{b.cacheKey(part, m), b.ileaseKey(part, m), b.leaseKey(part, m), b.hotKey(part, m)},
		Args:   args,
	})
	var short *rscript.ShortfallError
	if errors.As(err, &short) {
		// Refused unrun: a fill needs no replica, only its lease does.
		ok, err := b.Fill(ctx, r.Coll, r.ID, token, doc, ttl)
		return ok, 0, err
	}
	if err != nil {
		return false, 0, fmt.Errorf("buffer: fill: %w", err)
	}
	code, ok := reply.(int64)
	if !ok {
		return false, 0, errors.New("buffer: fill: malformed reply")
	}
	if code == 0 {
		return false, 0, nil
	}
	outcome = LeaseOutcome(code)
	if outcome == LeaseGranted && repl != nil {
		outcome = LeaseUnconfirmed
	}
	return true, outcome, nil
}

// Evict deletes a document's cache entry (never its buffered write). Tests
// use it to simulate eviction.
func (b *Buffer) Evict(ctx context.Context, coll, id string) error {
	part := b.Partition(coll, id)
	return b.rdb.Del(ctx, b.cacheKey(part, Member(coll, id))).Err()
}
