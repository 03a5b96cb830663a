package nearcache

import (
	"slices"
	"testing"
	"time"
)

// TestWriteGroups checks which entry the end of a key's overlapping local
// writes installs, and which leases it gives back.
func TestWriteGroups(t *testing.T) {
	far := Now() + int64(time.Hour)
	entry := func(n string, gen uint64) *Entry { return NewEntry(map[string]string{"n": n}, gen, far) }
	e1, e2, e3 := entry("1", 1), entry("2", 2), entry("3", 3)
	tests := []struct {
		name    string
		ends    []WriteEnd   // in the order the writes end; all began first
		between func(*Cache) // after the writes began, before they end
		want    *Entry       // installed
		release []uint64     // given back
		refused bool
	}{
		{"one write", []WriteEnd{{Entry: e1, Seq: 10, Gen: 1}}, nil, e1, nil, false},
		{"the latest wins, whatever order they end in",
			[]WriteEnd{{Entry: e3, Seq: 30, Gen: 3}, {Entry: e1, Seq: 10, Gen: 1}, {Entry: e2, Seq: 20, Gen: 2}}, nil, e3, nil, false},
		{"a later write left no entry",
			[]WriteEnd{{Entry: e1, Seq: 10, Gen: 1}, {Seq: 20, Gen: 2}}, nil, nil, []uint64{1}, true},
		{"an earlier write left no entry",
			[]WriteEnd{{Seq: 5, Gen: 2}, {Entry: e1, Seq: 10, Gen: 1}}, nil, e1, nil, false},
		{"a write's outcome is unknown",
			[]WriteEnd{{Entry: e2, Seq: 20, Gen: 2}, {Failed: true, Gen: 1}}, nil, nil, []uint64{2, 1}, true},
		{"revoked while the writes ran",
			[]WriteEnd{{Entry: e1, Seq: 10, Gen: 1}, {Entry: e2, Seq: 20, Gen: 2}}, func(c *Cache) { c.Revoke("a") }, nil, []uint64{1, 2}, true},
		{"drained while the writes ran",
			[]WriteEnd{{Entry: e1, Seq: 10, Gen: 1}}, func(c *Cache) { c.Drain(nil) }, nil, []uint64{1}, true},
		{"another stripe's revocation",
			[]WriteEnd{{Entry: e1, Seq: 10, Gen: 1}}, func(c *Cache) { c.Revoke(otherStripe(c, "a")) }, e1, nil, false},
		{"no lease asked for, none granted", []WriteEnd{{Seq: 10}}, nil, nil, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCache(t)
			copy0 := entry("0", 9)
			if !c.Install(c.Ticket("a"), copy0) {
				t.Fatal("install refused")
			}
			for i := range tc.ends {
				held, dropped := c.BeginWrite("a")
				if !held {
					t.Fatalf("write %d: BeginWrite says the document is not read here", i)
				}
				// Only the write that dropped the copy gets it.
				if want := map[bool]*Entry{true: copy0, false: nil}[i == 0]; dropped != want {
					t.Fatalf("write %d: BeginWrite dropped %v, want %v", i, dropped, want)
				}
				if _, ok := c.Get("a"); ok {
					t.Fatalf("write %d: a copy is served while the key is written", i)
				}
			}
			if tc.between != nil {
				tc.between(c)
			}
			var last WriteOutcome
			for i, w := range tc.ends {
				out := c.EndWrite("a", w)
				if out.Last != (i == len(tc.ends)-1) {
					t.Fatalf("write %d of %d: Last = %v", i, len(tc.ends), out.Last)
				}
				if !out.Last {
					if _, ok := c.Get("a"); ok {
						t.Fatalf("write %d: a copy is served before the group's last write ended", i)
					}
					continue
				}
				last = out
			}
			if last.Installed != tc.want || last.Refused != tc.refused || !slices.Equal(last.Release, tc.release) || !last.Held {
				t.Fatalf("outcome %+v; want installed %v, refused %v, release %v, held", last, tc.want, tc.refused, tc.release)
			}
			got, ok := c.Get("a")
			if (tc.want == nil) == ok || (ok && got != tc.want) {
				t.Fatalf("Get = %v, %v; want %v", got, ok, tc.want)
			}
		})
	}
}

// TestWriteGroupAndANewWrite checks that a write beginning as the previous
// group ends is never served the group's entry while it runs.
func TestWriteGroupAndANewWrite(t *testing.T) {
	far := Now() + int64(time.Hour)
	c := newTestCache(t)
	if held, dropped := c.BeginWrite("a"); held || dropped != nil {
		t.Fatalf("a write of a document with no copy: held %v, dropped %v", held, dropped)
	}
	c.EndWrite("a", WriteEnd{Seq: 1})
	if !c.Install(c.Ticket("a"), NewEntry(map[string]string{"n": "0"}, 1, far)) {
		t.Fatal("install refused")
	}
	c.BeginWrite("a")
	c.BeginWrite("a")
	c.EndWrite("a", WriteEnd{Entry: NewEntry(map[string]string{"n": "1"}, 1, far), Seq: 1, Gen: 1})
	// A third write joins before the second ends: the group goes on.
	if held, dropped := c.BeginWrite("a"); !held || dropped != nil {
		t.Fatalf("a write joining a group that holds the document: held %v, dropped %v; want held, no copy", held, dropped)
	}
	if out := c.EndWrite("a", WriteEnd{Entry: NewEntry(map[string]string{"n": "2"}, 2, far), Seq: 2, Gen: 2}); out.Last {
		t.Fatal("the group ended with a write in progress")
	}
	if _, ok := c.Get("a"); ok {
		t.Fatal("a copy is served while a write is in progress")
	}
	out := c.EndWrite("a", WriteEnd{Entry: NewEntry(map[string]string{"n": "3"}, 3, far), Seq: 3, Gen: 3})
	if e, ok := c.Get("a"); !out.Last || !ok || e.Hash["n"] != "3" {
		t.Fatalf("after the last write: %+v, Get = %v, %v", out, e, ok)
	}
	// A new group starts from the copy: held, and the copy is dropped.
	if held, dropped := c.BeginWrite("a"); !held || dropped == nil || dropped.Hash["n"] != "3" {
		t.Fatalf("a write of a held copy: held %v, dropped %v; want held, the copy", held, dropped)
	}
	if _, ok := c.Get("a"); ok {
		t.Fatal("a copy is served while a write is in progress")
	}
	c.EndWrite("a", WriteEnd{Failed: true, Gen: 4})
	// Reads around the writes may not install.
	tk := c.Ticket("a")
	c.BeginWrite("a")
	c.EndWrite("a", WriteEnd{Seq: 9})
	if c.Install(tk, NewEntry(map[string]string{"n": "0"}, 5, far)) {
		t.Fatal("installed a value read around a local write")
	}
}
