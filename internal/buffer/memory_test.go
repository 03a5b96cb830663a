package buffer

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/change"
)

// Dead letters are capped per partition: over writeback.maxDeadLetters the
// oldest go, counted, and the counters stay exact.
func TestDeadLetterCap(t *testing.T) {
	b, s, ctx := newTestBuffer(t), schema(t), context.Background()
	b.MaxDeadLetters = 2
	var ids []string
	for i := 0; len(ids) < 3; i++ {
		if id := fmt.Sprint(i); b.Partition("c", id) == 0 {
			ids = append(ids, id)
		}
	}
	for _, id := range ids {
		put, _ := change.ParsePut(s, id, []byte(`{"n":1}`))
		seq, _, err := b.Write(ctx, "c", id, put, s, WriteOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Reject(ctx, "c", id, seq, &DeadLetter{Collection: "c", ID: id, Seq: seq, Error: "boom", Changes: json.RawMessage(`[]`)}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := b.Stats(ctx)
	if err != nil || st.DeadLetters != 2 || st.DeadLettersDropped != 1 {
		t.Fatalf("stats over the cap: %+v %v; want 2 dead letters kept, 1 dropped", st, err)
	}
	dls, err := b.DeadLetters(ctx, 10)
	if err != nil || len(dls) != 2 || dls[0].ID == ids[0] || dls[1].ID == ids[0] {
		t.Fatalf("kept dead letters %+v (%v); want the two newest, not %s", dls, err, ids[0])
	}
}

// PinnedBytes tracks what Redis spends on buffered writes: within a third
// of what the buffer's own keys take (MEMORY USAGE of every key under its
// prefix, key and entry overhead included) for 5000 single-change documents
// (the changes' bytes alone are a fifth of it). Summing the buffer's keys,
// not reading used_memory, keeps other tests on the same Redis out of the
// measurement.
func TestPinnedBytesCountKeyOverhead(t *testing.T) {
	b, s, ctx := newTestBuffer(t), schema(t), context.Background()
	used := func() int64 {
		var keys []string
		iter := b.rdb.Scan(ctx, 0, b.prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		pipe := b.rdb.Pipeline()
		cmds := make([]*redis.IntCmd, len(keys))
		for i, k := range keys {
			cmds[i] = pipe.MemoryUsage(ctx, k, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		var n int64
		for _, c := range cmds {
			n += c.Val() // a key gone since the scan counts nothing
		}
		return n
	}
	const n = 5000
	st0, _ := b.Stats(ctx)
	m0 := used()
	for i := range n {
		id := fmt.Sprint(i)
		put, _ := change.ParsePut(s, id, []byte(`{"n":1}`))
		if _, _, err := b.Write(ctx, "c", id, put, s, WriteOptions{TTL: time.Minute, Invalidate: true}); err != nil {
			t.Fatal(err)
		}
	}
	st1, _ := b.Stats(ctx)
	m1 := used()
	if ratio := float64(st1.PinnedBytes-st0.PinnedBytes) / float64(m1-m0); ratio < 0.67 || ratio > 1.5 {
		t.Errorf("pinned bytes grew %.2f× as much as the buffer's keys (%d → %d bytes); want within a third", ratio, m0, m1)
	}
}
