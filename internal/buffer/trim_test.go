package buffer

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/writeback/writeback/internal/change"
)

// Trim of many documents at once — emptied (of one, 32 and 40 changes),
// cut after its 33rd change, left alone, never buffered, named twice —
// leaves exactly the changes past each LastSeq, pends exactly the
// documents with changes left, and keeps the counters exact (the script
// adds up the counters' changes of all its documents).
func TestTrimMany(t *testing.T) {
	b, s, ctx := newTestBuffer(t), schema(t), context.Background()
	write := func(id string, n int) []int64 {
		var seqs []int64
		for i := range n {
			put, err := change.ParsePut(s, id, []byte(`{"n":`+strconv.Itoa(i)+`}`))
			if err != nil {
				t.Fatal(err)
			}
			seq, out, err := b.Write(ctx, "c", id, put, s, WriteOptions{TTL: time.Minute})
			if err != nil || out != Buffered {
				t.Fatalf("write %s: %v %v", id, out, err)
			}
			seqs = append(seqs, seq)
		}
		return seqs
	}
	a, bb, c, d, f := write("11", 1), write("12", 40), write("13", 70), write("14", 3), write("16", 32)
	ref := func(id string, last int64) Applied { return Applied{DocRef: b.Ref("c", id), LastSeq: last} }
	n, err := b.Trim(ctx, []Applied{
		ref("11", a[0]), ref("12", bb[39]), ref("13", c[9]), ref("14", 0), ref("15", 0), ref("16", f[31]), ref("13", c[32]),
	})
	if err != nil || n != 1+40+33+32 {
		t.Fatalf("trim: %d %v; want %d removed", n, err, 1+40+33+32)
	}
	left := map[string][]int64{"11": nil, "12": nil, "13": c[33:], "14": d, "15": nil, "16": nil}
	var changes, bytes, docs int64
	for id, want := range left {
		raw, err := b.rdb.LRange(ctx, b.bwKey(b.Partition("c", id), Member("c", id)), 0, -1).Result()
		if err != nil || len(raw) != len(want) {
			t.Fatalf("%s: %d entries left (%v), want %d", id, len(raw), err, len(want))
		}
		cs, err := b.Changes(ctx, []DocRef{b.Ref("c", id)}, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for i, ch := range cs[0] {
			if ch.Seq != want[i] {
				t.Fatalf("%s: entry %d has seq %d, want %d", id, i, ch.Seq, want[i])
			}
		}
		for _, e := range raw {
			bytes += int64(len(e))
		}
		changes += int64(len(raw))
		_, err = b.rdb.ZScore(ctx, b.pendingKey(b.Partition("c", id)), Member("c", id)).Result()
		if pending := err == nil; pending != (len(want) > 0) {
			t.Fatalf("%s: pending %v with %d entries left", id, pending, len(want))
		}
		if len(want) > 0 {
			docs++
		}
	}
	st, err := b.Stats(ctx)
	if err != nil || st.PendingChanges != changes || st.PendingDocuments != docs || st.ChangeBytes != bytes {
		t.Fatalf("stats %+v (%v); want %d changes of %d bytes in %d documents", st, err, changes, bytes, docs)
	}
}
