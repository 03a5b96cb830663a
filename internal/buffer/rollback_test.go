package buffer

import (
	"context"
	"testing"
	"time"

	"github.com/writeback/writeback/internal/change"
)

// CheckRollback: sequences at or above what the store applied leave the
// cache alone and are raised to the global floor; one sequence below its
// partition's applied records (a Redis restarted from an older snapshot)
// drops every cache entry and I lease, keeps the buffered writes, and the
// next write gets a seq above everything applied.
func TestCheckRollback(t *testing.T) {
	b, s, ctx := newTestBuffer(t), schema(t), context.Background()
	for _, id := range []string{"1", "2", "3"} {
		put, _ := change.ParsePut(s, id, []byte(`{"n":1}`))
		if _, out, err := b.Write(ctx, "c", id, put, s, WriteOptions{TTL: time.Minute}); err != nil || out != Buffered {
			t.Fatalf("put %s: %v %v", id, out, err)
		}
	}
	if _, err := b.rdb.Set(ctx, b.ileaseKey(0, "x"), "tok", time.Minute).Result(); err != nil {
		t.Fatal(err)
	}
	entries := func() int {
		n := 0
		for _, kind := range []string{"c:", "i:"} {
			keys, err := b.rdb.Keys(ctx, keyPattern(b.prefix, kind)).Result()
			if err != nil {
				t.Fatal(err)
			}
			n += len(keys)
		}
		return n
	}
	seqs := map[int]int64{}
	for p := range b.parts {
		seqs[p], _ = b.rdb.Get(ctx, b.seqKey(p)).Int64()
	}
	if entries() != 4 {
		t.Fatalf("%d entries and I leases before the check, want 4", entries())
	}

	// Intact: every sequence at or above its partition's records.
	f := Floors{Part: map[int]int64{}, Global: 50}
	for p, v := range seqs {
		f.Part[p] = v
	}
	r, err := b.CheckRollback(ctx, b.rdb, f)
	if err != nil || r.RolledBack || r.Dropped != 0 || r.Partitions != b.parts || r.Raised != b.parts {
		t.Fatalf("intact Redis: %+v %v", r, err)
	}
	if entries() != 4 {
		t.Fatalf("an intact Redis lost its entries: %d left", entries())
	}
	for p := range b.parts {
		if v, _ := b.rdb.Get(ctx, b.seqKey(p)).Int64(); v != 50 {
			t.Errorf("partition %d's sequence is %d, want the global floor 50", p, v)
		}
	}

	// Rolled back: one partition's records are above its sequence.
	f = Floors{Part: map[int]int64{2: 80}, Global: 90}
	r, err = b.CheckRollback(ctx, b.rdb, f)
	if err != nil || !r.RolledBack || r.Dropped != 4 {
		t.Fatalf("rolled-back Redis: %+v %v", r, err)
	}
	if entries() != 0 {
		t.Fatalf("%d cache entries and I leases survived the rollback", entries())
	}
	st, err := b.Stats(ctx)
	if err != nil || st.PendingDocuments != 3 {
		t.Fatalf("buffered writes after the rollback check: %+v %v, want 3 pending documents", st, err)
	}
	put, _ := change.ParsePut(s, "4", []byte(`{"n":1}`))
	seq, _, err := b.Write(ctx, "c", "4", put, s, WriteOptions{TTL: time.Minute})
	if err != nil || seq <= 90 {
		t.Fatalf("first write after the check got seq %d (%v), want above the floor 90", seq, err)
	}

	// Stores without partitions (MongoDB): all sequences below the highest
	// stamp is a rollback.
	r, err = b.CheckRollback(ctx, b.rdb, Floors{Part: map[int]int64{}, AnyPart: 1000, Global: 1000})
	if err != nil || !r.RolledBack {
		t.Fatalf("sequences below a partitionless store's stamps: %+v %v", r, err)
	}
}

func TestGlobEscape(t *testing.T) {
	if got := globEscape(`a*b?[c]\d`); got != `a\*b\?\[c\]\\d` {
		t.Errorf("globEscape = %q", got)
	}
}
