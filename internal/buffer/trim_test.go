package buffer

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/writeback/writeback/internal/change"
)

// Trim of many documents at once — emptied (of one, 32 and 40 changes),
// cut after its 33rd change, left alone, never buffered, named twice, cut
// after its 1050th change — leaves exactly the changes past each LastSeq,
// in order, pends exactly the documents with changes left, and keeps the
// counters exact (the script adds up the counters' changes of all its
// documents). Whatever the appliers' counts of the prefixes say: none,
// exact, too many (the changes past LastSeq it pops go back) or too few
// (the rest is popped one by one).
func TestTrimMany(t *testing.T) {
	for _, tc := range []struct {
		name  string
		count func(exact int) int
	}{
		{"unknown", func(int) int { return 0 }},
		{"exact", func(n int) int { return n }},
		{"too many", func(n int) int { return n + 5 }},
		{"too few", func(n int) int { return n / 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) { testTrimMany(t, tc.count) })
	}
}

func testTrimMany(t *testing.T, count func(exact int) int) {
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
	a, bb, c, d, f, g := write("11", 1), write("12", 40), write("13", 70), write("14", 3), write("16", 32), write("17", 1100)
	ref := func(id string, last int64, exact int) Applied {
		return Applied{DocRef: b.Ref("c", id), LastSeq: last, Count: count(exact)}
	}
	n, err := b.Trim(ctx, []Applied{
		ref("11", a[0], 1), ref("12", bb[39], 40), ref("13", c[9], 10), ref("14", 0, 0), ref("15", 0, 0), ref("16", f[31], 32),
		ref("13", c[32], 23), ref("17", g[1049], 1050),
	})
	if want := int64(1 + 40 + 33 + 32 + 1050); err != nil || n != want {
		t.Fatalf("trim: %d %v; want %d removed", n, err, want)
	}
	left := map[string][]int64{"11": nil, "12": nil, "13": c[33:], "14": d, "15": nil, "16": nil, "17": g[1050:]}
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
		score, err := b.rdb.ZScore(ctx, b.pendingKey(b.Partition("c", id)), Member("c", id)).Result()
		if pending := err == nil; pending != (len(want) > 0) {
			t.Fatalf("%s: pending %v with %d entries left", id, pending, len(want))
		}
		if len(want) > 0 {
			docs++
			// Scored by its new head's time: the oldest change left.
			if ms := strings.Split(raw[0], "|")[1]; strconv.FormatFloat(score, 'f', -1, 64) != ms {
				t.Fatalf("%s: pending with score %v, its head %q", id, score, raw[0])
			}
		}
	}
	st, err := b.Stats(ctx)
	if err != nil || st.PendingChanges != changes || st.PendingDocuments != docs || st.ChangeBytes != bytes {
		t.Fatalf("stats %+v (%v); want %d changes of %d bytes in %d documents", st, err, changes, bytes, docs)
	}
}

// BenchmarkTrim measures Redis's time (INFO commandstats) per document
// trimmed the way a drain's batch is: one trim script for 128 documents of
// one partition, each with the one change the batch applied; idle Redis,
// rounds of 20 batches, the median round reported.
func BenchmarkTrim(bm *testing.B) {
	base := newTestBuffer(bm)
	b := New(base.rdb, base.prefix, 1, time.Second)
	s, ctx := schema(bm), context.Background()
	const docs, batches, rounds = 128, 20, 5
	var per []float64
	bm.ResetTimer()
	for r := range rounds {
		bm.StopTimer()
		done := make([][]Applied, batches)
		for i := range batches {
			for d := range docs {
				id := strconv.Itoa((r*batches+i)*docs + d)
				done[i] = append(done[i], Applied{DocRef: b.Ref("c", id), LastSeq: bufferPut(bm, b, s, id), Count: 1})
			}
		}
		bm.StartTimer()
		before := evalshaUsec(bm, b)
		for _, d := range done {
			if n, err := b.Trim(ctx, d); err != nil || n != docs {
				bm.Fatalf("trim: %d, %v; want %d", n, err, docs)
			}
		}
		per = append(per, float64(evalshaUsec(bm, b)-before)/(docs*batches))
	}
	bm.StopTimer()
	bm.ReportMetric(slices.Sorted(slices.Values(per))[len(per)/2], "redis-µs/doc")
	bm.Logf("Redis µs per trimmed document, per round: %v", per)
}
