package buffer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/writeback/writeback/internal/change"
)

// An extension keeps a lease only while it is still the copy's and live: a
// write in between (by another sidecar or by the holder itself), a change
// the store rejected, a release, expiry, a hot mark or a waiting writer
// refuse it, and it moves the field to the new
// generation, so that a release of the old one no longer takes it away.
func TestExtendLeases(t *testing.T) {
	ctx, s := context.Background(), schema(t)
	holder, other := twoSidecars(t)
	put := func(b *Buffer, id string, n int, o WriteOptions) Outcome {
		t.Helper()
		c, _ := change.ParsePut(s, id, []byte(fmt.Sprintf(`{"n":%d}`, n)))
		o.TTL = time.Minute
		rs, errs := b.WriteBatch(ctx, []WriteRequest{{Coll: "c", ID: id, Change: c, Schema: s, Options: o}})
		if errs[0] != nil {
			t.Fatal(errs[0])
		}
		return rs[0].Outcome
	}
	lease := func(id string, gen uint64, ttl time.Duration) {
		t.Helper()
		res, err := holder.LeaseRead(ctx, []NearRead{{Coll: "c", ID: id, Gen: gen, TTL: ttl}})
		if err != nil || !res[0].Hit || res[0].Outcome != LeaseGranted {
			t.Fatalf("lease of %s: %+v %v", id, res, err)
		}
	}
	extend := func(id string, gen, next uint64) LeaseOutcome {
		t.Helper()
		res, err := holder.ExtendLeases(ctx, []NearExtend{{Coll: "c", ID: id, Gen: gen, NewGen: next, TTL: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	field := func(id string) string {
		v, _ := holder.rdb.HGet(ctx, holder.LeaseRecord("c", id), "holder").Result()
		return v
	}
	for id := range 9 {
		ttl := time.Second
		if id == 1 || id == 6 {
			ttl = 20 * time.Millisecond // expired by the time it is extended
		}
		put(holder, fmt.Sprint(id), 0, WriteOptions{})
		lease(fmt.Sprint(id), 1, ttl)
	}
	time.Sleep(50 * time.Millisecond)

	// Still the copy's: extended under the new generation, at least as
	// long as before.
	before := field("0")
	if got := extend("0", 1, 2); got != LeaseGranted {
		t.Fatalf("extension of a held lease: %v, want granted", got)
	}
	if after := field("0"); after[len(after)-2:] != ":2" || after < before {
		t.Fatalf("lease field %q after extending %q, want the new generation and no earlier expiry", after, before)
	}
	// The old generation no longer names it: neither its extension nor its
	// release counts any more.
	if got := extend("0", 1, 3); got != 0 {
		t.Fatalf("extension under a generation moved on: %v, want 0", got)
	}
	if err := holder.ReleaseLease(ctx, holder.LeaseRecord("c", "0"), 1, ""); err != nil || field("0") == "" {
		t.Fatalf("a release of the old generation took the extension away (%v)", err)
	}

	// An expired lease is not extended, even on a document nobody wrote:
	// a write may have gone ahead without waiting for the holder.
	if got := extend("6", 1, 10); got != 0 {
		t.Fatalf("extension of an expired lease: %v, want 0", got)
	}
	// Another sidecar's write drops the holders' fields before it is
	// visible (here the holder's lease had expired), so the copy's value
	// is stale and the extension is refused.
	if got := put(other, "1", 1, WriteOptions{Near: true}); got != Buffered {
		t.Fatalf("write with no live holder: %v", got)
	}
	if got := extend("1", 1, 4); got != 0 {
		t.Fatalf("extension after another sidecar's write: %v, want 0", got)
	}
	// The holder's own write, even one granted a new lease on the value it
	// left, is under another generation.
	if got := put(holder, "2", 1, WriteOptions{Near: true, Grant: 9}); got != Buffered {
		t.Fatalf("own write: %v", got)
	}
	if got := extend("2", 1, 5); got != 0 {
		t.Fatalf("extension after the holder's own write: %v, want 0", got)
	}
	// A write waiting for the holders (another holder's lease), or a hot
	// document, gets no extension.
	if err := holder.rdb.HSet(ctx, holder.LeaseRecord("c", "3"), "x", time.Now().Add(time.Minute).UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	if got := extend("3", 1, 6); got != LeaseRevoking {
		t.Fatalf("extension while a writer waits: %v, want revoking", got)
	}
	if err := holder.rdb.Set(ctx, holder.hotKey(holder.Partition("c", "4"), Member("c", "4")), "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if got := extend("4", 1, 7); got != LeaseHot {
		t.Fatalf("extension of a hot document: %v, want hot", got)
	}
	// A change the store rejected for good leaves the document with the
	// store's value: the holder's copy, which may contain the change, is
	// not extended.
	if _, err := holder.Reject(ctx, "c", "7", 1<<62, nil); err != nil {
		t.Fatal(err)
	}
	if got := extend("7", 1, 11); got != 0 {
		t.Fatalf("extension after a rejected change: %v, want 0", got)
	}
	// A write that waits for no holder (a sidecar without the near cache)
	// still takes the lease's name away.
	if got := put(other, "8", 1, WriteOptions{}); got != Buffered {
		t.Fatalf("write without the near cache: %v", got)
	}
	if got := extend("8", 1, 12); got != 0 {
		t.Fatalf("extension after a write without the near cache: %v, want 0", got)
	}
	// Released: nothing to extend.
	if err := holder.ReleaseLease(ctx, holder.LeaseRecord("c", "5"), 1, ""); err != nil {
		t.Fatal(err)
	}
	if got := extend("5", 1, 8); got != 0 {
		t.Fatalf("extension of a released lease: %v, want 0", got)
	}
}

// twoSidecars returns the buffers of two sidecars of one deployment,
// "holder" and "other".
func twoSidecars(t *testing.T) (holder, other *Buffer) {
	holder, other = newTestBuffer(t), newTestBuffer(t)
	other.prefix = holder.prefix
	holder.Instance, other.Instance = "holder", "other"
	return holder, other
}
