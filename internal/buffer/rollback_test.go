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
		bufferPut(t, b, s, id)
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
	var top int64
	for p := range b.parts {
		seqs[p], _ = b.rdb.Get(ctx, b.seqKey(p)).Int64()
		top = max(top, seqs[p])
	}
	if entries() != 4 {
		t.Fatalf("%d entries and I leases before the check, want 4", entries())
	}

	// Intact: every sequence at or above its partition's records.
	global := top + 50
	f := Floors{Part: map[int]int64{}, Global: global}
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
		if v, _ := b.rdb.Get(ctx, b.seqKey(p)).Int64(); v != global {
			t.Errorf("partition %d's sequence is %d, want the global floor %d", p, v, global)
		}
	}

	// Rolled back: one partition's records are above its sequence.
	f = Floors{Part: map[int]int64{2: global + 30}, Global: global + 40}
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
	if err != nil || seq <= global+40 {
		t.Fatalf("first write after the check got seq %d (%v), want above the floor %d", seq, err, global+40)
	}

	// Stores without partitions (MongoDB): all sequences below the highest
	// stamp is a rollback.
	r, err = b.CheckRollback(ctx, b.rdb, Floors{Part: map[int]int64{}, AnyPart: seq + 1e9, Global: seq + 1e9})
	if err != nil || !r.RolledBack {
		t.Fatalf("sequences below a partitionless store's stamps: %+v %v", r, err)
	}
}

// A Redis that goes back to older data without dropping a connection
// (DEBUG RELOAD, a proxy that switches servers under its connections)
// leaves every sequence where the snapshot had it. Nothing checks the node
// first, yet:
//   - a write of a partition the process saw give out a higher seq is
//     refused before it touches anything; Reseed's check (CheckRollback)
//     sees the sequence below what the process saw, drops the stale cache
//     entries and raises the sequence, and the write then goes in above
//     every seq given out before;
//   - a write of a partition the process knows nothing of still gets a seq
//     above every seq given out before the rollback (Redis's clock), so
//     the appliers cannot take it for a duplicate of an applied change.
func TestRollbackInPlace(t *testing.T) {
	b, s, ctx := newTestBuffer(t), schema(t), context.Background()
	part := b.Partition("c", "1")
	put, _ := change.ParsePut(s, "1", []byte(`{"n":1}`))
	before, _, err := b.Write(ctx, "c", "1", put, s, WriteOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// The rollback: the sequence and the cache entry as an older snapshot
	// held them.
	if err := b.rdb.Set(ctx, b.seqKey(part), 7, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.rdb.HSet(ctx, b.cacheKey(part, Member("c", "1")), "n", "0").Err(); err != nil {
		t.Fatal(err)
	}
	checks := 0
	var found Rollback
	b.Reseed = func(ctx context.Context) error {
		checks++
		r, err := b.CheckRollback(ctx, b.rdb, Floors{Part: map[int]int64{}})
		found = r
		return err
	}
	patch, _ := change.ParsePatch(s, []byte(`{"$inc":{"n":5}}`))
	seq, out, err := b.Write(ctx, "c", "1", patch, s, WriteOptions{TTL: time.Minute})
	if err != nil || out != Buffered || seq <= before {
		t.Fatalf("write after the rollback: seq %d %v %v, want buffered above %d", seq, out, err, before)
	}
	if checks != 1 || !found.RolledBack || found.Dropped == 0 {
		t.Fatalf("the write ran %d checks, the last found %+v; want one that found the rollback and dropped the stale entry", checks, found)
	}
	if n, err := b.rdb.Exists(ctx, b.cacheKey(part, Member("c", "1"))).Result(); err != nil || n != 0 {
		t.Fatalf("the stale cache entry survived the check (exists %d, %v)", n, err)
	}

	// A second Buffer — another sidecar — that never wrote here: nothing
	// refuses its write, and the clock keeps it above the seqs given out.
	b2 := New(b.rdb, b.prefix, b.parts, time.Minute)
	if err := b.rdb.Set(ctx, b.seqKey(part), 7, 0).Err(); err != nil {
		t.Fatal(err)
	}
	seq2, out, err := b2.Write(ctx, "c", "1", patch, s, WriteOptions{TTL: time.Minute})
	if err != nil || out != Buffered || seq2 <= seq {
		t.Fatalf("another sidecar's write after the rollback: seq %d %v %v, want buffered above %d", seq2, out, err, seq)
	}
}

func TestGlobEscape(t *testing.T) {
	if got := globEscape(`a*b?[c]\d`); got != `a\*b\?\[c\]\\d` {
		t.Errorf("globEscape = %q", got)
	}
}
