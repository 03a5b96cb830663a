package jsonscan

import (
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

// FuzzIsNumber: IsNumber and encoding/json agree.
func FuzzIsNumber(f *testing.F) {
	f.Add("-1.5e3")
	f.Add("01")
	f.Fuzz(func(t *testing.T, s string) {
		want := number(s)
		if got := IsNumber(s); got != want {
			t.Fatalf("IsNumber(%q) = %v; encoding/json says %v", s, got, want)
		}
	})
}
