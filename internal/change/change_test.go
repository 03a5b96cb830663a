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
		{"push on sql", `{"$push":{"j":1}}`, "JSON column"},
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

func TestIncOverflow(t *testing.T) {
	s := testSchema(t)
	d := Doc{"n": json.RawMessage("9223372036854775807")}
	if _, err := Apply(d, patch(t, s, `{"$inc":{"n":1}}`)); err == nil {
		t.Fatal("overflow not reported")
	}
}
