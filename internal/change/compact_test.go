package change

import (
	"encoding/json"
	"strings"
	"testing"
)

// patches parses client patches for the document schema.
func patches(t *testing.T, s *Schema, bodies ...string) []Change {
	t.Helper()
	out := make([]Change, len(bodies))
	for i, b := range bodies {
		c, err := ParsePatch(s, []byte(b))
		if err != nil {
			t.Fatalf("ParsePatch(%s): %v", b, err)
		}
		c.Seq = int64(i + 1)
		out[i] = c
	}
	return out
}

// opsJSON renders the operators of changes as MongoDB update documents.
func opsJSON(cs []Change) string {
	var parts []string
	for _, c := range cs {
		switch c.Kind {
		case Patch:
			for _, u := range Updates(c.Ops) {
				parts = append(parts, string(u))
			}
		default:
			parts = append(parts, c.Kind.String())
		}
	}
	return strings.Join(parts, " ")
}

// TestCompactDocExample31 is the paper's Example 3.1: a pending friend
// request accepted. The pair $addToSet / $pull of "Bob" on pendingfriends
// leaves only what it must: the $pull (Bob may have been pending before) and
// an $addToSet with no values (pendingfriends may have been missing, and the
// original sequence leaves an empty array there).
func TestCompactDocExample31(t *testing.T) {
	s := docSchema(t)
	cs := patches(t, s,
		`{"$addToSet":{"pendingfriends":"Bob"}}`,
		`{"$pull":{"pendingfriends":"Bob"},"$addToSet":{"friends":"Bob"}}`)
	got := CompactDoc(cs)
	want := `{"$addToSet":{"friends":{"$each":["Bob"]},"pendingfriends":{"$each":[]}}} {"$pull":{"pendingfriends":"Bob"}}`
	if len(got) != 1 || got[0].Seq != 2 || opsJSON(got) != want {
		t.Fatalf("got %d changes (seq %d): %s\nwant one (seq 2): %s", len(got), got[len(got)-1].Seq, opsJSON(got), want)
	}
	for _, tc := range []struct{ name, doc, want string }{
		{"pendingfriends missing", `{"friends":[]}`, `{"_id":"v","friends":["Bob"],"pendingfriends":[]}`},
		{"Bob already pending", `{"friends":[],"pendingfriends":["Bob","Ann"]}`, `{"_id":"v","friends":["Bob"],"pendingfriends":["Ann"]}`},
		{"Bob not pending", `{"friends":["Cy"],"pendingfriends":["Ann"]}`, `{"_id":"v","friends":["Cy","Bob"],"pendingfriends":["Ann"]}`},
		{"friends missing", `{"pendingfriends":["Bob"]}`, `{"_id":"v","friends":["Bob"],"pendingfriends":[]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := docOf(t, s, tc.doc)
			orig, err := ApplyAll(doc, cs)
			if err != nil {
				t.Fatal(err)
			}
			comp, err := ApplyAll(doc, got)
			if err != nil {
				t.Fatal(err)
			}
			if docString(orig) != tc.want || docString(comp) != tc.want {
				t.Fatalf("original %s, compacted %s, want %s", docString(orig), docString(comp), tc.want)
			}
		})
	}
}

func TestCompactDoc(t *testing.T) {
	s := docSchema(t)
	tests := []struct {
		name    string
		updates []string
		want    string // Updates of the compacted patch
	}{
		{"sets collapse", []string{`{"$set":{"a":1}}`, `{"$set":{"a":2}}`}, `{"$set":{"a":2}}`},
		{"set then inc folds", []string{`{"$set":{"a.n":1}}`, `{"$inc":{"a.n":2}}`}, `{"$set":{"a.n":3}}`},
		{"set then push into it folds", []string{`{"$set":{"a":{"l":[1]}}}`, `{"$push":{"a.l":2}}`}, `{"$set":{"a":{"l":[1,2]}}}`},
		{"inc then set of parent drops inc", []string{`{"$inc":{"a.n":1}}`, `{"$set":{"a":{}}}`}, `{"$set":{"a":{}}}`},
		{"incs stay apart", []string{`{"$inc":{"n":1}}`, `{"$inc":{"n":2}}`}, `{"$inc":{"n":1}} {"$inc":{"n":2}}`},
		{"pushes merge", []string{`{"$push":{"l":1}}`, `{"$push":{"l":{"$each":[2,3]}}}`}, `{"$push":{"l":{"$each":[1,2,3]}}}`},
		{"addToSets merge without duplicates", []string{`{"$addToSet":{"l":1}}`, `{"$addToSet":{"l":{"$each":[1.0,2]}}}`}, `{"$addToSet":{"l":{"$each":[1,2]}}}`},
		{"pull ins merge", []string{`{"$pull":{"l":{"$in":[1]}}}`, `{"$pull":{"l":{"$in":[2]}}}`}, `{"$pull":{"l":{"$in":[1,2]}}}`},
		{"push then pull drops pulled values", []string{`{"$push":{"l":{"$each":[1,2]}}}`, `{"$pull":{"l":1}}`}, `{"$push":{"l":{"$each":[2]}}} {"$pull":{"l":1}}`},
		{"unset of a top-level field drops what came before", []string{`{"$push":{"l.x":1}}`, `{"$unset":{"l":""}}`}, `{"$unset":{"l":""}}`},
		{"unset then set of a nested field stay", []string{`{"$unset":{"a.b":""}}`, `{"$set":{"a.b":1}}`}, `{"$unset":{"a.b":""}} {"$set":{"a.b":1}}`},
		{"unset then set of a top-level field collapse", []string{`{"$unset":{"a":""}}`, `{"$set":{"a":1}}`}, `{"$set":{"a":1}}`},
		{"fields are independent", []string{`{"$inc":{"b":1}}`, `{"$set":{"a":1}}`, `{"$set":{"b":5}}`}, `{"$set":{"a":1,"b":5}}`},
		{"set that cannot fold stays", []string{`{"$set":{"a":"s"}}`, `{"$inc":{"a":1}}`}, `{"$set":{"a":"s"}} {"$inc":{"a":1}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := CompactDoc(patches(t, s, tc.updates...))
			if opsJSON(got) != tc.want {
				t.Fatalf("got  %s\nwant %s", opsJSON(got), tc.want)
			}
		})
	}
}

func TestCompactDocPutDelete(t *testing.T) {
	s := docSchema(t)
	put, err := ParsePut(s, "v", []byte(`{"n":1}`))
	if err != nil {
		t.Fatal(err)
	}
	cs := patches(t, s, `{"$inc":{"n":1}}`, `{"$push":{"l":1}}`, `{"$inc":{"n":1}}`)
	cs = append(cs[:1], append([]Change{put}, cs[1:]...)...)
	got := CompactDoc(cs)
	if len(got) != 1 || got[0].Kind != Put || docString(got[0].Doc) != `{"_id":"v","l":[1],"n":2}` {
		t.Fatalf("got %s", changesString(got))
	}
	got = CompactDoc(append(cs, Change{Seq: 9, Kind: Delete}))
	if len(got) != 1 || got[0].Kind != Delete || got[0].Seq != 9 {
		t.Fatalf("got %s", changesString(got))
	}
}

// TestCompactDocProperty: for random documents and sequences, whenever the
// original sequence applies, the compacted one applies with the same result,
// and it never fails where the original succeeds.
func TestCompactDocProperty(t *testing.T) {
	g := newGen(t, 1)
	n := 5000
	if testing.Short() {
		n = 2000
	}
	shorter := 0
	for i := range n {
		doc, cs := g.doc(), g.changes()
		want, werr := ApplyAll(doc, cs)
		comp := CompactDoc(cs)
		got, gerr := ApplyAll(doc, comp)
		if werr == nil && (gerr != nil || !docEqual(got, want)) {
			t.Fatalf("case %d: doc %s\nchanges   %s\ncompacted %s\nwant %s\ngot  %s (%v)",
				i, docString(doc), changesString(cs), changesString(comp), docString(want), docString(got), gerr)
		}
		if len(comp) > len(cs) {
			t.Fatalf("case %d: %d changes compacted into %d", i, len(cs), len(comp))
		}
		if countOps(comp) < countOps(cs) {
			shorter++
		}
	}
	if shorter < n/10 {
		t.Errorf("only %d of %d sequences got shorter", shorter, n)
	}
}

func countOps(cs []Change) int {
	n := 0
	for _, c := range cs {
		n += 1 + len(c.Ops)
	}
	return n
}

func TestUpdates(t *testing.T) {
	ops := []Op{
		{Op: OpSet, Path: "a.b", Value: json.RawMessage(`1`)},
		{Op: OpInc, Path: "a.c", Value: json.RawMessage(`2`)},
		{Op: OpPush, Path: "l", Values: []json.RawMessage{json.RawMessage(`1`)}},
		{Op: OpPull, Path: "l", Values: []json.RawMessage{json.RawMessage(`1`)}},
		{Op: OpPull, Path: "m", Values: []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`2`)}, In: true},
		{Op: OpSet, Path: "a.10", Value: json.RawMessage(`1`)},
		{Op: OpSet, Path: "a.9", Value: json.RawMessage(`1`)},
		{Op: OpUnset, Path: "z"},
		{Op: OpAddToSet, Path: "s", Values: nil},
	}
	want := []string{
		`{"$set":{"a.b":1},"$inc":{"a.c":2},"$push":{"l":{"$each":[1]}}}`, // a.b < a.c < l
		`{"$pull":{"l":1,"m":{"$in":[1,2]}}}`,                             // l again: a new update
		`{"$set":{"a.10":1}}`,                                             // a.10 sorts before m: new update
		`{"$set":{"a.9":1},"$unset":{"z":""}}`,                            // 9 sorts before 10
		`{"$addToSet":{"s":{"$each":[]}}}`,
	}
	got := Updates(ops)
	if len(got) != len(want) {
		t.Fatalf("got %d updates %s, want %d", len(got), got, len(want))
	}
	for i := range want {
		if string(got[i]) != want[i] {
			t.Errorf("update %d: got %s, want %s", i, got[i], want[i])
		}
	}
}

// TestCompactSQLProperty: for random rows and patches (JSON column
// operators included), the Effect played as a SQL store plays it (Set, then
// Inc, then ApplyJSON for each JSON column) gives what applying the changes
// one by one gives.
func TestCompactSQLProperty(t *testing.T) {
	g := newSQLGen(t, 3)
	n := 4000
	if testing.Short() {
		n = 1000
	}
	applied := 0
	for i := range n {
		row, cs := g.row(), g.changes()
		want, err := ApplyAll(row, cs)
		if err != nil {
			continue
		}
		applied++
		e, err := Compact(cs)
		if err != nil {
			t.Fatalf("case %d: Compact(%s): %v", i, changesString(cs), err)
		}
		if got := applyEffect(t, row, e); !docEqual(got, want) {
			t.Fatalf("case %d: row %s\nchanges %s\neffect %+v\ngot  %s\nwant %s", i, docString(row), changesString(cs), e, docString(got), docString(want))
		}
	}
	if applied < n/5 {
		t.Errorf("only %d of %d random sequences applied", applied, n)
	}
}
