package buffer

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

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
// of used_memory's growth for 5000 single-change documents (the changes'
// bytes alone are a fifth of it). Other tests share the Redis, so the
// measurement is taken up to three times.
func TestPinnedBytesCountKeyOverhead(t *testing.T) {
	b, s, ctx := newTestBuffer(t), schema(t), context.Background()
	used := func() int64 {
		info, err := b.rdb.Info(ctx, "memory").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		t.Fatal("INFO memory has no used_memory")
		return 0
	}
	const n = 5000
	var ratio float64
	for try := range 3 {
		st0, _ := b.Stats(ctx)
		m0 := used()
		for i := range n {
			id := fmt.Sprint(try*n + i)
			put, _ := change.ParsePut(s, id, []byte(`{"n":1}`))
			if _, _, err := b.Write(ctx, "c", id, put, s, WriteOptions{TTL: time.Minute, Invalidate: true}); err != nil {
				t.Fatal(err)
			}
		}
		st1, _ := b.Stats(ctx)
		ratio = float64(st1.PinnedBytes-st0.PinnedBytes) / float64(used()-m0)
		if ratio > 0.67 && ratio < 1.5 {
			return
		}
	}
	t.Errorf("pinned bytes grew %.2f× as much as Redis's used_memory; want within a third", ratio)
}
