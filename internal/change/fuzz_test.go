package change

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary bodies to the parsers of a table's schema and
// of a document collection's (dynamic) schema: they must either accept (and
// then the change must encode, decode and apply, failing at most with a
// *TypeError against the base document; compact; compact into an
// equivalent sequence; and convert into an idempotent one) or reject with a
// client error — never panic, never fail otherwise.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"$set":{"name":"x","n":1}}`, `{"$inc":{"n":-5,"f":0.25}}`, `{"$unset":{"name":""}}`,
		`{"name":"a","req":"b"}`, `{`, `[]`, `{"$inc":{"n":"1"}}`, `{"$set":{"j":{"a":[1,{"b":null}]}}}`,
		`{"$inc":{"n":1e400}}`, "{\"$set\":{\"name\":\"\xff\"}}",
		`{"$push":{"j.l":{"$each":[1,{"x":2}]}}}`, `{"$addToSet":{"j":"v","a.b":[1]}}`,
		`{"$pull":{"l":{"$in":[1,[2],null]}},"$set":{"a.0.b":1.0}}`, `{"$inc":{"a.b":1,"n":2.5},"$unset":{"l.1":""}}`,
		`{"$set":{"a":1},"$push":{"a.b":1}}`, `{"a":{"b":[1,2]},"_id":"1"}`, `{"$set":{"a.$.b":1}}`,
	} {
		f.Add([]byte(s))
	}
	// Fuzzing looks for logic errors, not for the cost of a 7 MB array.
	defer func(n int) { maxPadding = n }(maxPadding)
	maxPadding = 1000
	targets := fuzzTargets(f)
	f.Fuzz(func(t *testing.T, body []byte) { fuzzCheck(t, targets, body) })
}

// fuzzTarget is a parser and a document to apply what it accepts to.
type fuzzTarget struct {
	parse func([]byte) (Change, error)
	base  Doc
}

func fuzzTargets(t testing.TB) []fuzzTarget {
	s := testSchema(t)
	d := docSchema(t)
	sqlBase, err := ParsePut(s, "1", []byte(`{"req":"r","n":0,"f":0,"j":{"l":[1],"a":{}}}`))
	if err != nil {
		t.Fatal(err)
	}
	docBase, err := ParsePut(d, "1", []byte(`{"a":{"b":[1,"x"],"n":1},"l":[1,2,[2]],"s":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	return []fuzzTarget{
		{func(b []byte) (Change, error) { return ParsePatch(s, b) }, sqlBase.Doc},
		{func(b []byte) (Change, error) { return ParsePut(s, "1", b) }, sqlBase.Doc},
		{func(b []byte) (Change, error) { return ParsePatch(d, b) }, docBase.Doc},
		{func(b []byte) (Change, error) { return ParsePut(d, "1", b) }, docBase.Doc},
	}
}

// fuzzCheck is FuzzParse's check of one body.
func fuzzCheck(t *testing.T, targets []fuzzTarget, body []byte) {
	if m, ok := compactObject(body); ok {
		// decodeObject's shortcut: encoding/json's decoder agrees.
		var want map[string]json.RawMessage
		dec := json.NewDecoder(bytes.NewReader(body))
		if err := dec.Decode(&want); err != nil || dec.More() || !maps.EqualFunc(m, want, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) {
			t.Fatalf("compactObject(%q) = %q; encoding/json: %q, %v", body, m, want, err)
		}
	}
	for _, tg := range targets {
		c, err := tg.parse(body)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("non-client error %v", err)
			}
			continue
		}
		c.Seq = 1
		enc := Encode(c)
		dc, err := Decode("1|0|" + string(enc))
		if err != nil {
			t.Fatalf("accepted change does not round-trip: %v", err)
		}
		if again := Encode(dc); string(again) != string(enc) {
			t.Fatalf("round trip changed %s into %s", enc, again)
		}
		pair := []Change{dc, dc}
		pair[1].Seq = 2
		want, err := ApplyAll(tg.base, pair)
		var te *TypeError
		if err != nil && !errors.As(err, &te) {
			t.Fatalf("accepted change does not apply: %v", err)
		}
		if _, err := Compact(pair); err != nil && !errors.As(err, &te) {
			t.Fatalf("accepted change does not compact: %v", err)
		}
		if want == nil {
			continue
		}
		if got, err := ApplyAll(tg.base, CompactDoc(pair)); err != nil || !docEqual(got, want) {
			t.Fatalf("CompactDoc: got %s (%v), want %s", docString(got), err, docString(want))
		}
		conv, err := Idempotent(tg.base, pair)
		if err != nil {
			t.Fatalf("Idempotent: %v", err)
		}
		once, err1 := ApplyAll(tg.base, conv)
		twice, err2 := ApplyAll(once, conv)
		if err1 != nil || err2 != nil || !docEqual(once, want) || !docEqual(twice, want) {
			t.Fatalf("Idempotent %s: once %s (%v), twice %s (%v), want %s",
				changesString(conv), docString(once), err1, docString(twice), err2, docString(want))
		}
	}
}

// decodeObject's shortcut takes the compact shape, keeps a repeated key's
// last value as encoding/json does, and leaves everything else to it.
func TestCompactObject(t *testing.T) {
	for body, want := range map[string]map[string]string{
		`{"$inc":{"n":1},"$set":{"s":"x"}}`: {"$inc": `{"n":1}`, "$set": `{"s":"x"}`},
		`{"a":1,"a":[2]}`:                   {"a": `[2]`},
		`{}`:                                {},
		`{"a\u0062":1}`:                     nil, // an escaped key
		`{"a": 1}`:                          nil, // whitespace
		`{"a":1}x`:                          nil,
		`{"a":01}`:                          nil,
		`[1]`:                               nil,
	} {
		got, ok := compactObject([]byte(body))
		if want == nil {
			if ok {
				t.Errorf("compactObject(%s) took it: %q", body, got)
			}
			continue
		}
		if !ok || len(got) != len(want) {
			t.Fatalf("compactObject(%s) = %q, %v, want %q", body, got, ok, want)
		}
		for k, v := range want {
			if string(got[k]) != v {
				t.Errorf("compactObject(%s)[%q] = %s, want %s", body, k, got[k], v)
			}
		}
	}
}

// FuzzDecode: Decode's shortcut (decodeSets) answers exactly what
// encoding/json's decoder answers for the bodies it takes.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"$set":{"a":"x\u003c","n":1}}`, `{"doc":{"id":"1","j":{"a":[1]}}}`, `{"$set":{}}`,
		`{"$set":{"a":1},"$set":{"b":2}}`, `{"$SET":{"a":1}}`, `{"doc":null}`, `{"$set":{"a":1}}x`,
		`{"$set":{"a":1,"a":2}}`, `{"$set":{"a\n":1}}`, `{"$inc":{"n":1}}`, `{ "$set":{"a":1}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		doc, set, ok := decodeSets(body)
		if !ok {
			return
		}
		var w wire
		dec := json.NewDecoder(strings.NewReader(body))
		dec.UseNumber()
		if err := dec.Decode(&w); err != nil {
			t.Fatalf("decodeSets took %q, which the decoder refuses: %v", body, err)
		}
		if w.Unset != nil || w.Inc != nil || w.JSON != nil || w.Ops != nil {
			t.Fatalf("decodeSets took %q, which the decoder reads as more than doc and $set: %+v", body, w)
		}
		if !reflect.DeepEqual(doc, w.Doc) || !reflect.DeepEqual(set, w.Set) {
			t.Fatalf("decodeSets(%q) = %q, %q; the decoder: %q, %q", body, doc, set, w.Doc, w.Set)
		}
	})
}
