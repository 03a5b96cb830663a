package jsonscan

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// number is encoding/json's answer: s is valid JSON, starts as a number
// does, and has no whitespace around it.
func number(s string) bool {
	return len(s) > 0 && (s[0] == '-' || s[0] >= '0' && s[0] <= '9') && strings.TrimSpace(s) == s && json.Valid([]byte(s))
}

// IsNumber agrees with encoding/json on what is a number.
func TestIsNumber(t *testing.T) {
	for _, s := range []string{"0", "-0", "7", "-12", "1.5", "1e5", "1E+5", "-1.25e-3", "10", "123456789012345678901234567890",
		"", "-", "01", "1.", ".5", "1e", "1e+", "+1", "0x1", "1 ", " 1", "NaN", "1.5.2", "--1", "1e5e5"} {
		want := number(s)
		if got := IsNumber(s); got != want {
			t.Errorf("IsNumber(%q) = %v, want %v", s, got, want)
		}
		if got := IsNumber([]byte(s)); got != want {
			t.Errorf("IsNumber([]byte(%q)) = %v, want %v", s, got, want)
		}
	}
	if n := NumberLen("12.5,"); n != 4 {
		t.Errorf(`NumberLen("12.5,") = %d, want 4`, n)
	}
}

// compact is encoding/json's answer for ValueEnd: s is one valid JSON
// value with no whitespace outside its strings.
func compact(s string) bool {
	var b bytes.Buffer
	return json.Valid([]byte(s)) && json.Compact(&b, []byte(s)) == nil && b.String() == s
}

// ValueEnd finds the end of compact values and refuses the rest.
func TestValueEnd(t *testing.T) {
	for _, s := range []string{`{"a":[1,2,{"b":null}],"c":"x\"y\u00e9"}`, `[]`, `{}`, `"s"`, `-1.5e3`, `true`, `false`, `null`, `[[[]]]`,
		`{"a":1,}`, `[1,]`, `{"a" :1}`, `[1 ,2]`, `01`, `"\x"`, `"\u12"`, "\"tab\t\"", `{"a"}`, `tru`, `nul`, `[1-2]`, `{`, `"`, ``, `1.`, `.5`} {
		end, ok := ValueEnd(s, 0)
		if got, want := ok && end == len(s), compact(s); got != want {
			t.Errorf("ValueEnd(%q) = %d, %v; encoding/json says compact: %v", s, end, ok, want)
		}
	}
	if end, ok := ValueEnd(`[1,2],"x"`, 0); !ok || end != 5 {
		t.Errorf("ValueEnd of a value followed by more = %d, %v, want 5, true", end, ok)
	}
	deep := strings.Repeat("[", MaxDepth+2) + strings.Repeat("]", MaxDepth+2)
	if _, ok := ValueEnd(deep, 0); ok {
		t.Errorf("ValueEnd followed %d levels, more than MaxDepth", MaxDepth+2)
	}
	if end, escaped, ok := StringEnd([]byte(`"a\nb",`), 0); !ok || !escaped || end != 6 {
		t.Errorf("StringEnd = %d, %v, %v, want 6, true, true", end, escaped, ok)
	}
}

// FuzzScan: IsNumber and ValueEnd agree with encoding/json (within
// ValueEnd's depth).
func FuzzScan(f *testing.F) {
	for _, s := range []string{"-1.5e3", "01", `{"a":[1,"x\u00e9"]}`, `[1, 2]`, `"\q"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := IsNumber(s), number(s); got != want {
			t.Fatalf("IsNumber(%q) = %v; encoding/json says %v", s, got, want)
		}
		if strings.Count(s, "[")+strings.Count(s, "{") > MaxDepth {
			return
		}
		end, ok := ValueEnd(s, 0)
		if got, want := ok && end == len(s), compact(s); got != want {
			t.Fatalf("ValueEnd(%q) = %d, %v; encoding/json says compact: %v", s, end, ok, want)
		}
	})
}

func TestUnquote(t *testing.T) {
	for in, want := range map[string]string{
		`"abc"`:               "abc",
		`""`:                  "",
		`"a\"b\\c\/d"`:        `a"b\c/d`,
		`"\b\f\n\r\t"`:        "\b\f\n\r\t",
		`"x\u003cy\u0026"`:    "x<y&",
		`"\u00e9\u20AC"`:      "é€",
		`"\ud83d\ude00!"`:     "😀!",
		`"\ud83d"`:            "\uFFFD",
		`"\ud83dx"`:           "\uFFFDx",
		`"\ud83d\u0041"`:      "\uFFFDA",
		`"\ude00"`:            "\uFFFD",
		"\"\xff\"":            "\uFFFD",
		"\"caf\xc3\xa9 \\n\"": "café \n",
		"\"\xed\xa0\x80\\t\"": "\uFFFD\uFFFD\uFFFD\t",
	} {
		got, ok := Unquote(in)
		if !ok || got != want {
			t.Errorf("Unquote(%s) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{`abc`, `"a`, `"a"b"`, `"\q"`, `"\u12"`, "\"a\tb\"", `"a" `, `""""`} {
		if got, ok := Unquote(in); ok {
			t.Errorf("Unquote(%s) = %q, true; want false", in, got)
		}
	}
}

// FuzzUnquote: Unquote decodes exactly the strings json.Unmarshal decodes,
// to the same string.
func FuzzUnquote(f *testing.F) {
	for _, s := range []string{`"abc"`, `"a\"b\u003c"`, `"\ud83d\ude00"`, `"\ud83d\u0041"`, "\"\xff\"", `"\u00e9é"`, `"\q"`, `"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := Unquote(s)
		var want string
		err := json.Unmarshal([]byte(s), &want)
		if ok != (err == nil && len(s) > 0 && s[0] == '"' && s[len(s)-1] == '"') {
			t.Fatalf("Unquote(%q): ok %v; json.Unmarshal: %q, %v", s, ok, want, err)
		}
		if ok && got != want {
			t.Fatalf("Unquote(%q) = %q; json.Unmarshal: %q", s, got, want)
		}
	})
}
