package resp

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/tidwall/redcon"

	"github.com/writeback/writeback/internal/change"
)

// Values on the wire are Redis strings; in the cache and the store they are
// canonical JSON (change.Canonical). Per column type:
//
//	text, varchar, enum, other   the string itself            ↔ JSON string
//	integer                      decimal digits               ↔ JSON integer
//	float                        the JSON number's text       ↔ JSON number
//	decimal                      the number as the store prints it
//	boolean                      "1" / "0" (in: also true/false) ↔ true / false
//	json                         the compact JSON text        ↔ the JSON value
//
// A null column is an absent field. Binary values are not storable in text
// columns: a value must be valid UTF-8.

// appendWire appends to b, as a bulk string, the Redis string form of a
// column's canonical JSON value, and reports false (appending nothing) when
// the value is null. scratch is a buffer for unescaping strings, returned
// (grown) for reuse.
func appendWire(b []byte, t change.Type, v string, scratch []byte) ([]byte, []byte, bool) {
	if v == "" || v == "null" {
		return b, scratch, false
	}
	switch t {
	case change.TypeText, change.TypeOther:
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			inner := v[1 : len(v)-1]
			if strings.IndexByte(inner, '\\') < 0 {
				return redcon.AppendBulkString(b, inner), scratch, true
			}
			if u, ok := unquote(scratch[:0], inner); ok {
				return redcon.AppendBulk(b, u), u, true
			}
		}
		var s string
		if json.Unmarshal([]byte(v), &s) != nil {
			s = v // not a JSON string: never written by us; show it as is
		}
		return redcon.AppendBulkString(b, s), scratch, true
	case change.TypeBool:
		switch v {
		case "true":
			return redcon.AppendBulkString(b, "1"), scratch, true
		case "false":
			return redcon.AppendBulkString(b, "0"), scratch, true
		}
	}
	return redcon.AppendBulkString(b, v), scratch, true
}

// unquote appends the JSON string body s (without its quotes), unescaped,
// to dst. The cache holds what encoding/json wrote, so the bytes between
// escapes are copied as they are; it reports false for escapes
// encoding/json would reject or read differently (unknown escapes, lone
// surrogates), which the caller leaves to encoding/json.
func unquote(dst []byte, s string) ([]byte, bool) {
	// Unescaping only shrinks: write into len(s) bytes past dst's end.
	at := len(dst)
	dst = slices.Grow(dst, len(s))[:at+len(s)]
	out := dst[at:]
	n := 0
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			k := strings.IndexByte(s[i:], '\\')
			if k < 0 {
				k = len(s) - i
			}
			n += copy(out[n:], s[i:i+k])
			i += k
			continue
		}
		if i+1 >= len(s) {
			return dst[:at], false
		}
		switch s[i+1] {
		case '"', '\\', '/':
			out[n] = s[i+1]
		case 'b':
			out[n] = '\b'
		case 'f':
			out[n] = '\f'
		case 'n':
			out[n] = '\n'
		case 'r':
			out[n] = '\r'
		case 't':
			out[n] = '\t'
		case 'u':
			r, ok := hex4(s[i+2:])
			if !ok {
				return dst[:at], false
			}
			i += 6
			if r < utf8.RuneSelf {
				out[n] = byte(r) // encoding/json's \u003c for '<' and the like
				n++
				continue
			}
			if utf16.IsSurrogate(r) {
				if len(s) < i+6 || s[i] != '\\' || s[i+1] != 'u' {
					return dst[:at], false
				}
				r2, ok := hex4(s[i+2:])
				if r = utf16.DecodeRune(r, r2); !ok || r == utf8.RuneError {
					return dst[:at], false
				}
				i += 6
			}
			// \uXXXX is 6 bytes, its UTF-8 encoding at most 4.
			n += utf8.EncodeRune(out[n:], r)
			continue
		default:
			return dst[:at], false
		}
		n++
		i += 2
	}
	return dst[:at+n], true
}

func hex4(s string) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for i := range 4 {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// canonicalOf converts a Redis string written to column c into the column's
// canonical JSON value, or explains in a Redis-style error why it cannot.
func canonicalOf(c change.Column, s []byte) (json.RawMessage, *respError) {
	switch c.Type {
	case change.TypeText, change.TypeOther:
		if !utf8.Valid(s) {
			return nil, errf(400, "ERR value for field %q is not valid UTF-8 (%s column)", c.Name, c.Type)
		}
		b, _ := json.Marshal(string(s))
		return b, nil
	case change.TypeInt:
		n, ok := parseInt(s)
		if !ok {
			return nil, errf(400, "ERR value for field %q is not an integer or out of range", c.Name)
		}
		return strconv.AppendInt(nil, n, 10), nil
	case change.TypeFloat:
		f, ok := parseFloat(s)
		if !ok {
			return nil, errf(400, "ERR value for field %q is not a valid float", c.Name)
		}
		return floatJSON(f), nil
	case change.TypeBool:
		switch strings.ToLower(string(s)) {
		case "1", "true":
			return json.RawMessage("true"), nil
		case "0", "false":
			return json.RawMessage("false"), nil
		}
		return nil, errf(400, "ERR value for field %q is not a boolean: use 1, 0, true or false", c.Name)
	case change.TypeDecimal:
		if _, ok := parseFloat(s); !ok || !json.Valid(s) {
			return nil, errf(400, "ERR value for field %q is not a number (decimal column)", c.Name)
		}
	case change.TypeJSON:
		if !json.Valid(s) {
			return nil, errf(400, "ERR value for field %q is not valid JSON (json column)", c.Name)
		}
	}
	v, err := change.Canonical(c, s)
	if err != nil {
		return nil, errf(400, "ERR %s", err.Error())
	}
	return v, nil
}

// parseInt parses a Redis integer argument: an optional '-' and decimal
// digits, nothing else, within int64.
func parseInt(s []byte) (int64, bool) {
	if len(s) == 0 || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(s), 10, 64)
	return n, err == nil
}

// parseFloat parses a Redis float argument: decimal notation with an
// optional exponent; not hexadecimal, infinite or NaN.
func parseFloat(s []byte) (float64, bool) {
	if len(s) == 0 || len(s) > 5120 { // Redis's MAX_LONG_DOUBLE_CHARS
		return 0, false
	}
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E') {
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(string(s), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

// floatJSON is the canonical JSON of a float column's value (what
// change.Canonical produces).
func floatJSON(f float64) json.RawMessage {
	b, _ := json.Marshal(f)
	return b
}
