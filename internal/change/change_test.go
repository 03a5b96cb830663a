package change

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func testSchema(t testing.TB) *Schema {
	t.Helper()
	s, err := NewSchema("id", []Column{
		{Name: "id", Type: TypeInt},
		{Name: "name", Type: TypeText, Nullable: true},
		{Name: "n", Type: TypeInt, Nullable: true},
		{Name: "f", Type: TypeFloat, Nullable: true},
		{Name: "ok", Type: TypeBool, Nullable: true},
		{Name: "j", Type: TypeJSON, Nullable: true},
		{Name: "req", Type: TypeText},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestParsePatchErrors(t *testing.T) {
	s := testSchema(t)
	tests := []struct{ name, body, want string }{
		{"empty", ``, "empty"},
		{"malformed", `{"$set":`, "malformed JSON"},
		{"not object", `[1]`, "JSON object"},
		{"trailing", `{"$set":{"n":1}} x`, "after the object"},
		{"no ops", `{}`, "no operators"},
		{"unknown op", `{"$mul":{"n":2}}`, "unknown operator"},
		{"field as op", `{"n":2}`, "unknown operator"},
		{"inc string", `{"$inc":{"n":"a"}}`, "must be a number, not a string"},
		{"inc float on int", `{"$inc":{"n":1.5}}`, "must be an integer"},
		{"inc text column", `{"$inc":{"name":1}}`, "needs a numeric column"},
		{"unknown field", `{"$set":{"zz":1}}`, "unknown field"},
		{"key change", `{"$set":{"id":2}}`, "is the key"},
		{"set type", `{"$set":{"n":"x"}}`, "must be an integer"},
		{"set bool", `{"$set":{"ok":1}}`, "true or false"},
		{"unset required", `{"$unset":{"req":""}}`, "NOT NULL"},
		{"null required", `{"$set":{"req":null}}`, "NOT NULL"},
		{"conflict", `{"$set":{"n":1},"$inc":{"n":1}}`, "appears in both"},
		{"op not object", `{"$set":5}`, "object of fields"},
		{"empty op", `{"$set":{}}`, "names no fields"},
		{"push on text column", `{"$push":{"name":1}}`, "needs a JSON column"},
		{"pull on int column", `{"$pull":{"n":1}}`, "needs a JSON column"},
		{"path into int column", `{"$set":{"n.x":1}}`, "only JSON columns"},
		{"path into unknown column", `{"$set":{"zz.x":1}}`, "unknown field"},
		{"path into key", `{"$set":{"id.x":1}}`, "is the key"},
		{"column and path inside it", `{"$set":{"j":{}},"$push":{"j.l":1}}`, "overlap"},
		{"empty path part", `{"$set":{"j..a":1}}`, "empty part"},
		{"positional path", `{"$set":{"j.$.a":1}}`, "positional"},
		{"inc string inside json", `{"$inc":{"j.n":"1"}}`, "must be a number, not a string"},
		{"push modifiers", `{"$push":{"j":{"$each":[1],"$slice":2}}}`, "supports only"},
		{"pull query", `{"$pull":{"j":{"a":1}}}`, "query"},
		{"dollar field in value", `{"$push":{"j.l":{"$x":1}}}`, "supports only"},
		{"dollar field inside value", `{"$set":{"j.a":{"b":{"$x":1}}}}`, "starts with '$'"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParsePatch(s, []byte(tc.body))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a client error", err)
			}
			if !strings.Contains(ce.Msg, tc.want) {
				t.Fatalf("message %q does not contain %q", ce.Msg, tc.want)
			}
		})
	}
}

func TestParsePut(t *testing.T) {
	s := testSchema(t)
	c, err := ParsePut(s, "7", []byte(`{"name":"a","req":"r","f":1.50,"j":{ "a" : [1, 2] }}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"id": "7", "name": `"a"`, "req": `"r"`, "f": "1.5", "j": `{"a":[1,2]}`, "n": "null", "ok": "null"}
	for k, v := range want {
		if string(c.Doc[k]) != v {
			t.Errorf("%s = %s, want %s", k, c.Doc[k], v)
		}
	}
	if _, err := ParsePut(s, "7", []byte(`{"name":"a"}`)); err == nil || !strings.Contains(err.Error(), "required") {
		t.Errorf("missing NOT NULL column: got %v", err)
	}
	if _, err := ParsePut(s, "7", []byte(`{"id":8,"req":"r"}`)); err == nil {
		t.Error("key mismatch accepted")
	}
}

func TestCanonicalID(t *testing.T) {
	s := testSchema(t)
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{{"42", "42", true}, {"-3", "-3", true}, {"+5", "5", true}, {"abc", "", false}, {"", "", false}, {"99999999999999999999", "", false}} {
		got, err := s.CanonicalID(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("CanonicalID(%q) = %q, %v", tc.in, got, err)
		}
	}
	ts, _ := NewSchema("k", []Column{{Name: "k", Type: TypeText}})
	if _, err := ts.CanonicalID("a\x00b"); err == nil {
		t.Error("control character accepted")
	}
	if _, err := ts.CanonicalID(strings.Repeat("x", MaxIDLen+1)); err == nil {
		t.Error("long id accepted")
	}
}

func patch(t *testing.T, s *Schema, body string) Change {
	t.Helper()
	c, err := ParsePatch(s, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestApplyAndCompactAgree(t *testing.T) {
	s := testSchema(t)
	base := Doc{"id": json.RawMessage("1"), "name": json.RawMessage(`"x"`), "n": json.RawMessage("null"), "f": json.RawMessage("0.1"), "ok": json.RawMessage("null"), "j": json.RawMessage("null"), "req": json.RawMessage(`"r"`)}
	put, _ := ParsePut(s, "1", []byte(`{"req":"p","n":10}`))
	seqs := [][]Change{
		{patch(t, s, `{"$inc":{"n":2}}`), patch(t, s, `{"$inc":{"n":3}}`)},
		{patch(t, s, `{"$set":{"n":5}}`), patch(t, s, `{"$inc":{"n":3}}`), patch(t, s, `{"$unset":{"name":""}}`)},
		{patch(t, s, `{"$inc":{"f":0.2}}`), patch(t, s, `{"$inc":{"f":0.3}}`)},
		{patch(t, s, `{"$inc":{"n":1}}`), put, patch(t, s, `{"$inc":{"n":1}}`)},
		{patch(t, s, `{"$unset":{"n":""}}`), patch(t, s, `{"$inc":{"n":4}}`)},
		{patch(t, s, `{"$set":{"name":"a"}}`), {Kind: Delete}},
		{patch(t, s, `{"$push":{"j.l":1}}`), patch(t, s, `{"$inc":{"j.n":2}}`), patch(t, s, `{"$push":{"j.l":2}}`)},
		{patch(t, s, `{"$set":{"j":{"l":[0]}}}`), patch(t, s, `{"$push":{"j.l":1},"$set":{"n":1}}`), patch(t, s, `{"$pull":{"j.l":0}}`)},
		{patch(t, s, `{"$push":{"j":1}}`), patch(t, s, `{"$unset":{"j":""}}`), patch(t, s, `{"$addToSet":{"j":2}}`)},
		// Runs of one change: a put or a patch of sets only shares its
		// document with the Effect; the others are compacted as runs.
		{put},
		{patch(t, s, `{"$set":{"name":"a","n":7}}`)},
		{patch(t, s, `{"$set":{"name":"a"},"$unset":{"n":""}}`)},
		{patch(t, s, `{"$set":{"name":"a"},"$inc":{"f":1.5}}`)},
		{patch(t, s, `{"$set":{"name":"a"},"$push":{"j.l":1}}`)},
		{{Kind: Delete}},
	}
	for i, cs := range seqs {
		want, err := ApplyAll(base, cs)
		if err != nil {
			t.Fatal(err)
		}
		e, err := Compact(cs)
		if err != nil {
			t.Fatal(err)
		}
		got := applyEffect(t, base, e)
		if !docEqual(got, want) {
			t.Errorf("case %d: effect %+v gives %v, sequential apply gives %v", i, e, got, want)
		}
	}
}

// applyEffect plays an Effect the way the SQL stores do.
func applyEffect(t *testing.T, d Doc, e Effect) Doc {
	switch e.Kind {
	case Put:
		return e.Doc.Clone()
	case Delete:
		return nil
	}
	out := d.Clone()
	for k, v := range e.Set {
		out[k] = v
	}
	for col, ops := range e.JSON {
		v, err := ApplyJSON(col, out[col], ops)
		if err != nil {
			t.Fatal(err)
		}
		out[col] = v
	}
	for k, amounts := range e.Inc {
		for _, a := range amounts {
			v, err := addNumber(out[k], a)
			if err != nil {
				t.Fatal(err)
			}
			out[k] = v
		}
	}
	return out
}

func docEqual(a, b Doc) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if string(b[k]) != string(v) {
			return false
		}
	}
	return true
}

func TestEncodeDecode(t *testing.T) {
	s := testSchema(t)
	c := patch(t, s, `{"$set":{"name":"a|b"},"$inc":{"n":-2},"$unset":{"f":""}}`)
	enc := Encode(c)
	got, err := Decode("17|1700000000000|" + string(enc))
	if err != nil {
		t.Fatal(err)
	}
	if got.Seq != 17 || got.Kind != Patch || string(got.Set["name"]) != `"a|b"` || got.Inc["n"] != "-2" || len(got.Unset) != 1 {
		t.Fatalf("round trip: %+v", got)
	}
	for _, bad := range []string{"", "x|1|U|{}", "1|2|Z|{}", "1|2|U|{", "12"} {
		if _, err := Decode(bad); err == nil {
			t.Errorf("Decode(%q) accepted", bad)
		}
	}
}

func TestParsePatchJSONColumn(t *testing.T) {
	s := testSchema(t)
	tests := []struct{ name, body, want string }{
		{"push to column", `{"$push":{"j":1}}`, `U|{"json":{"j":[{"op":"$push","values":[1]}]}}`},
		{"set inside", `{"$set":{"j.a.b":{"x":1.50}}}`, `U|{"json":{"j":[{"op":"$set","path":"a.b","value":{"x":1.5}}]}}`},
		{"inc inside", `{"$inc":{"j.n":2}}`, `U|{"json":{"j":[{"op":"$inc","path":"n","value":2}]}}`},
		{"pull in", `{"$pull":{"j.l":{"$in":[1,"a"]}}}`, `U|{"json":{"j":[{"op":"$pull","path":"l","values":[1,"a"],"in":true}]}}`},
		{"paths in order", `{"$unset":{"j.b":""},"$addToSet":{"j.a":{"$each":[1,1]}},"$set":{"n":2}}`,
			`U|{"$set":{"n":2},"json":{"j":[{"op":"$addToSet","path":"a","values":[1,1]},{"op":"$unset","path":"b"}]}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := patch(t, s, tc.body)
			if got := string(Encode(c)); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestApplyJSONColumn(t *testing.T) {
	s := testSchema(t)
	tests := []struct{ name, j, body, want string }{
		{"push to null column", `null`, `{"$push":{"j":1}}`, `[1]`},
		{"set inside null column", `null`, `{"$set":{"j.a.b":1}}`, `{"a":{"b":1}}`},
		{"unset inside null column", `null`, `{"$unset":{"j.a":""}}`, `null`},
		{"pull from null column", `null`, `{"$pull":{"j":1}}`, `null`},
		{"inc inside", `{"n":1,"m":2}`, `{"$inc":{"j.n":0.5}}`, `{"n":1.5,"m":2}`},
		{"addToSet keeps order", `{"l":["b"]}`, `{"$addToSet":{"j.l":{"$each":["a","b","c"]}}}`, `{"l":["b","a","c"]}`},
		{"stored spelling kept", `{"x":1.50,"l":[1]}`, `{"$push":{"j.l":2}}`, `{"x":1.50,"l":[1,2]}`},
		// jsonb does not keep field order: objects are equal regardless of it.
		{"addToSet object in another order", `{"l":[{"a":2,"b":1}]}`, `{"$addToSet":{"j.l":{"b":1,"a":2}}}`, `{"l":[{"a":2,"b":1}]}`},
		{"pull array of object in another order", `{"l":[[{"a":2,"b":1}],3]}`, `{"$pull":{"j.l":[{"b":1,"a":2}]}}`, `{"l":[3]}`},
		{"pull in object in another order", `{"l":[{"a":2,"b":1},3]}`, `{"$pull":{"j.l":{"$in":[{"b":1,"a":2}]}}}`, `{"l":[3]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base, err := ParsePut(s, "1", []byte(`{"req":"r","j":`+tc.j+`}`))
			if err != nil {
				t.Fatal(err)
			}
			got, err := Apply(base.Doc, patch(t, s, tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if string(got["j"]) != tc.want {
				t.Fatalf("j = %s, want %s", got["j"], tc.want)
			}
		})
	}
	base, _ := ParsePut(s, "1", []byte(`{"req":"r","j":{"a":"s"}}`))
	_, err := Apply(base.Doc, patch(t, s, `{"$push":{"j.a":1}}`))
	var te *TypeError
	if !errors.As(err, &te) || te.Path != "j.a" {
		t.Fatalf("push to a string inside a JSON column: got %v, want a *TypeError for j.a", err)
	}
}

// TestCompactJSONColumn: operators inside a JSON column go to Effect.JSON,
// unless the run set the column, in which case Set holds the result.
func TestCompactJSONColumn(t *testing.T) {
	s := testSchema(t)
	e, err := Compact([]Change{patch(t, s, `{"$push":{"j.l":1}}`), patch(t, s, `{"$push":{"j.l":2},"$inc":{"n":1}}`)})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Set) != 0 || len(e.JSON["j"]) != 1 || len(e.JSON["j"][0].Values) != 2 || e.Inc["n"][0] != "1" {
		t.Fatalf("got %+v, want one $push of [1,2] in JSON and $inc of n", e)
	}
	e, err = Compact([]Change{patch(t, s, `{"$set":{"j":{"l":[0]}}}`), patch(t, s, `{"$push":{"j.l":1}}`)})
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Set["j"]) != `{"l":[0,1]}` || len(e.JSON) != 0 {
		t.Fatalf("got %+v, want Set j = {\"l\":[0,1]}", e)
	}
	e, err = Compact([]Change{patch(t, s, `{"$push":{"j.l":1}}`), patch(t, s, `{"$unset":{"j":""}}`)})
	if err != nil || string(e.Set["j"]) != "null" || len(e.JSON) != 0 {
		t.Fatalf("got %+v, %v; want Set j = null only", e, err)
	}
	if _, err := Compact([]Change{patch(t, s, `{"$set":{"j":"s"}}`), patch(t, s, `{"$push":{"j":1}}`)}); !errors.As(err, new(*TypeError)) {
		t.Fatalf("push to a string set in the same run: got %v, want a *TypeError", err)
	}
}

func TestIncOverflow(t *testing.T) {
	s := testSchema(t)
	d := Doc{"n": json.RawMessage("9223372036854775807")}
	if _, err := Apply(d, patch(t, s, `{"$inc":{"n":1}}`)); err == nil {
		t.Fatal("overflow not reported")
	}
}

// TestIncOverflowIsTypeError: an $inc of a column that leaves the 64-bit
// integers is a TypeError — applied to a document (a read skips it as the
// store will reject it) and folded into a compacted effect — not an
// internal error.
func TestIncOverflowIsTypeError(t *testing.T) {
	s := testSchema(t)
	c, err := ParsePatch(s, []byte(`{"$inc":{"n":7000000000000000000}}`))
	if err != nil {
		t.Fatal(err)
	}
	doc := Doc{"id": json.RawMessage("1"), "req": json.RawMessage(`"r"`), "n": json.RawMessage("7000000000000000000")}
	var te *TypeError
	if _, err := Apply(doc, c); !errors.As(err, &te) || te.Path != "n" {
		t.Errorf("Apply: %v, want a TypeError of n", err)
	}
	put, err := ParsePut(s, "1", []byte(`{"req":"r","n":7000000000000000000}`))
	if err != nil {
		t.Fatal(err)
	}
	put.Seq, c.Seq = 1, 2
	if _, err := Compact([]Change{put, c}); !errors.As(err, &te) || te.Path != "n" {
		t.Errorf("Compact: %v, want a TypeError of n", err)
	}
}
