package buffer

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/writeback/writeback/internal/change"
)

// idIn returns an id of collection "c" in partition part.
func idIn(t *testing.T, b *Buffer, part int) string {
	t.Helper()
	for i := range 1000 {
		if id := strconv.Itoa(i); b.Partition("c", id) == part {
			return id
		}
	}
	t.Fatalf("no id in partition %d", part)
	return ""
}

// Membership tokens are stable while only patches are buffered, and a put
// or a delete changes its own partition's token only — also when the
// writes of several partitions share one call of the write script; a
// rejected prefix changes it too.
func TestMembershipTokens(t *testing.T) {
	b, s, ctx := newTestBuffer(t), schema(t), context.Background()
	toks := func() []string {
		t.Helper()
		v, err := b.MembershipTokens(ctx)
		if err != nil || len(v) != b.Partitions() {
			t.Fatalf("tokens: %q %v; want one per partition", v, err)
		}
		return v
	}
	changed := func(before, after []string) []int {
		var ps []int
		for p := range before {
			if before[p] != after[p] {
				ps = append(ps, p)
			}
		}
		return ps
	}
	t0 := toks()
	if t1 := toks(); !slices.Equal(t0, t1) {
		t.Fatalf("tokens changed with nothing written: %q → %q", t0, t1)
	}
	a, z := idIn(t, b, 0), idIn(t, b, 2)
	put := func(id string) change.Change {
		c, err := change.ParsePut(s, id, []byte(`{"n":1}`))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	o := WriteOptions{TTL: time.Minute}
	if _, out, err := b.Write(ctx, "c", a, put(a), s, o); err != nil || out != Buffered {
		t.Fatalf("put: %v %v", out, err)
	}
	t1 := toks()
	if ps := changed(t0, t1); !slices.Equal(ps, []int{0}) {
		t.Fatalf("a put in partition 0 changed the tokens of %v", ps)
	}
	// A patch in partition 0 and a put in partition 2, in one call.
	o.Token = NewToken()
	rs, errs := b.WriteBatch(ctx, []WriteRequest{
		{Coll: "c", ID: a, Change: mustParse(t, s, `{"$inc":{"n":1}}`), Schema: s, Options: o},
		{Coll: "c", ID: z, Change: put(z), Schema: s, Options: WriteOptions{TTL: time.Minute}},
	})
	for i := range rs {
		if errs[i] != nil || rs[i].Outcome != Buffered {
			t.Fatalf("batch write %d: %+v %v", i, rs[i], errs[i])
		}
	}
	t2 := toks()
	if ps := changed(t1, t2); !slices.Equal(ps, []int{2}) {
		t.Fatalf("a patch in partition 0 and a put in partition 2 changed the tokens of %v; want [2]", ps)
	}
	seq, out, err := b.Write(ctx, "c", z, change.Change{Kind: change.Delete}, s, WriteOptions{TTL: time.Minute})
	if err != nil || out != Buffered {
		t.Fatalf("delete: %v %v", out, err)
	}
	t3 := toks()
	if ps := changed(t2, t3); !slices.Equal(ps, []int{2}) {
		t.Fatalf("a delete in partition 2 changed the tokens of %v; want [2]", ps)
	}
	if _, err := b.Reject(ctx, "c", z, seq, nil); err != nil {
		t.Fatal(err)
	}
	if ps := changed(t3, toks()); !slices.Equal(ps, []int{2}) {
		t.Fatalf("a rejected prefix in partition 2 changed the tokens of %v; want [2]", ps)
	}
}
