package buffer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/writeback/writeback/internal/change"
)

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
	keys := []string{b.pendingKey(part), b.statsKey(part), b.bwKey(part, m), b.cacheKey(part, m), b.deadKey(part), b.ileaseKey(part, m), b.membersKey(part), b.leaseKey(part, m)}
	n, err := deadScript.Run(ctx, b.rdb, keys, m, lastSeq, rec, b.MaxDeadLetters).Int64()
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
