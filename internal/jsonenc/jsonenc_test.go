package jsonenc

import (
	"encoding/json"
	"math"
	"testing"
)

// Value writes json.Marshal's bytes, and refuses what it refuses, for
// every kind of value a statement argument is.
func TestValue(t *testing.T) {
	for _, v := range []any{
		nil, true, false, 0, -7, int64(math.MaxInt64), int32(-3), uint64(math.MaxUint64), uint8(7), int16(-2),
		0.0, math.Copysign(0, -1), 1.5, -12.25, 1e-6, 9.99e-7, 1e20, 1e21, 123456789.125, float32(1.1), math.MaxFloat64,
		math.NaN(), math.Inf(1),
		"", "plain text", "tab\there", `q"uote`, `back\slash`, "<b>&amp;", "é", "\u2028", "\x7f", "\xff",
		json.RawMessage(`{"a": [1, 2]}`), json.RawMessage(`"<&>"`), json.RawMessage(`12.50`), json.RawMessage(`{`), json.RawMessage(``), json.RawMessage(nil),
		[]byte("bytes"), map[string]any{"b": 1, "a": "x"}, []any{1, "two"}, struct{ A int }{1},
		map[string]any{"$set": map[string]any{"d_next_o_id": 3001, "<&>": "é"}, "$inc": map[string]any{"n": 1.5}},
		map[string]any(nil), map[string]any{}, map[string]any{"bad": math.NaN()}, map[string]any{"v": json.RawMessage(`[1, 2]`)},
	} {
		want, werr := json.Marshal(v)
		got, gerr := Value(nil, v)
		if (werr == nil) != (gerr == nil) || string(got) != string(want) {
			t.Errorf("Value(%#v) = %q, %v; json.Marshal: %q, %v", v, got, gerr, want, werr)
		}
	}
}

// FuzzValue: Value and json.Marshal agree on strings, JSON arguments and
// numbers.
func FuzzValue(f *testing.F) {
	f.Add("text", `{"a": 1}`, 1.5, int64(-3))
	f.Add("<é>\u2028", ` "x" `, 1e21, int64(0))
	f.Fuzz(func(t *testing.T, s, raw string, x float64, n int64) {
		patch := map[string]any{"$set": map[string]any{s: x, "n": n}, "$push": map[string]any{"v": json.RawMessage(raw)}, s: s}
		for _, v := range []any{s, json.RawMessage(raw), x, n, patch} {
			want, werr := json.Marshal(v)
			got, gerr := Value(nil, v)
			if (werr == nil) != (gerr == nil) || string(got) != string(want) {
				t.Fatalf("Value(%#v) = %q, %v; json.Marshal: %q, %v", v, got, gerr, want, werr)
			}
		}
	})
}
