package change

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestNewDynamicSchema(t *testing.T) {
	s, err := NewDynamicSchema("_id")
	if err != nil || !s.Dynamic() || s.Key != "_id" || s.KeyType() != TypeText {
		t.Fatalf("got %+v, %v", s, err)
	}
	if testSchema(t).Dynamic() {
		t.Error("a table's schema says it is dynamic")
	}
	for _, bad := range []string{"", "$id", "a.b"} {
		if _, err := NewDynamicSchema(bad); err == nil {
			t.Errorf("NewDynamicSchema(%q) accepted", bad)
		}
	}
}

func TestParseDocPut(t *testing.T) {
	s := docSchema(t)
	c, err := ParsePut(s, "k1", []byte(`{"a":{"y":1,"x":[1.0,2e0,"s"]},"n":null,"_id":"k1"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := docString(c.Doc), `{"_id":"k1","a":{"y":1,"x":[1.0,2.0,"s"]},"n":null}`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	tests := []struct{ name, body, want string }{
		{"id mismatch", `{"_id":"k2"}`, "id in the path"},
		{"id not a string", `{"_id":1}`, "id in the path"},
		{"dollar field", `{"$a":1}`, "starts with '$'"},
		{"dotted field", `{"a.b":1}`, "contains '.'"},
		{"empty field", `{"":1}`, "empty"},
		{"nested dollar field", `{"a":{"$b":1}}`, "starts with '$'"},
		{"nested duplicate field", `{"a":{"b":1,"b":2}}`, "appears twice"},
		{"infinite number", `{"a":1e400}`, "finite"},
		{"invalid UTF-8", "{\"a\":\"\xff\"}", "UTF-8"},
		{"too deep", `{"a":` + strings.Repeat("[", 101) + strings.Repeat("]", 101) + `}`, "nested more than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePut(s, "k1", []byte(tc.body))
			var ce *Error
			if !errors.As(err, &ce) || !strings.Contains(ce.Msg, tc.want) {
				t.Fatalf("got %v, want a client error containing %q", err, tc.want)
			}
		})
	}
}

func TestParseDocPatch(t *testing.T) {
	s := docSchema(t)
	c, err := ParsePatch(s, []byte(`{"$set":{"b.z":1,"b.a":{"k":2.50}},"$inc":{"n":-1},"$unset":{"x":1},"$push":{"l":{"$each":[1,[2]]}},"$addToSet":{"s":"v"},"$pull":{"p":{"$in":[null]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `U|{"ops":[{"op":"$set","path":"b.a","value":{"k":2.5}},{"op":"$set","path":"b.z","value":1},` +
		`{"op":"$push","path":"l","values":[1,[2]]},{"op":"$inc","path":"n","value":-1},` +
		`{"op":"$pull","path":"p","values":[null],"in":true},{"op":"$addToSet","path":"s","values":["v"]},` +
		`{"op":"$unset","path":"x"}]}`
	if got := string(Encode(c)); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestParseDocPatchErrors(t *testing.T) {
	s := docSchema(t)
	tests := []struct{ name, body, want string }{
		{"no operators", `{}`, "no operators"},
		{"unknown operator", `{"$mul":{"n":2}}`, "unknown operator"},
		{"replacement document", `{"a":1}`, "unknown operator"},
		{"key", `{"$set":{"_id":"x"}}`, "is the key"},
		{"inside key", `{"$set":{"_id.a":1}}`, "is the key"},
		{"same path twice", `{"$set":{"a":1},"$unset":{"a":""}}`, "appears in both $set and $unset"},
		{"overlap", `{"$set":{"a.b":1},"$push":{"a.b.c":1}}`, "overlap"},
		{"overlap through numbers", `{"$set":{"a.0":1},"$inc":{"a":1}}`, "overlap"},
		{"empty part", `{"$set":{"a..b":1}}`, "empty part"},
		{"trailing dot", `{"$set":{"a.":1}}`, "empty part"},
		{"positional", `{"$set":{"a.$":1}}`, "positional"},
		{"all positional", `{"$set":{"a.$[].b":1}}`, "positional"},
		{"leading zero index", `{"$set":{"a.01":1}}`, "leading zero"},
		{"NUL in path", "{\"$set\":{\"a\\u0000b\":1}}", "NUL"},
		{"inc string", `{"$inc":{"a":"1"}}`, "must be a number, not a string"},
		{"inc null", `{"$inc":{"a":null}}`, "must be a number, not null"},
		{"inc infinite", `{"$inc":{"a":1e999}}`, "finite"},
		{"push slice", `{"$push":{"a":{"$each":[1],"$slice":1}}}`, "supports only"},
		{"push each not array", `{"$push":{"a":{"$each":1}}}`, "must be an array"},
		{"addToSet position", `{"$addToSet":{"a":{"$position":0}}}`, "supports only"},
		{"pull document", `{"$pull":{"a":{"b":1}}}`, "query"},
		{"pull empty document", `{"$pull":{"a":{}}}`, "query"},
		{"pull gt", `{"$pull":{"a":{"$gt":1}}}`, "only the condition"},
		{"pull in not array", `{"$pull":{"a":{"$in":1}}}`, "must be an array"},
		{"dollar field in value", `{"$set":{"a":{"$x":1}}}`, "starts with '$'"},
		{"dotted field in value", `{"$set":{"a":{"x.y":1}}}`, "contains '.'"},
		{"invalid UTF-8", "{\"$set\":{\"a\":\"\xff\"}}", "UTF-8"},
		{"operator not an object", `{"$set":[1]}`, "object of fields"},
		{"empty operator", `{"$push":{}}`, "names no fields"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePatch(s, []byte(tc.body))
			var ce *Error
			if !errors.As(err, &ce) || !strings.Contains(ce.Msg, tc.want) {
				t.Fatalf("got %v, want a client error containing %q", err, tc.want)
			}
		})
	}
}

func TestApplyDocTypeErrors(t *testing.T) {
	s := docSchema(t)
	tests := []struct{ name, doc, body, path, want string }{
		{"inc string", `{"a":"x"}`, `{"$inc":{"a":1}}`, "a", `$inc of "a" needs a number, but the field holds a string`},
		{"push non-array", `{"a":{"b":1}}`, `{"$push":{"a.b":1}}`, "a.b", `$push to "a.b" needs an array, but the field holds a number`},
		{"addToSet object", `{"a":{}}`, `{"$addToSet":{"a":1}}`, "a", `$addToSet to "a" needs an array, but the field holds an object`},
		{"pull boolean", `{"a":true}`, `{"$pull":{"a":1}}`, "a", `$pull from "a" needs an array, but the field holds a boolean`},
		{"through scalar", `{"a":{"b":"s"}}`, `{"$set":{"a.b.c":1}}`, "a.b.c", `cannot apply $set to "a.b.c": "a.b" holds a string`},
		{"array needs an index", `{"a":[1]}`, `{"$inc":{"a.x":1}}`, "a.x", `cannot apply $inc to "a.x": "a" is an array and "x" is not an index`},
		{"pull through scalar", `{"a":1}`, `{"$pull":{"a.b":1}}`, "a.b", `cannot apply $pull to "a.b": "a" holds a number`},
		{"overflow", `{"a":-9223372036854775808}`, `{"$inc":{"a":-1}}`, "a", `$inc of "a" overflows a 64-bit integer`},
		{"not finite", `{"a":1.7e308}`, `{"$inc":{"a":1.7e308}}`, "a", `$inc of "a" does not give a finite number`},
		{"too much padding", `{"a":[]}`, `{"$set":{"a.1500001":1}}`, "a.1500001", `cannot apply $set to "a.1500001": it would pad the array with more than 1500000 nulls`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := docOf(t, s, tc.doc)
			_, err := Apply(doc, patches(t, s, tc.body)[0])
			var te *TypeError
			if !errors.As(err, &te) {
				t.Fatalf("got %v, want a *TypeError", err)
			}
			if te.Path != tc.path || te.Msg != tc.want || err.Error() != "change: "+tc.want {
				t.Fatalf("got path %q, message %q\nwant path %q, message %q", te.Path, te.Msg, tc.path, tc.want)
			}
		})
	}
	if _, err := Apply(nil, patches(t, s, `{"$set":{"a":1}}`)[0]); !errors.Is(err, ErrNotFound) {
		t.Errorf("patch of a missing document: %v", err)
	}
	if d, err := Apply(docOf(t, s, `{"a":[]}`), patches(t, s, `{"$set":{"a.1500000":1}}`)[0]); err != nil || len(d["a"]) < 1500000*5 {
		t.Errorf("padding up to the limit: %v", err)
	}
}

func TestCanonicalNumber(t *testing.T) {
	tests := []struct{ in, want string }{
		{"1", "1"}, {"-0", "0"}, {"0012", "12"},
		{"1.0", "1.0"}, {"1.50", "1.5"}, {"-0.0", "-0.0"}, {"2e0", "2.0"}, {"1E2", "100.0"},
		{"1e21", "1e+21"}, {"1e-7", "1e-7"}, {"0.000001", "0.000001"},
		{"9223372036854775807", "9223372036854775807"},
		{"9223372036854775808", "9223372036854776000.0"},
		{"-9223372036854775809", "-9223372036854776000.0"},
		{"123456789012345678901234", "1.2345678901234569e+23"},
		{"1e-400", "0.0"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := canonicalNumber(tc.in)
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	for _, bad := range []string{"1e400", "-1e309"} {
		if _, err := canonicalNumber(bad); err == nil {
			t.Errorf("canonicalNumber(%q) accepted", bad)
		}
	}
}

func TestEqualValues(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{`1`, `1.0`, true},
		{`1`, `1.5`, false},
		{`9007199254740993`, `9007199254740992.0`, false},
		{`9007199254740992`, `9007199254740992.0`, true},
		{`-0.0`, `0`, true},
		{`"a"`, `"\u0061"`, true},
		{`"1"`, `1`, false},
		{`null`, `false`, false},
		{`[1,2]`, `[1.0,2]`, true},
		{`[1,2]`, `[2,1]`, false},
		{`{"a":1,"b":2}`, `{"a":1,"b":2.0}`, true},
		{`{"a":1,"b":2}`, `{"b":2,"a":1}`, false},
		{`{"a":[]}`, `{"a":{}}`, false},
		{`1e300`, `1e300`, true},
		{`0.1`, `0.10`, true},
		{`1e19`, `10000000000000000000`, true},
		{`["a",1]`, `["a",1.0]`, true},
		{`["a1"]`, `["a","1"]`, false},
		{`{"a":"b"}`, `{"ab":""}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.a+" "+tc.b, func(t *testing.T) {
			a, err1 := mustParse(json.RawMessage(tc.a))
			b, err2 := mustParse(json.RawMessage(tc.b))
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if got := equalNodes(a, b); got != tc.want {
				t.Fatalf("equal = %v, want %v", got, tc.want)
			}
			if got := valueKey(a, ordered) == valueKey(b, ordered); got != tc.want {
				t.Fatalf("keys %q and %q: equal = %v, want %v", valueKey(a, ordered), valueKey(b, ordered), got, tc.want)
			}
		})
	}
}

func TestEncodeDecodeOps(t *testing.T) {
	d := docSchema(t)
	s := testSchema(t)
	for _, c := range []Change{
		patches(t, d, `{"$set":{"a.b":null,"c":"x|y"},"$unset":{"u":""},"$inc":{"n":1.0},"$push":{"l":{"$each":[]}},"$addToSet":{"s":{"$each":[1,{"k":[2]}]}},"$pull":{"p":{"$in":[[1],"z"]}}}`)[0],
		patches(t, d, `{"$pull":{"p":[1]}}`)[0],
		patch(t, s, `{"$set":{"n":1,"j.a":null},"$push":{"j.l":2},"$unset":{"name":""},"$inc":{"f":2}}`),
		CompactDoc(patches(t, d, `{"$unset":{"a.b":""}}`, `{"$set":{"a.b":1}}`))[0],
	} {
		t.Run(string(Encode(c)), func(t *testing.T) {
			enc := Encode(c)
			got, err := Decode("3|1700000000000|" + string(enc))
			if err != nil {
				t.Fatal(err)
			}
			if again := Encode(got); string(again) != string(enc) || got.Seq != 3 {
				t.Fatalf("round trip: %s became %s", enc, again)
			}
			base := docOf(t, d, `{"a":{},"p":[[1],"z",1]}`)
			if c.isTable() {
				b, _ := ParsePut(s, "1", []byte(`{"req":"r"}`))
				base = b.Doc
			}
			want, err1 := Apply(base, c)
			have, err2 := Apply(base, got)
			if err1 != nil || err2 != nil || !docEqual(want, have) {
				t.Fatalf("decoded change applies differently: %s (%v) vs %s (%v)", docString(want), err1, docString(have), err2)
			}
		})
	}
	for _, bad := range []string{`1|2|U|{"ops":[{"op":"$mul","path":"a"}]}`, `1|2|U|{"json":{"j":[{"op":"$x"}]}}`, `1|2|U|{"ops":7}`} {
		if _, err := Decode(bad); err == nil {
			t.Errorf("Decode(%q) accepted", bad)
		}
	}
}

// TestValueKeyMatchesEqual: valueKey agrees with equalNodes on random
// values drawn from a small alphabet (so that many pairs are equal).
func TestValueKeyMatchesEqual(t *testing.T) {
	g := newGen(t, 5)
	equal := 0
	for i := range 20000 {
		a, err1 := parseValue([]byte(g.value(2)), client)
		b, err2 := parseValue([]byte(g.value(2)), client)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		eq := equalNodes(a, b)
		if eq {
			equal++
		}
		if (valueKey(a, ordered) == valueKey(b, ordered)) != eq {
			t.Fatalf("case %d: %s and %s: equalNodes %v, keys %q and %q", i, a.encode(), b.encode(), eq, valueKey(a, ordered), valueKey(b, ordered))
		}
	}
	if equal < 400 {
		t.Errorf("only %d equal pairs", equal)
	}
}
