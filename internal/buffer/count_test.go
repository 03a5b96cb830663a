package buffer

import (
	"context"
	"testing"
	"time"

	"github.com/writeback/writeback/internal/change"
)

// Counting writes (WriteOptions.Count, IfAbsent) answer what they found,
// atomically with the write, and buffer nothing when they refuse.
func TestCountingWrites(t *testing.T) {
	b, s, ctx := newTestBuffer(t), schema(t), context.Background()
	count := func(tok string) WriteOptions { return WriteOptions{TTL: time.Minute, Token: tok, Count: true} }
	pending := func() int64 {
		st, err := b.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.PendingChanges
	}
	put, _ := change.ParsePut(s, "1", []byte(`{"n":1}`))
	if _, out, err := b.Write(ctx, "c", "1", put, s, WriteOptions{TTL: time.Minute}); err != nil || out != Buffered {
		t.Fatalf("put: %v %v", out, err)
	}

	t.Run("set counts the fields that were null", func(t *testing.T) {
		r, err := b.WriteCounted(ctx, "c", "1", mustParse(t, s, `{"$set":{"n":2,"f":1.5}}`), s, count(NewToken()))
		if err != nil || r.Outcome != Buffered || r.Added != 1 || r.Removed != 0 {
			t.Fatalf("%+v %v; want buffered, 1 added", r, err)
		}
		r, err = b.WriteCounted(ctx, "c", "1", mustParse(t, s, `{"$unset":{"f":true,"n":true}}`), s, count(NewToken()))
		if err != nil || r.Outcome != Buffered || r.Added != 0 || r.Removed != 2 {
			t.Fatalf("%+v %v; want buffered, 2 removed", r, err)
		}
	})
	t.Run("integer increment answers the new value", func(t *testing.T) {
		r, err := b.WriteCounted(ctx, "c", "1", mustParse(t, s, `{"$inc":{"n":5}}`), s, count(NewToken()))
		if err != nil || r.Outcome != Buffered || string(r.Value) != "5" {
			t.Fatalf("%+v %v; want 5 (from null)", r, err)
		}
		r, err = b.WriteCounted(ctx, "c", "1", mustParse(t, s, `{"$inc":{"n":9223372036854775800}}`), s, count(NewToken()))
		if err != nil || string(r.Value) != "9223372036854775805" {
			t.Fatalf("%+v %v; want exact int64 arithmetic", r, err)
		}
	})
	t.Run("overflow buffers nothing", func(t *testing.T) {
		before := pending()
		r, err := b.WriteCounted(ctx, "c", "1", mustParse(t, s, `{"$inc":{"n":3}}`), s, count(NewToken()))
		if err != nil || r.Outcome != Overflow {
			t.Fatalf("%+v %v; want Overflow", r, err)
		}
		if after := pending(); after != before {
			t.Fatalf("pending %d → %d after a refused increment", before, after)
		}
		if rd, _ := b.Read(ctx, "c", "1", NewToken()); string(rd.Doc["n"]) != "9223372036854775805" {
			t.Fatalf("the entry changed: %s", rd.Doc["n"])
		}
	})
	t.Run("float increment answers the old value and drops the entry", func(t *testing.T) {
		if _, err := b.WriteCounted(ctx, "c", "1", mustParse(t, s, `{"$set":{"f":2.5}}`), s, count(NewToken())); err != nil {
			t.Fatal(err)
		}
		r, err := b.WriteCounted(ctx, "c", "1", mustParse(t, s, `{"$inc":{"f":1}}`), s, count(NewToken()))
		if err != nil || r.Outcome != Buffered || string(r.Value) != "2.5" {
			t.Fatalf("%+v %v; want the value before, 2.5", r, err)
		}
		if rd, _ := b.Read(ctx, "c", "1", NewToken()); rd.Hit {
			t.Fatal("the entry is still cached after a float increment")
		}
	})
	t.Run("a pending document that is not cached needs the cache", func(t *testing.T) {
		before := pending()
		r, err := b.WriteCounted(ctx, "c", "1", mustParse(t, s, `{"$set":{"n":1}}`), s, count(NewToken()))
		if err != nil || r.Outcome != NeedCache {
			t.Fatalf("%+v %v; want NeedCache", r, err)
		}
		if after := pending(); after != before {
			t.Fatalf("pending %d → %d after NeedCache", before, after)
		}
	})
	t.Run("delete of a missing document buffers nothing", func(t *testing.T) {
		tok := NewToken()
		o := count(tok)
		del := change.Change{Kind: change.Delete}
		if r, err := b.WriteCounted(ctx, "c", "2", del, s, o); err != nil || r.Outcome != NeedBase {
			t.Fatalf("%+v %v; want NeedBase", r, err)
		}
		before := pending()
		o.HaveBase = true
		if r, err := b.WriteCounted(ctx, "c", "2", del, s, o); err != nil || r.Outcome != NotFound {
			t.Fatalf("%+v %v; want NotFound", r, err)
		}
		if after := pending(); after != before {
			t.Fatalf("pending %d → %d", before, after)
		}
		if r, err := b.WriteCounted(ctx, "c", "1", del, s, count(NewToken())); err != nil || r.Outcome != Buffered {
			t.Fatalf("delete of a pending document: %+v %v", r, err)
		}
	})
	t.Run("a put if absent creates only", func(t *testing.T) {
		create, _ := change.ParsePut(s, "1", []byte(`{"n":7}`))
		ifAbsent := WriteOptions{TTL: time.Minute, Token: NewToken(), IfAbsent: true}
		// Document 1 was deleted by a buffered write: absent.
		if r, err := b.WriteCounted(ctx, "c", "1", create, s, ifAbsent); err != nil || r.Outcome != Buffered {
			t.Fatalf("%+v %v; want buffered", r, err)
		}
		if r, err := b.WriteCounted(ctx, "c", "1", create, s, ifAbsent); err != nil || r.Outcome != Exists {
			t.Fatalf("%+v %v; want Exists", r, err)
		}
		// Document 3: neither cached nor pending, and the store has it.
		create3, _ := change.ParsePut(s, "3", []byte(`{"n":7}`))
		o := WriteOptions{TTL: time.Minute, Token: NewToken(), IfAbsent: true}
		if r, _ := b.WriteCounted(ctx, "c", "3", create3, s, o); r.Outcome != NeedBase {
			t.Fatalf("%+v; want NeedBase", r)
		}
		o.HaveBase, o.Base = true, change.Doc{"id": []byte("3"), "n": []byte("1"), "f": []byte("null")}
		if r, _ := b.WriteCounted(ctx, "c", "3", create3, s, o); r.Outcome != Exists {
			t.Fatalf("%+v; want Exists", r)
		}
		if rd, _ := b.Read(ctx, "c", "3", NewToken()); !rd.Hit || string(rd.Doc["n"]) != "1" {
			t.Fatalf("the base was not installed: %+v", rd)
		}
	})
}
