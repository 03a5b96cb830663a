package buffer

import (
	"context"
	"fmt"
	"maps"
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
		return putN(t, b, s, id, n, o)
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
	for id := range 11 {
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
	// Its own write that asks for no lease (it held no copy), or whose
	// grant is refused (the document is hot), takes the name away too.
	if got := put(holder, "9", 1, WriteOptions{Near: true}); got != Buffered {
		t.Fatalf("own write without a grant: %v", got)
	}
	if got := extend("9", 1, 13); got != 0 {
		t.Fatalf("extension after the holder's own write without a grant: %v, want 0", got)
	}
	if got := put(holder, "10", 1, WriteOptions{Near: true, HotWindow: time.Minute}); got != Buffered {
		t.Fatalf("hot write: %v", got)
	}
	if got := put(holder, "10", 2, WriteOptions{Near: true, Grant: 14}); got != Buffered {
		t.Fatalf("own write of a hot document: %v", got)
	}
	if f := field("10"); f != "" {
		t.Fatalf("lease field %q after the holder's own write of a hot document, want none", f)
	}
	// A write waiting for the holders (another holder's lease) gets no
	// extension.
	if err := holder.rdb.HSet(ctx, holder.LeaseRecord("c", "3"), "x", time.Now().Add(time.Minute).UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	if got := extend("3", 1, 6); got != LeaseRevoking {
		t.Fatalf("extension while a writer waits: %v, want revoking", got)
	}
	// A document a write made hot is not extended: the write took the
	// lease's name away (extendScript does not look at the hot mark). The
	// holder leases it again, and is refused: it is hot.
	if got := put(holder, "4", 1, WriteOptions{Near: true, HotWindow: time.Minute}); got != Buffered {
		t.Fatalf("hot write: %v", got)
	}
	if got := extend("4", 1, 7); got != 0 {
		t.Fatalf("extension of a document written hot: %v, want 0", got)
	}
	if res, err := holder.LeaseRead(ctx, []NearRead{{Coll: "c", ID: "4", Gen: 15, TTL: time.Second}}); err != nil || !res[0].Hit || res[0].Outcome != LeaseHot {
		t.Fatalf("lease of a document written hot: %+v %v, want hot", res, err)
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

	// Many at once, of several partitions, each on its own: one written
	// since its grant, the others extended.
	var many []NearExtend
	for i := range 12 {
		id := fmt.Sprint("m", i)
		put(holder, id, 0, WriteOptions{})
		lease(id, 30, time.Second)
		many = append(many, NearExtend{Coll: "c", ID: id, Gen: 30, NewGen: uint64(31 + i), TTL: time.Second})
	}
	if got := put(other, "m5", 1, WriteOptions{Near: true}); got != Leased {
		t.Fatalf("write of a leased document: %v, want Leased", got)
	}
	if err := holder.ReleaseLease(ctx, holder.LeaseRecord("c", "m7"), 30, ""); err != nil {
		t.Fatal(err)
	}
	got, err := holder.ExtendLeases(ctx, many)
	if err != nil {
		t.Fatal(err)
	}
	parts := map[int]bool{}
	for i, r := range many {
		parts[holder.Partition("c", r.ID)] = true
		want := LeaseGranted
		switch r.ID {
		case "m5":
			want = LeaseRevoking // a writer waits for the holder
		case "m7":
			want = 0 // released
		}
		if got[i] != want {
			t.Errorf("extension of %s among many: %v, want %v", r.ID, got[i], want)
		}
	}
	if len(parts) < 2 {
		t.Fatalf("the documents fell in %d partition; want several", len(parts))
	}
}

// A fill after a miss leases the value it installs to the reader, as a
// lease read of a hit would: another sidecar's write then waits for the
// reader. A write since the miss voids the fill and its lease; a hot
// document or a waiting writer gets the value installed but no lease.
func TestFillLease(t *testing.T) {
	ctx, s := context.Background(), schema(t)
	holder, other := twoSidecars(t)
	write := func(b *Buffer, id string, n int, o WriteOptions) Outcome {
		t.Helper()
		return putN(t, b, s, id, n, o)
	}
	// miss evicts id's cache entry and reads it, which misses and takes an
	// I lease under the token it returns.
	miss := func(id string) string {
		t.Helper()
		if err := holder.Evict(ctx, "c", id); err != nil {
			t.Fatal(err)
		}
		tok := NewToken()
		r, err := holder.Read(ctx, "c", id, tok)
		if err != nil || r.Hit {
			t.Fatalf("read of evicted %s: %+v %v", id, r, err)
		}
		return tok
	}
	fill := func(id, tok string, gen uint64) (bool, LeaseOutcome) {
		t.Helper()
		doc := change.Doc{"id": []byte(`"` + id + `"`), "n": []byte("1")}
		ok, o, err := holder.FillLease(ctx, NearRead{Coll: "c", ID: id, Gen: gen, TTL: time.Minute}, tok, doc, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return ok, o
	}
	field := func(id string) string {
		v, _ := holder.rdb.HGet(ctx, holder.LeaseRecord("c", id), "holder").Result()
		return v
	}
	for id := range 5 {
		write(other, fmt.Sprint(id), 1, WriteOptions{})
	}

	// Granted: the entry is the value, the field names the generation, and
	// another sidecar's write waits for the holder.
	if ok, o := fill("0", miss("0"), 7); !ok || o != LeaseGranted {
		t.Fatalf("fill of 0: installed %v, outcome %v; want installed and granted", ok, o)
	}
	if h, _ := holder.rdb.HGetAll(ctx, holder.cacheKey(holder.Partition("c", "0"), Member("c", "0"))).Result(); h["n"] != "1" {
		t.Fatalf("entry after the fill: %v", h)
	}
	if f := field("0"); len(f) < 2 || f[len(f)-2:] != ":7" {
		t.Fatalf("lease field %q after the fill, want generation 7", f)
	}
	if got := write(other, "0", 2, WriteOptions{Near: true}); got != Leased {
		t.Fatalf("another sidecar's write of a document leased by a fill: %v, want Leased", got)
	}

	// A write between the miss and the fill voids both.
	tok := miss("1")
	if got := write(other, "1", 2, WriteOptions{Near: true}); got != Buffered {
		t.Fatalf("write with no holder: %v", got)
	}
	if ok, o := fill("1", tok, 8); ok || o != 0 {
		t.Fatalf("fill after a write: installed %v, outcome %v; want neither", ok, o)
	}
	if f := field("1"); f != "" {
		t.Fatalf("lease field %q after a voided fill", f)
	}

	// Hot, or a writer waiting: installed, not leased.
	if err := holder.rdb.Set(ctx, holder.hotKey(holder.Partition("c", "2"), Member("c", "2")), "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, o := fill("2", miss("2"), 9); !ok || o != LeaseHot || field("2") != "" {
		t.Fatalf("fill of a hot document: installed %v, outcome %v, field %q; want installed, hot, none", ok, o, field("2"))
	}
	if err := holder.rdb.HSet(ctx, holder.LeaseRecord("c", "3"), "x", time.Now().Add(time.Minute).UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, o := fill("3", miss("3"), 10); !ok || o != LeaseRevoking || field("3") != "" {
		t.Fatalf("fill while a writer waits: installed %v, outcome %v, field %q; want installed, revoking, none", ok, o, field("3"))
	}

	// A missing document: nothing installed, nothing leased, the I lease
	// given back.
	tok = miss("4")
	if ok, o, err := holder.FillLease(ctx, NearRead{Coll: "c", ID: "4", Gen: 11, TTL: time.Minute}, tok, nil, time.Minute); err != nil || ok || o != 0 || field("4") != "" {
		t.Fatalf("fill of nothing: installed %v, outcome %v, field %q, %v", ok, o, field("4"), err)
	}
	if n, _ := holder.rdb.HLen(ctx, holder.ileaseKey(holder.Partition("c", "4"), Member("c", "4"))).Result(); n != 0 {
		t.Fatalf("%d I leases left after a fill of nothing", n)
	}
}

// putN buffers a put of document id of collection "c", {"n": n}, cached
// for a minute, through b, and returns its outcome.
func putN(t *testing.T, b *Buffer, s *change.Schema, id string, n int, o WriteOptions) Outcome {
	t.Helper()
	c, _ := change.ParsePut(s, id, []byte(fmt.Sprintf(`{"n":%d}`, n)))
	o.TTL = time.Minute
	rs, errs := b.WriteBatch(context.Background(), []WriteRequest{{Coll: "c", ID: id, Change: c, Schema: s, Options: o}})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	return rs[0].Outcome
}

// twoSidecars returns the buffers of two sidecars of one deployment,
// "holder" and "other".
func twoSidecars(t *testing.T) (holder, other *Buffer) {
	holder, other = newTestBuffer(t), newTestBuffer(t)
	other.prefix = holder.prefix
	holder.Instance, other.Instance = "holder", "other"
	return holder, other
}

// A granted write that only sets fields, by a holder whose copy's lease is
// still named and live, leaves the entry as that copy with its sets: the
// script answers without the entry and the buffer computes it. In every
// other case — the copy's generation no longer named (a write came in
// between), its lease expired, a change the script computes itself — the
// entry comes from Redis.
func TestWriteGrantFromCopy(t *testing.T) {
	ctx, s := context.Background(), schema(t)
	holder, other := twoSidecars(t)
	write := func(b *Buffer, id, body string, o WriteOptions) WriteResult {
		t.Helper()
		var c change.Change
		if body[0] == '{' && body[1] == '"' && body[2] == '$' {
			c = mustParse(t, s, body)
		} else {
			c, _ = change.ParsePut(s, id, []byte(body))
		}
		o.TTL, o.Token = time.Minute, NewToken()
		rs, errs := b.WriteBatch(ctx, []WriteRequest{{Coll: "c", ID: id, Change: c, Schema: s, Options: o}})
		if errs[0] != nil || rs[0].Outcome != Buffered {
			t.Fatalf("write %s %s: %+v %v", id, body, rs[0], errs[0])
		}
		return rs[0]
	}
	lease := func(id string, gen uint64, ttl time.Duration) map[string]string {
		t.Helper()
		res, err := holder.LeaseRead(ctx, []NearRead{{Coll: "c", ID: id, Gen: gen, TTL: ttl}})
		if err != nil || !res[0].Hit || res[0].Outcome != LeaseGranted {
			t.Fatalf("lease of %s: %+v %v", id, res, err)
		}
		return res[0].Hash
	}
	entry := func(id string) map[string]string {
		t.Helper()
		h, err := holder.rdb.HGetAll(ctx, holder.cacheKey(holder.Partition("c", id), Member("c", id))).Result()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	field := func(id string) string {
		v, _ := holder.rdb.HGet(ctx, holder.LeaseRecord("c", id), "holder").Result()
		return v
	}
	grant := func(copy map[string]string, gen uint64) WriteOptions {
		return WriteOptions{Near: true, Grant: gen, LeaseTTL: time.Second, Copy: copy, CopyGen: gen - 1}
	}

	// The copy is named and live: the entry is the copy with the sets. A
	// copy that differs from Redis's entry in a field the write leaves
	// alone shows where the result came from.
	for id := range 6 {
		write(holder, fmt.Sprint(id), `{"n":1}`, WriteOptions{})
	}
	copy0 := lease("0", 1, time.Minute)
	marked := maps.Clone(copy0)
	marked["f"] = "7.5"
	got := write(holder, "0", `{"$set":{"n":2}}`, grant(marked, 2))
	if want := map[string]string{"id": copy0["id"], "n": "2", "f": "7.5"}; !maps.Equal(got.Entry, want) {
		t.Fatalf("entry from the copy: %v, want %v (Redis holds %v)", got.Entry, want, entry("0"))
	}
	if f := field("0"); f[len(f)-2:] != ":2" {
		t.Fatalf("lease field %q after the grant, want generation 2", f)
	}
	// And with the true copy, the computed entry is Redis's, unset fields
	// included.
	got = write(holder, "0", `{"$set":{"n":3},"$unset":{"f":""}}`, grant(got.Entry, 3))
	if want := entry("0"); !maps.Equal(got.Entry, want) {
		t.Fatalf("entry from the copy: %v, want Redis's %v", got.Entry, want)
	}

	// A counting write (the Redis protocol's HSET) too, whose reply also
	// carries what it found.
	marked = maps.Clone(got.Entry)
	marked["f"] = "8.5"
	o := grant(marked, 4)
	o.Count = true
	got = write(holder, "0", `{"$set":{"n":4}}`, o)
	if want := map[string]string{"id": copy0["id"], "n": "4", "f": "8.5"}; !maps.Equal(got.Entry, want) {
		t.Fatalf("entry of a counting write from the copy: %v, want %v (Redis holds %v)", got.Entry, want, entry("0"))
	}

	// Another sidecar wrote after the copy's grant (one without this
	// collection's near cache, which does not wait for holders): the lease
	// field is gone, and the entry comes from Redis, with the other write
	// in it.
	copy1 := lease("1", 1, time.Minute)
	write(other, "1", `{"$set":{"n":5}}`, WriteOptions{})
	got = write(holder, "1", `{"$set":{"f":1.5}}`, grant(copy1, 2))
	if want := entry("1"); !maps.Equal(got.Entry, want) || got.Entry["n"] != "5" {
		t.Fatalf("entry after another sidecar's write: %v, want Redis's %v", got.Entry, want)
	}
	// The field names a newer generation than the copy's (a renewal moved
	// it on): from Redis.
	copy2 := lease("2", 1, time.Minute)
	lease("2", 4, time.Minute)
	stale := maps.Clone(copy2)
	stale["f"] = "7.5"
	got = write(holder, "2", `{"$set":{"n":2}}`, grant(stale, 2))
	if want := entry("2"); !maps.Equal(got.Entry, want) {
		t.Fatalf("entry under a generation moved on: %v, want Redis's %v", got.Entry, want)
	}
	// The copy's lease expired: from Redis.
	copy3 := lease("3", 1, 20*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	stale = maps.Clone(copy3)
	stale["f"] = "7.5"
	got = write(holder, "3", `{"$set":{"n":2}}`, grant(stale, 2))
	if want := entry("3"); !maps.Equal(got.Entry, want) {
		t.Fatalf("entry after the copy's lease expired: %v, want Redis's %v", got.Entry, want)
	}
	// A write that carries a base (a second attempt, after NeedBase) may
	// install it: from Redis, even with the copy's field still named.
	copy5 := lease("5", 1, time.Minute)
	stale = maps.Clone(copy5)
	stale["f"] = "7.5"
	o = grant(stale, 2)
	o.HaveBase, o.Base = true, change.Doc{"id": []byte("5"), "n": []byte("1")}
	got = write(holder, "5", `{"$set":{"n":2}}`, o)
	if want := entry("5"); !maps.Equal(got.Entry, want) {
		t.Fatalf("entry of a write with a base: %v, want Redis's %v", got.Entry, want)
	}
	// An increment is the script's to compute: from Redis.
	copy4 := lease("4", 1, time.Minute)
	stale = maps.Clone(copy4)
	stale["f"] = "7.5"
	got = write(holder, "4", `{"$inc":{"n":2}}`, grant(stale, 2))
	if want := entry("4"); !maps.Equal(got.Entry, want) || got.Entry["n"] != "3" {
		t.Fatalf("entry after an increment: %v, want Redis's %v", got.Entry, want)
	}
}

// BenchmarkWriteGrant measures Redis's time per granted write of one field
// of a leased 10 × 100 B document (a YCSB update through a sidecar that
// holds the document), with the entry sent back (copy=false) and computed
// from the writer's copy (copy=true): redis-µs/write is EVALSHA's time in
// INFO commandstats. Use a Redis nothing else uses
// (WRITEBACK_TEST_REDIS).
func BenchmarkWriteGrant(bm *testing.B) {
	for _, fromCopy := range []bool{false, true} {
		bm.Run(fmt.Sprintf("copy=%v", fromCopy), func(bm *testing.B) {
			b, ctx := newTestBuffer(bm), context.Background()
			b.Instance = "holder"
			s := putYCSBDoc(bm, b)
			res, err := b.LeaseRead(ctx, []NearRead{{Coll: "c", ID: "d", Gen: 1, TTL: time.Hour}})
			if err != nil || !res[0].Hit {
				bm.Fatalf("lease: %+v %v", res, err)
			}
			copy, gen := res[0].Hash, uint64(1)
			before := evalshaUsec(bm, b)
			bm.ResetTimer()
			for i := range bm.N {
				patch, err := change.ParsePatch(s, []byte(`{"$set":{"field3":`+ycsbValue(i)+`}}`))
				if err != nil {
					bm.Fatal(err)
				}
				o := WriteOptions{TTL: time.Hour, Token: NewToken(), Count: true, Near: true, Grant: gen + 1, LeaseTTL: time.Hour}
				if fromCopy {
					o.Copy, o.CopyGen = copy, gen
				}
				rs, errs := b.WriteBatch(ctx, []WriteRequest{{Coll: "c", ID: "d", Change: patch, Schema: s, Options: o}})
				if errs[0] != nil || rs[0].Entry == nil {
					bm.Fatalf("write: %+v %v", rs[0], errs[0])
				}
				copy, gen = rs[0].Entry, gen+1
			}
			bm.StopTimer()
			bm.ReportMetric(float64(evalshaUsec(bm, b)-before)/float64(bm.N), "redis-µs/write")
		})
	}
}

// ycsbValue is the JSON text of a YCSB-sized (100-byte) string field
// value numbered i.
func ycsbValue(i int) string { return fmt.Sprintf(`"%098d"`, i) }

// putYCSBDoc buffers document "d" of collection "c" as a YCSB record — an
// id and fields field0…field9 of ycsbValue(0…9) — cached for an hour, and
// returns its schema.
func putYCSBDoc(tb testing.TB, b *Buffer) *change.Schema {
	tb.Helper()
	cols := []change.Column{{Name: "id", Type: change.TypeText}}
	for i := range 10 {
		cols = append(cols, change.Column{Name: fmt.Sprintf("field%d", i), Type: change.TypeText, Nullable: true})
	}
	s, err := change.NewSchema("id", cols)
	if err != nil {
		tb.Fatal(err)
	}
	doc := `{"id":"d"`
	for i := range 10 {
		doc += fmt.Sprintf(`,"field%d":%s`, i, ycsbValue(i))
	}
	put, err := change.ParsePut(s, "d", []byte(doc+"}"))
	if err != nil {
		tb.Fatal(err)
	}
	if _, _, err := b.Write(context.Background(), "c", "d", put, s, WriteOptions{TTL: time.Hour}); err != nil {
		tb.Fatal(err)
	}
	return s
}
