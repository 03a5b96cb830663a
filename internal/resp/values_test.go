package resp

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/redcon"

	"github.com/writeback/writeback/internal/change"
)

// Every string survives the trip wire → canonical JSON → wire, and the
// canonical JSON is exactly what the HTTP API stores for the same string.
func TestTextRoundTrip(t *testing.T) {
	col := change.Column{Name: "s", Type: change.TypeText, Nullable: true}
	r := rand.New(rand.NewPCG(1, 2))
	cases := []string{"", "plain", `a "quoted" \ back\slash`, "<html> & friends", "tab\tnew\nline\r", "\u2028\u2029", "é ü 日本 😀", "\x00\x01\x1f\x7f"}
	for range 2000 {
		b := make([]rune, r.IntN(40))
		for i := range b {
			switch r.IntN(4) {
			case 0:
				b[i] = rune(r.IntN(0x80))
			case 1:
				b[i] = rune(0x80 + r.IntN(0x800))
			case 2:
				b[i] = rune(0x10000 + r.IntN(0x1000))
			default:
				b[i] = []rune(`"\<>&`)[r.IntN(5)]
			}
		}
		if s := string(b); utf8.ValidString(s) {
			cases = append(cases, s)
		}
	}
	for _, s := range cases {
		canon, e := canonicalOf(col, []byte(s))
		if e != nil {
			t.Fatalf("%q: %v", s, e)
		}
		raw, _ := json.Marshal(s)
		want, err := change.Canonical(col, raw)
		if err != nil || string(canon) != string(want) {
			t.Fatalf("%q: canonical %s; the HTTP API stores %s (%v)", s, canon, want, err)
		}
		got, _, ok := appendWire(nil, change.TypeText, string(canon), nil)
		if want := redcon.AppendBulkString(nil, s); !ok || string(got) != string(want) {
			t.Fatalf("%q: back on the wire as %q", s, got)
		}
	}
}

// unquote agrees with encoding/json where it answers, and leaves the rest
// to it.
func TestUnquote(t *testing.T) {
	for _, in := range []string{`abc`, `a\"b`, `\\`, `\/`, `\b\f\n\r\t`, `\u003c\u003e\u0026`, `\u00e9`, `\ud83d\ude00`, `x\u2028y`} {
		got, ok := unquote(nil, in)
		var want string
		if err := json.Unmarshal([]byte(`"`+in+`"`), &want); err != nil {
			t.Fatal(err)
		}
		if !ok || string(got) != want {
			t.Errorf("unquote(%s) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{`\`, `\x`, `\u12`, `\u12g4`, `\ud83d`, `\ud83dx`, `\ud83d\u0041`} {
		if got, ok := unquote([]byte("keep"), in); ok || string(got) != "keep" {
			t.Errorf("unquote(%s) = %q, %v; want a refusal that leaves dst alone", in, got, ok)
		}
	}
}

func TestCanonicalOf(t *testing.T) {
	tests := []struct {
		typ       change.Type
		nullable  bool
		in, out   string
		errSubstr string
	}{
		{typ: change.TypeInt, in: "42", out: "42"},
		{typ: change.TypeInt, in: "-7", out: "-7"},
		{typ: change.TypeInt, in: "007", out: "7"},
		{typ: change.TypeInt, in: "1.5", errSubstr: "not an integer or out of range"},
		{typ: change.TypeInt, in: "9223372036854775808", errSubstr: "not an integer"},
		{typ: change.TypeInt, in: " 1", errSubstr: "not an integer"},
		{typ: change.TypeInt, in: "+1", errSubstr: "not an integer"},
		{typ: change.TypeInt, in: "", errSubstr: "not an integer"},
		{typ: change.TypeFloat, in: "1.5", out: "1.5"},
		{typ: change.TypeFloat, in: "3", out: "3"},
		{typ: change.TypeFloat, in: ".25", out: "0.25"},
		{typ: change.TypeFloat, in: "1e3", out: "1000"},
		{typ: change.TypeFloat, in: "inf", errSubstr: "not a valid float"},
		{typ: change.TypeFloat, in: "1e999", errSubstr: "not a valid float"},
		{typ: change.TypeFloat, in: "0x10", errSubstr: "not a valid float"},
		{typ: change.TypeDecimal, in: "12.50", out: "12.50"},
		{typ: change.TypeDecimal, in: ".5", errSubstr: "not a number"},
		{typ: change.TypeBool, in: "1", out: "true"},
		{typ: change.TypeBool, in: "FALSE", out: "false"},
		{typ: change.TypeBool, in: "yes", errSubstr: "not a boolean"},
		{typ: change.TypeJSON, in: `{"a": [1, 2]}`, out: `{"a":[1,2]}`},
		{typ: change.TypeJSON, in: `hello`, errSubstr: "not valid JSON"},
		{typ: change.TypeJSON, nullable: true, in: `null`, out: `null`},
		{typ: change.TypeJSON, in: `null`, errSubstr: "NOT NULL"},
		{typ: change.TypeText, in: "\xff", errSubstr: "not valid UTF-8"},
		{typ: change.TypeOther, in: "2026-01-02", out: `"2026-01-02"`},
	}
	for _, tc := range tests {
		col := change.Column{Name: "f", Type: tc.typ, Nullable: tc.nullable}
		got, e := canonicalOf(col, []byte(tc.in))
		switch {
		case tc.errSubstr != "":
			if e == nil || !strings.Contains(e.msg, tc.errSubstr) || !strings.HasPrefix(e.msg, "ERR ") {
				t.Errorf("%s %q: %s, %v; want an ERR containing %q", tc.typ, tc.in, got, e, tc.errSubstr)
			}
		case e != nil || string(got) != tc.out:
			t.Errorf("%s %q: %s, %v; want %s", tc.typ, tc.in, got, e, tc.out)
		}
		if e == nil && tc.typ == change.TypeBool {
			want := redcon.AppendBulkString(nil, map[string]string{"true": "1", "false": "0"}[string(got)])
			if back, _, _ := appendWire(nil, tc.typ, string(got), nil); string(back) != string(want) {
				t.Errorf("%s %q: back on the wire as %q", tc.typ, tc.in, back)
			}
		}
	}
}
