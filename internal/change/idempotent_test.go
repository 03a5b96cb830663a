package change

import (
	"errors"
	"testing"
)

func TestIdempotent(t *testing.T) {
	s := docSchema(t)
	tests := []struct {
		name    string
		doc     string
		updates []string
		want    string // Updates of the converted changes
	}{
		{"inc becomes set", `{"n":1}`, []string{`{"$inc":{"n":2}}`}, `{"$set":{"n":3}}`},
		{"inc of missing nested", `{}`, []string{`{"$inc":{"a.b":2}}`}, `{"$set":{"a.b":2}}`},
		{"push becomes set of the array", `{"l":[1]}`, []string{`{"$push":{"l":2}}`}, `{"$set":{"l":[1,2]}}`},
		{"pull becomes set of the array", `{"l":[1,2,1]}`, []string{`{"$pull":{"l":1}}`}, `{"$set":{"l":[2]}}`},
		{"pull of a missing field is dropped", `{}`, []string{`{"$pull":{"l":1},"$set":{"x":1}}`}, `{"$set":{"x":1}}`},
		{"set, unset and addToSet stay", `{"l":[1]}`, []string{`{"$set":{"a.b":1},"$unset":{"c":""},"$addToSet":{"l":2}}`}, `{"$set":{"a.b":1},"$unset":{"c":""},"$addToSet":{"l":{"$each":[2]}}}`},
		{"counters keep their paths", `{}`, []string{`{"$inc":{"s.v":1}}`, `{"$inc":{"s.v":1,"s.l":1}}`}, `{"$set":{"s.v":1}} {"$set":{"s.l":1,"s.v":2}}`},
		{"addToSet then push of the same array", `{"l":[]}`, []string{`{"$addToSet":{"l":1}}`, `{"$push":{"l":1}}`}, `{"$set":{"l":[1]}} {"$set":{"l":[1,1]}}`},
		{"nested then whole field: written whole", `{"a":{"b":1}}`, []string{`{"$inc":{"a.b":1}}`, `{"$set":{"a":5}}`}, `{"$set":{"a":{"b":2}}} {"$set":{"a":5}}`},
		{"unset then set of a nested field: written whole", `{"a":{"b":1,"c":2}}`, []string{`{"$unset":{"a.b":""}}`, `{"$set":{"a.b":3}}`}, `{"$set":{"a":{"c":2}}} {"$set":{"a":{"c":2,"b":3}}}`},
		{"field gone: unset", `{"a":{"b":1}}`, []string{`{"$set":{"a.b":2}}`, `{"$unset":{"a":""}}`, `{"$set":{"a.b.c":1}}`}, `{"$set":{"a":{"b":2}}} {"$unset":{"a":""}} {"$set":{"a":{"b":{"c":1}}}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := docOf(t, s, tc.doc)
			cs := patches(t, s, tc.updates...)
			conv, err := Idempotent(doc, cs)
			if err != nil {
				t.Fatal(err)
			}
			if got := opsJSON(conv); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			checkIdempotent(t, doc, cs, conv)
		})
	}
}

func TestIdempotentErrors(t *testing.T) {
	s := docSchema(t)
	cs := patches(t, s, `{"$set":{"a":1}}`, `{"$push":{"a":2}}`)
	_, err := Idempotent(docOf(t, s, `{}`), cs)
	var te *TypeError
	if !errors.As(err, &te) || te.Path != "a" {
		t.Fatalf("got %v, want a *TypeError for a", err)
	}
	if _, err := Idempotent(nil, cs); !errors.Is(err, ErrNotFound) {
		t.Fatalf("patch of a missing document: got %v", err)
	}
}

func TestIsIdempotent(t *testing.T) {
	s := docSchema(t)
	tests := []struct {
		body string
		want bool
	}{
		{`{"$set":{"a.b":1},"$unset":{"c":""}}`, true},
		{`{"$addToSet":{"l":1}}`, true},
		{`{"$inc":{"n":1}}`, false},
		{`{"$push":{"l":1}}`, false},
		{`{"$pull":{"l":1}}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.body, func(t *testing.T) {
			c := patches(t, s, tc.body)[0]
			if got := IsIdempotent(c); got != tc.want {
				t.Fatalf("IsIdempotent = %v, want %v", got, tc.want)
			}
		})
	}
	merged := CompactDoc(patches(t, s, `{"$addToSet":{"l":1}}`, `{"$set":{"l.0":2}}`))[0]
	if IsIdempotent(merged) {
		t.Errorf("$addToSet then $set inside the array: replaying it adds 1 again, but IsIdempotent says yes")
	}
	if !IsIdempotent(Change{Kind: Put}) || !IsIdempotent(Change{Kind: Delete}) {
		t.Error("Put and Delete are idempotent")
	}
}

// checkIdempotent checks Idempotent's contract for one case: conv ends
// where cs ends, survives a replay after any prefix of its steps (and of
// its compacted form's steps), and converts to itself.
func checkIdempotent(t *testing.T, doc Doc, cs, conv []Change) {
	t.Helper()
	want, err := replayAll(doc, cs)
	if err != nil {
		t.Fatalf("original: %v", err)
	}
	if len(conv) != len(cs) {
		t.Fatalf("%d changes converted into %d", len(cs), len(conv))
	}
	for i, c := range conv {
		if c.Seq != cs[i].Seq || c.Kind != cs[i].Kind {
			t.Fatalf("change %d: seq/kind %d/%v, want %d/%v", i, c.Seq, c.Kind, cs[i].Seq, cs[i].Kind)
		}
		if !IsIdempotent(c) {
			t.Fatalf("converted change %d is not idempotent: %s", i, Encode(c))
		}
	}
	for _, applied := range [][]Change{steps(conv), steps(CompactDoc(conv))} {
		state := doc
		for k := 0; k <= len(applied); k++ {
			if k > 0 {
				if state, err = replayAll(state, applied[k-1:k]); err != nil {
					t.Fatalf("step %d of %s: %v", k, changesString(applied), err)
				}
			}
			got, err := replayAll(state, conv)
			if err != nil || !docEqual(got, want) {
				t.Fatalf("replay after %d steps (state %s):\ngot  %s (%v)\nwant %s\nconverted %s",
					k, docString(state), docString(got), err, docString(want), changesString(conv))
			}
			again, err := Idempotent(state, conv)
			if err != nil || changesString(again) != changesString(conv) {
				t.Fatalf("converting again after %d steps (state %s): %v\ngot  %s\nwant %s",
					k, docString(state), err, changesString(again), changesString(conv))
			}
		}
	}
}

// TestIdempotentProperty: for random documents and sequences, Idempotent
// succeeds when applying the sequence does, and when it succeeds it meets
// its contract (checkIdempotent; a patch of a deleted document counts as a
// no-op, as at the store).
func TestIdempotentProperty(t *testing.T) {
	g := newGen(t, 2)
	n := 2000
	if testing.Short() {
		n = 600
	}
	converted := 0
	for i := range n {
		doc, cs := g.doc(), g.changes()
		_, werr := ApplyAll(doc, cs)
		conv, err := Idempotent(doc, cs)
		if werr == nil && err != nil {
			t.Fatalf("case %d: doc %s\nchanges %s\napply: %v; Idempotent: %v", i, docString(doc), changesString(cs), werr, err)
		}
		if err != nil {
			continue
		}
		converted++
		more := g.changes()
		t.Run("", func(t *testing.T) {
			defer func() {
				if t.Failed() {
					t.Logf("case %d: doc %s\nchanges %s\nmore %s", i, docString(doc), changesString(cs), changesString(more))
				}
			}()
			checkIdempotent(t, doc, cs, conv)
			// After a crash that left some steps applied, the applier
			// converts again, with changes buffered since.
			applied := steps(conv)
			state, err := replayAll(doc, applied[:g.r.IntN(len(applied)+1)])
			if err != nil {
				t.Fatal(err)
			}
			want, _ := replayAll(doc, cs)
			all := append(append([]Change(nil), conv...), more...)
			conv2, err := Idempotent(state, all)
			if _, werr := ApplyAll(want, more); werr == nil && err != nil {
				t.Fatalf("converting again with more changes from %s: %v; applying them: %v", docString(state), err, werr)
			}
			if err == nil {
				checkIdempotent(t, state, all, conv2)
			}
		})
		if t.Failed() {
			return
		}
	}
	if converted < n/5 {
		t.Errorf("only %d of %d random sequences applied", converted, n)
	}
}

// TestIdempotentSQLProperty: Idempotent on a table's rows (whole columns
// and JSON columns), though SQL stores do not need it.
func TestIdempotentSQLProperty(t *testing.T) {
	g := newSQLGen(t, 4)
	n := 1500
	if testing.Short() {
		n = 400
	}
	for i := range n {
		row, cs := g.row(), g.changes()
		_, werr := ApplyAll(row, cs)
		conv, err := Idempotent(row, cs)
		if werr == nil && err != nil {
			t.Fatalf("case %d: row %s\nchanges %s\nIdempotent: %v", i, docString(row), changesString(cs), err)
		}
		if err != nil {
			continue
		}
		t.Run("", func(t *testing.T) {
			defer func() {
				if t.Failed() {
					t.Logf("case %d: row %s\nchanges %s", i, docString(row), changesString(cs))
				}
			}()
			checkIdempotent(t, row, cs, conv)
		})
		if t.Failed() {
			return
		}
	}
}
