// Package jsonenc appends the JSON encoding/json writes for the values a
// commit carries most — strings, numbers, booleans, compact JSON — without
// its reflection; every other value, and raw JSON that needs compacting or
// escaping, goes through encoding/json, so that the bytes are always
// json.Marshal's (strings are escaped here, as encoding/json escapes them).
package jsonenc

import (
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"
)

// String appends s as json.Marshal encodes it: with ", \, control
// characters, <, > and & escaped, invalid UTF-8 replaced by U+FFFD, and
// U+2028 and U+2029 escaped (encoding/json's appendString, HTML-safe).
func String(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if htmlSafe(c) {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default: // other control characters, <, > and &
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(append(b, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

const hex = "0123456789abcdef"

// htmlSafe reports whether json.Marshal copies the ASCII byte c, in a
// string, as it is: it is none of the control characters, ", \, <, >
// and &.
func htmlSafe(c byte) bool {
	return c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
}

// Raw appends raw as json.Marshal encodes a json.RawMessage: compacted,
// with <, > and & escaped, refused when it is not JSON; nil is null. Raw
// JSON that is compact and printable ASCII with none of <, > and & (in
// strings, spaces and escapes are fine) is copied after json.Valid;
// anything else goes through json.Marshal.
func Raw(b []byte, raw json.RawMessage) ([]byte, error) {
	if raw == nil {
		return append(b, "null"...), nil
	}
	if len(raw) == 0 || !plainRaw(raw) || !json.Valid(raw) {
		q, err := json.Marshal(raw)
		if err != nil {
			return nil, err
		}
		return append(b, q...), nil
	}
	return append(b, raw...), nil
}

// plainRaw reports whether json.Marshal would copy raw, if it is valid
// JSON, as it is: no whitespace outside its strings and, anywhere, only
// printable ASCII other than <, > and &.
func plainRaw(raw []byte) bool {
	in := false // in a string
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c < 0x20 || c >= 0x7f || c == '<' || c == '>' || c == '&':
			return false
		case !in && c == ' ':
			return false
		case c == '"':
			in = !in
		case in && c == '\\':
			i++ // the escaped byte (validity is json.Valid's to check)
			if i < len(raw) && (raw[i] < 0x20 || raw[i] >= 0x7f) {
				return false
			}
		}
	}
	return true
}

// Value appends v as json.Marshal(v) encodes it.
func Value(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case string:
		return String(b, x), nil
	case bool:
		return strconv.AppendBool(b, x), nil
	case int:
		return strconv.AppendInt(b, int64(x), 10), nil
	case int64:
		return strconv.AppendInt(b, x, 10), nil
	case int32:
		return strconv.AppendInt(b, int64(x), 10), nil
	case uint64:
		return strconv.AppendUint(b, x, 10), nil
	case float64:
		// encoding/json's own choice: 'f' in this range, 'e' (cleaned
		// up) outside it, an error for NaN and ±Inf.
		if a := math.Abs(x); a == 0 || a >= 1e-6 && a < 1e21 {
			return strconv.AppendFloat(b, x, 'f', -1, 64), nil
		}
	case json.RawMessage:
		return Raw(b, x)
	case map[string]any: // a patch's operators
		if x == nil {
			return append(b, "null"...), nil
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(String(b, k), ':')
			var err error
			if b, err = Value(b, x[k]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	}
	q, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, q...), nil
}

// Array appends a JSON array of n items, item appending the i-th.
func Array(b []byte, n int, item func(b []byte, i int) ([]byte, error)) ([]byte, error) {
	b = append(b, '[')
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = item(b, i); err != nil {
			return nil, err
		}
	}
	return append(b, ']'), nil
}
