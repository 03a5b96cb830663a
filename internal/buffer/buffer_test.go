package buffer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/testenv"
)

func newTestBuffer(t testing.TB) *Buffer {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	prefix := testenv.UniqueName(t, "buf")
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		rdb.Close()
	})
	return New(rdb, prefix, 4, 500*time.Millisecond)
}

// bufferPut buffers a put of {"n":1} as document id of collection "c"
// and returns its seq.
func bufferPut(tb testing.TB, b *Buffer, s *change.Schema, id string) int64 {
	tb.Helper()
	put, err := change.ParsePut(s, id, []byte(`{"n":1}`))
	if err != nil {
		tb.Fatal(err)
	}
	seq, out, err := b.Write(context.Background(), "c", id, put, s, WriteOptions{TTL: time.Minute})
	if err != nil || out != Buffered {
		tb.Fatalf("put %s: %v %v", id, out, err)
	}
	return seq
}

func schema(t testing.TB) *change.Schema {
	t.Helper()
	s, err := change.NewSchema("id", []change.Column{{Name: "id", Type: change.TypeInt}, {Name: "n", Type: change.TypeInt, Nullable: true}, {Name: "f", Type: change.TypeFloat, Nullable: true}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustParse(t *testing.T, s *change.Schema, body string) change.Change {
	t.Helper()
	c, err := change.ParsePatch(s, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The counters stay exact through writes, trims of a prefix and rejects,
// and a trim leaves changes buffered after the applied prefix in place.
func TestCountersTrimAndReject(t *testing.T) {
	b, s, ctx := newTestBuffer(t), schema(t), context.Background()
	put, _ := change.ParsePut(s, "1", []byte(`{"n":1}`))
	seq1, out, err := b.Write(ctx, "c", "1", put, s, WriteOptions{TTL: time.Minute})
	if err != nil || out != Buffered {
		t.Fatalf("put: %v %v", out, err)
	}
	var seqs []int64
	for range 3 {
		seq, out, err := b.Write(ctx, "c", "1", mustParse(t, s, `{"$inc":{"n":2}}`), s, WriteOptions{TTL: time.Minute, Token: NewToken()})
		if err != nil || out != Buffered || seq <= seq1 {
			t.Fatalf("inc: seq %d %v %v", seq, out, err)
		}
		seqs = append(seqs, seq)
	}
	// The cached hash was updated in place by the script.
	r, err := b.Read(ctx, "c", "1", NewToken())
	if err != nil || !r.Hit || string(r.Doc["n"]) != "7" {
		t.Fatalf("read: %+v %v; want a hit with n=7", r, err)
	}
	st, _ := b.Stats(ctx)
	if st.PendingChanges != 4 || st.PendingDocuments != 1 || st.PinnedBytes <= 0 {
		t.Fatalf("stats after 4 writes: %+v", st)
	}
	n, err := b.Trim(ctx, []Applied{{DocRef: b.Ref("c", "1"), LastSeq: seqs[0]}})
	if err != nil || n != 2 {
		t.Fatalf("trim: %d %v; want 2 removed", n, err)
	}
	cs, _ := b.Changes(ctx, []DocRef{b.Ref("c", "1")}, 100)
	if len(cs[0]) != 2 || cs[0][0].Seq != seqs[1] {
		t.Fatalf("after trim: %+v", cs[0])
	}
	if _, err := b.Reject(ctx, "c", "1", seqs[2], &DeadLetter{Collection: "c", ID: "1", Seq: seqs[2], Error: "boom", Changes: json.RawMessage(`[]`)}); err != nil {
		t.Fatal(err)
	}
	st, _ = b.Stats(ctx)
	dead, err := b.rdb.MemoryUsage(ctx, b.deadKey(b.Partition("c", "1"))).Result()
	if err != nil {
		t.Fatal(err)
	}
	if st.PendingChanges != 0 || st.PendingDocuments != 0 || st.ChangeBytes != 0 || st.PinnedBytes != dead || st.DeadLetters != 1 {
		t.Fatalf("stats after trim+reject: %+v; want all 0 but one dead letter, pinning its list's %d bytes", st, dead)
	}
	if r, _ := b.Read(ctx, "c", "1", NewToken()); r.Hit {
		t.Fatal("the rejected changes' cache entry survived")
	}
	dls, err := b.DeadLetters(ctx, 10)
	if err != nil || len(dls) != 1 || dls[0].Error != "boom" {
		t.Fatalf("dead letters: %+v %v", dls, err)
	}
}

// A patch of an uncached, non-pending document needs its base; a write
// between the two calls voids the token; a missing base is NotFound.
func TestPatchNeedsBaseAndVoid(t *testing.T) {
	b, s, ctx := newTestBuffer(t), schema(t), context.Background()
	inc := mustParse(t, s, `{"$inc":{"n":1}}`)
	tok := NewToken()
	_, out, _ := b.Write(ctx, "c", "2", inc, s, WriteOptions{Token: tok})
	if out != NeedBase {
		t.Fatalf("first call: %v, want NeedBase", out)
	}
	// A concurrent PUT slips in.
	put, _ := change.ParsePut(s, "2", []byte(`{"n":10}`))
	if _, out, _ := b.Write(ctx, "c", "2", put, s, WriteOptions{}); out != Buffered {
		t.Fatal(out)
	}
	b.Evict(ctx, "c", "2")
	base := change.Doc{"id": json.RawMessage("2"), "n": json.RawMessage("0"), "f": json.RawMessage("null")}
	// The PUT is pending now, so existence is known from the buffer and the
	// stale base is ignored.
	if _, out, _ := b.Write(ctx, "c", "2", inc, s, WriteOptions{Token: tok, HaveBase: true, Base: base}); out != Buffered {
		t.Fatalf("with a pending put: %v", out)
	}
	// Fresh document: the token is voided by a write between the calls.
	tok = NewToken()
	if _, out, _ := b.Write(ctx, "c", "3", inc, s, WriteOptions{Token: tok}); out != NeedBase {
		t.Fatal(out)
	}
	if _, err := b.rdb.Del(ctx, b.ileaseKey(b.Partition("c", "3"), Member("c", "3"))).Result(); err != nil {
		t.Fatal(err)
	}
	if _, out, _ := b.Write(ctx, "c", "3", inc, s, WriteOptions{Token: tok, HaveBase: true, Base: base}); out != Voided {
		t.Fatalf("after the lease was voided: %v, want Voided", out)
	}
	tok = NewToken()
	b.Write(ctx, "c", "4", inc, s, WriteOptions{Token: tok})
	if _, out, _ := b.Write(ctx, "c", "4", inc, s, WriteOptions{Token: tok, HaveBase: true}); out != NotFound {
		t.Fatalf("no row: %v, want NotFound", out)
	}
	if keys, _ := b.rdb.Keys(ctx, b.prefix+":*:i:*").Result(); len(keys) != 0 {
		t.Errorf("I leases left behind: %v", keys)
	}
}

// A fill installs only while its I lease holds.
func TestFillOnlyWithValidLease(t *testing.T) {
	b, s, ctx := newTestBuffer(t), schema(t), context.Background()
	doc := change.Doc{"id": json.RawMessage("5"), "n": json.RawMessage("1"), "f": json.RawMessage("null")}
	tok := NewToken()
	if r, _ := b.Read(ctx, "c", "5", tok); r.Hit {
		t.Fatal("hit on an empty cache")
	}
	put, _ := change.ParsePut(s, "5", []byte(`{"n":2}`))
	b.Write(ctx, "c", "5", put, s, WriteOptions{Invalidate: true})
	if ok, _ := b.Fill(ctx, "c", "5", tok, doc, time.Minute); ok {
		t.Fatal("a fill installed a value older than a write that came after its miss")
	}
	tok = NewToken()
	b.Read(ctx, "c", "5", tok)
	if ok, _ := b.Fill(ctx, "c", "5", tok, doc, time.Minute); !ok {
		t.Fatal("a fill with a valid lease was refused")
	}
}

func TestOwnershipLeases(t *testing.T) {
	b, ctx := newTestBuffer(t), context.Background()
	if ok, _ := b.Acquire(ctx, 1, "a", time.Second); !ok {
		t.Fatal("a could not take a free partition")
	}
	if ok, _ := b.Acquire(ctx, 1, "b", time.Second); ok {
		t.Fatal("b took a partition a owns")
	}
	if ok, _ := b.Acquire(ctx, 1, "a", time.Second); !ok {
		t.Fatal("a could not renew")
	}
	b.Release(ctx, 1, "b") // not b's: no effect
	if ok, _ := b.Acquire(ctx, 1, "b", time.Second); ok {
		t.Fatal("b's release freed a's partition")
	}
	b.Release(ctx, 1, "a")
	if ok, _ := b.Acquire(ctx, 1, "b", time.Second); !ok {
		t.Fatal("b could not take a released partition")
	}
	if n, _ := b.Heartbeat(ctx, "a", time.Second); n != 1 {
		t.Fatalf("live = %d", n)
	}
	if n, _ := b.Heartbeat(ctx, "b", time.Second); n != 2 {
		t.Fatalf("live = %d", n)
	}
	b.Leave(ctx, "a")
	if n, _ := b.Heartbeat(ctx, "b", time.Second); n != 1 {
		t.Fatalf("live after a left = %d", n)
	}
	// Above Redis's clock in µs (the sequences' floor), and exact in Lua.
	const floor = 1 << 52
	if err := b.RaiseSeq(ctx, 2, floor); err != nil {
		t.Fatal(err)
	}
	// Sequences continue above what the store recorded as applied.
	s := schema(t)
	id := "0"
	for i := 0; b.Partition("c", id) != 2; i++ {
		id = fmt.Sprint(i)
	}
	put, _ := change.ParsePut(s, id, []byte(`{}`))
	if seq, _, _ := b.Write(ctx, "c", id, put, s, WriteOptions{}); seq != floor+1 {
		t.Fatalf("seq after RaiseSeq(%d) = %d, want %d", int64(floor), seq, int64(floor+1))
	}
}

// A reader that missed while a change was buffered must not install a value
// containing it once the store rejected it.
func TestRejectVoidsFills(t *testing.T) {
	b, s, ctx := newTestBuffer(t), schema(t), context.Background()
	put, _ := change.ParsePut(s, "9", []byte(`{"n":1}`))
	seq, _, err := b.Write(ctx, "c", "9", put, s, WriteOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	b.Evict(ctx, "c", "9")
	tok := NewToken()
	r, err := b.Read(ctx, "c", "9", tok) // the miss sees the put
	if err != nil || r.Hit || len(r.Pending) != 1 {
		t.Fatalf("read: %+v %v", r, err)
	}
	if _, err := b.Reject(ctx, "c", "9", seq, nil); err != nil {
		t.Fatal(err)
	}
	doc, _ := change.ApplyAll(nil, r.Pending)
	if ok, _ := b.Fill(ctx, "c", "9", tok, doc, time.Minute); ok {
		t.Fatal("a value containing a rejected change was installed in the cache")
	}
}

// A sequence lost by Redis is recreated through Reseed before the write is
// buffered, never restarted at 1 below the store's applied records.
func TestLostSequenceIsReseeded(t *testing.T) {
	b, s, ctx := newTestBuffer(t), schema(t), context.Background()
	reseeds := 0
	seqk := b.seqKey(b.Partition("c", "1"))
	b.Reseed = func(ctx context.Context) error {
		reseeds++
		// The refused write left the sequence missing: its SET is undone.
		if n, err := b.rdb.Exists(ctx, seqk).Result(); err != nil || n != 0 {
			t.Errorf("the refused write left the sequence (%d, %v)", n, err)
		}
		for p := range b.Partitions() {
			if err := b.RaiseSeq(ctx, p, 1<<52); err != nil {
				return err
			}
		}
		return nil
	}
	put, _ := change.ParsePut(s, "1", []byte(`{"n":1}`))
	if _, err := b.rdb.Del(ctx, b.seqKey(b.Partition("c", "1"))).Result(); err != nil {
		t.Fatal(err)
	}
	seq, out, err := b.Write(ctx, "c", "1", put, s, WriteOptions{})
	if err != nil || out != Buffered || reseeds != 1 || seq != 1<<52+1 {
		t.Fatalf("write after losing the sequence: seq %d, %v, %v, %d reseeds; want seq %d after one reseed", seq, out, err, reseeds, int64(1<<52+1))
	}
	// The sequence is ahead of Redis's clock now: the next writes, two in
	// one call, count on from it, and the key keeps the last.
	other := "2" // a document of the same partition
	for i := 2; b.Partition("c", other) != b.Partition("c", "1"); i++ {
		other = strconv.Itoa(i)
	}
	put2, _ := change.ParsePut(s, other, []byte(`{"n":2}`))
	rs, errs := b.WriteBatch(ctx, []WriteRequest{
		{Coll: "c", ID: "1", Change: put, Schema: s},
		{Coll: "c", ID: other, Change: put2, Schema: s},
	})
	if errs[0] != nil || errs[1] != nil || rs[0].Seq != 1<<52+2 || rs[1].Seq != 1<<52+3 {
		t.Fatalf("writes ahead of the clock: %+v %v; want seqs %d and %d", rs, errs, int64(1<<52+2), int64(1<<52+3))
	}
	// A write that buffers nothing (a patch that needs its base) leaves the
	// sequence where it was, ahead of the clock.
	missing := "3" // a document of the same partition, never written
	for i := 3; b.Partition("c", missing) != b.Partition("c", "1") || missing == other; i++ {
		missing = strconv.Itoa(i)
	}
	if _, out, err := b.Write(ctx, "c", missing, mustParse(t, s, `{"$inc":{"n":1}}`), s, WriteOptions{Token: NewToken()}); err != nil || out != NeedBase {
		t.Fatalf("patch of a missing document: %v %v; want NeedBase", out, err)
	}
	if v, err := b.rdb.Get(ctx, seqk).Int64(); err != nil || v != 1<<52+3 {
		t.Fatalf("the sequence holds %d (%v); want %d", v, err, int64(1<<52+3))
	}
}

// A batch's writes share script calls — several per partition, several
// partitions per call, more writes of one partition than a call holds —
// and each is still its own step: its own sequence number, in order within
// a document's partition, with exact counters and pending index.
func TestWriteBatchSharesCalls(t *testing.T) {
	b, s, ctx := newTestBuffer(t), schema(t), context.Background()
	var reqs []WriteRequest
	for i := range 3*maxCallWrites + 7 {
		id := fmt.Sprint(i % 150)
		body := fmt.Sprintf(`{"n":%d}`, i)
		put, err := change.ParsePut(s, id, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, WriteRequest{Coll: "c", ID: id, Change: put, Schema: s, Options: WriteOptions{TTL: time.Minute}})
	}
	// A batch holds no two writes of one document (WriteFields' contract);
	// split it where a document comes back.
	var results []WriteResult
	for lo := 0; lo < len(reqs); lo += 150 {
		rs, errs := b.WriteBatch(ctx, reqs[lo:min(lo+150, len(reqs))])
		for i, err := range errs {
			if err != nil || rs[i].Outcome != Buffered {
				t.Fatalf("write %d: %+v %v", lo+i, rs[i], err)
			}
		}
		results = append(results, rs...)
	}
	last := map[int]int64{} // partition → last seq
	for i, r := range results {
		p := b.Partition("c", reqs[i].ID)
		if r.Seq <= last[p] {
			t.Fatalf("write %d: seq %d after %d in partition %d", i, r.Seq, last[p], p)
		}
		last[p] = r.Seq
	}
	st, err := b.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var bytes int64
	members := map[string]bool{}
	for p := range b.Partitions() {
		ms, err := b.rdb.ZRange(ctx, b.pendingKey(p), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			members[m] = true
			es, err := b.rdb.LRange(ctx, b.bwKey(p, m), 0, -1).Result()
			if err != nil || len(es) == 0 {
				t.Fatalf("pending %s has no buffered write: %v", m, err)
			}
			for _, e := range es {
				bytes += int64(len(e))
			}
		}
	}
	if st.PendingChanges != int64(len(reqs)) || st.PendingDocuments != 150 || len(members) != 150 || st.ChangeBytes != bytes ||
		st.PinnedBytes != bytes+150*PendingDocOverhead {
		t.Fatalf("stats %+v, %d pending members, %d bytes buffered; want %d changes, 150 documents, the bytes exact", st, len(members), bytes, len(reqs))
	}
	for id := range 150 {
		if !members[Member("c", fmt.Sprint(id))] {
			t.Fatalf("document %d is not in the pending index", id)
		}
	}
}

// A write Redis refuses fails alone: the writes before and after it in the
// same call are buffered, and counted.
func TestWriteBatchFailureIsPerWrite(t *testing.T) {
	b, s, ctx := newTestBuffer(t), schema(t), context.Background()
	ids := []string{"1", "2", "3"}
	// All three in one partition, hence one call and one group.
	for p := range 1 << 20 {
		id := fmt.Sprint(p)
		if b.Partition("c", id) == b.Partition("c", "1") && id != "1" {
			if ids[1] == "2" {
				ids[1] = id
			} else {
				ids[2] = id
				break
			}
		}
	}
	// The middle document's buffered write is not a list.
	if err := b.rdb.Set(ctx, b.bwKey(b.Partition("c", ids[1]), Member("c", ids[1])), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var reqs []WriteRequest
	for _, id := range ids {
		put, _ := change.ParsePut(s, id, []byte(`{"n":1}`))
		reqs = append(reqs, WriteRequest{Coll: "c", ID: id, Change: put, Schema: s, Options: WriteOptions{TTL: time.Minute}})
	}
	rs, errs := b.WriteBatch(ctx, reqs)
	if errs[0] != nil || errs[2] != nil || rs[0].Outcome != Buffered || rs[2].Outcome != Buffered {
		t.Fatalf("the writes around the failing one: %+v %v, %+v %v; want both buffered", rs[0], errs[0], rs[2], errs[2])
	}
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "WRONGTYPE") {
		t.Fatalf("the failing write: %v; want Redis's WRONGTYPE error", errs[1])
	}
	st, _ := b.Stats(ctx)
	if st.PendingChanges != 2 || st.PendingDocuments != 2 {
		t.Fatalf("stats %+v; want the 2 buffered writes counted", st)
	}
}

// A batch whose partitions lost their sequences is buffered after one
// reseed, with sequence numbers above the reseeded ones.
func TestWriteBatchReseedsOnce(t *testing.T) {
	b, s, ctx := newTestBuffer(t), schema(t), context.Background()
	reseeds := 0
	seqk := b.seqKey(b.Partition("c", "1"))
	b.Reseed = func(ctx context.Context) error {
		reseeds++
		// The refused writes left the sequences missing: their SETs are undone.
		if n, err := b.rdb.Exists(ctx, seqk).Result(); err != nil || n != 0 {
			t.Errorf("the refused write left the sequence (%d, %v)", n, err)
		}
		for p := range b.Partitions() {
			if err := b.RaiseSeq(ctx, p, 1000); err != nil {
				return err
			}
		}
		return nil
	}
	var reqs []WriteRequest
	for i := range 20 {
		put, _ := change.ParsePut(s, fmt.Sprint(i), []byte(`{"n":1}`))
		reqs = append(reqs, WriteRequest{Coll: "c", ID: fmt.Sprint(i), Change: put, Schema: s, Options: WriteOptions{TTL: time.Minute}})
	}
	rs, errs := b.WriteBatch(ctx, reqs)
	for i, err := range errs {
		if err != nil || rs[i].Outcome != Buffered || rs[i].Seq <= 1000 {
			t.Fatalf("write %d: %+v %v; want buffered above the reseeded sequence", i, rs[i], err)
		}
	}
	if reseeds != 1 {
		t.Fatalf("%d reseeds; want 1", reseeds)
	}
}

// The script names the pending member after the cache entry's key: the
// keys it is given must be built as the buffer names them.
func TestWriteCallKeys(t *testing.T) {
	b, s := newTestBuffer(t), schema(t)
	put, _ := change.ParsePut(s, "7", []byte(`{"n":1}`))
	wc := b.writeCalls([]WriteRequest{{Coll: "c", ID: "7", Change: put, Schema: s}})[0]
	p, m := b.Partition("c", "7"), Member("c", "7")
	want := []string{b.pendingKey(p), b.statsKey(p), b.seqKey(p), b.membersKey(p), b.cacheKey(p, m), b.bwKey(p, m), b.ileaseKey(p, m)}
	if !slices.Equal(wc.keys, want) {
		t.Fatalf("keys %q; want %q", wc.keys, want)
	}
	if tag := b.pendingKey(p)[:len(b.pendingKey(p))-len("pending")]; b.cacheKey(p, m) != tag+"c:"+m {
		t.Fatalf("cache key %q is not the tag %q, \"c:\" and the member", b.cacheKey(p, m), tag)
	}
}

// A Replace sets a field the script cannot compute only while the entry
// holds the value the writer read; otherwise the entry goes. Either way the
// change is buffered.
func TestWriteReplace(t *testing.T) {
	b, ctx := newTestBuffer(t), context.Background()
	s, err := change.NewSchema("id", []change.Column{{Name: "id", Type: change.TypeInt}, {Name: "j", Type: change.TypeJSON, Nullable: true}, {Name: "n", Type: change.TypeInt, Nullable: true}})
	if err != nil {
		t.Fatal(err)
	}
	ck := b.cacheKey(b.Partition("c", "1"), Member("c", "1"))
	put := func() {
		t.Helper()
		p, err := change.ParsePut(s, "1", []byte(`{"j":[1],"n":7}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, out, err := b.Write(ctx, "c", "1", p, s, WriteOptions{TTL: time.Minute}); err != nil || out != Buffered {
			t.Fatalf("put: %v %v", out, err)
		}
	}
	push := mustParse(t, s, `{"$push":{"j":2}}`)
	patch := func(rs map[string]Replace) {
		t.Helper()
		if _, out, err := b.Write(ctx, "c", "1", push, s, WriteOptions{TTL: time.Minute, Token: NewToken(), Replace: rs}); err != nil || out != Buffered {
			t.Fatalf("patch: %v %v", out, err)
		}
	}
	entry := func() map[string]string {
		t.Helper()
		h, err := b.rdb.HGetAll(ctx, ck).Result()
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }

	put()
	patch(map[string]Replace{"j": {Old: raw("[1]"), New: raw("[1,2]")}})
	if h := entry(); h["j"] != "[1,2]" || h["n"] != "7" || h["id"] != "1" {
		t.Fatalf("after a matching replace: %v, want j [1,2] and the other fields kept", h)
	}
	patch(map[string]Replace{"j": {Old: raw("[1]"), New: raw("[1,2,2]")}})
	if h := entry(); len(h) != 0 {
		t.Fatalf("after a replace of a value the entry no longer holds: %v, want the entry dropped", h)
	}

	put()
	patch(map[string]Replace{"j": {Old: raw("[1]"), New: nil}})
	if h := entry(); len(h) != 2 || h["n"] != "7" {
		t.Fatalf("after a replace with an absent value: %v, want j removed", h)
	}
	patch(map[string]Replace{"j": {Old: nil, New: raw("[3]")}})
	if h := entry(); h["j"] != "[3]" {
		t.Fatalf("after a replace of an absent field: %v, want j [3]", h)
	}
	patch(map[string]Replace{"j": {Old: nil, New: raw("[4]")}})
	if h := entry(); len(h) != 0 {
		t.Fatalf("after a replace of an absent field that is present: %v, want the entry dropped", h)
	}

	put()
	patch(nil)
	if h := entry(); len(h) != 0 {
		t.Fatalf("after operators without a replace: %v, want the entry dropped", h)
	}
	n, err := b.rdb.LLen(ctx, b.bwKey(b.Partition("c", "1"), Member("c", "1"))).Result()
	if err != nil || n != 9 {
		t.Fatalf("buffered write holds %d changes (%v), want all 9", n, err)
	}
}

func TestAppendReplace(t *testing.T) {
	for _, tc := range []struct {
		r    Replace
		want string
	}{
		{Replace{Old: json.RawMessage(`[1]`), New: json.RawMessage(`[1,2]`)}, `p3:[1]p[1,2]`},
		{Replace{Old: nil, New: json.RawMessage(`"x:y"`)}, `ap"x:y"`},
		{Replace{Old: json.RawMessage(`"a:b"`), New: nil}, `p5:"a:b"a`},
		{Replace{Old: json.RawMessage(``), New: json.RawMessage(``)}, `p0:p`},
	} {
		if got := string(appendReplace(nil, tc.r)); got != tc.want {
			t.Errorf("appendReplace(%q, %q) = %q, want %q", tc.r.Old, tc.r.New, got, tc.want)
		}
	}
}

// A Redis over its maxmemory refuses a call of writes before it changes
// anything: the group's sequence is its first write command, which Redis
// refuses with OOM (a reply the front doors answer as safe to retry), so
// no write of the call is buffered, and the sequence, the buffered writes
// and the counters are as they were. Under the limit again, the same
// writes are buffered.
func TestWriteOverMaxmemoryChangesNothing(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.PrivateRedis(t)})
	t.Cleanup(func() { rdb.Close() })
	b, s, ctx := New(rdb, "oom", 4, 500*time.Millisecond), schema(t), context.Background()
	put := func(id string, n int) WriteRequest {
		c, err := change.ParsePut(s, id, []byte(fmt.Sprintf(`{"n":%d}`, n)))
		if err != nil {
			t.Fatal(err)
		}
		return WriteRequest{Coll: "c", ID: id, Change: c, Schema: s, Options: WriteOptions{TTL: time.Minute}}
	}
	if _, errs := b.WriteBatch(ctx, []WriteRequest{put("1", 1)}); errs[0] != nil {
		t.Fatal(errs[0])
	}
	part := b.Partition("c", "1")
	snapshot := func() (string, []string, map[string]string) {
		seq := rdb.Get(ctx, b.seqKey(part)).Val()
		bw := rdb.LRange(ctx, b.bwKey(part, Member("c", "1")), 0, -1).Val()
		return seq, bw, rdb.HGetAll(ctx, b.statsKey(part)).Val()
	}
	seq, bw, stats := snapshot()

	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	reqs := []WriteRequest{put("1", 2), put("2", 3)}
	_, errs := b.WriteBatch(ctx, reqs)
	for i, err := range errs {
		var rerr redis.Error
		if !errors.As(err, &rerr) || !strings.HasPrefix(rerr.Error(), "OOM ") {
			t.Errorf("write %d over maxmemory: %v; want Redis's OOM reply", i, err)
		}
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	seq2, bw2, stats2 := snapshot()
	if seq2 != seq || !slices.Equal(bw2, bw) || !maps.Equal(stats2, stats) {
		t.Fatalf("a refused call changed Redis: sequence %s → %s, buffered write %v → %v, counters %v → %v", seq, seq2, bw, bw2, stats, stats2)
	}
	if n := rdb.Exists(ctx, b.bwKey(b.Partition("c", "2"), Member("c", "2"))).Val(); n != 0 {
		t.Fatal("a refused call buffered a write of another document")
	}
	if _, errs := b.WriteBatch(ctx, reqs); errs[0] != nil || errs[1] != nil {
		t.Fatalf("the same writes under the limit: %v", errs)
	}
}
