// Package jsonenc appends the JSON encoding/json writes for the values a
// commit carries most — strings, numbers, booleans, compact JSON — without
// its reflection; every other value, and every string or argument that
// needs escaping or compacting, goes through encoding/json, so that the
// bytes are always json.Marshal's.
package jsonenc

import (
	"encoding/json"
	"math"
	"sort"
	"strconv"
)

// String appends s as json.Marshal encodes it.
func String(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !plain(s[i]) {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// plain reports whether json.Marshal copies c, in a string, as it is: it
// is printable ASCII and none of " \ < > &. (Some others are copied too;
// those go the slow way.)
func plain(c byte) bool {
	return c >= 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
}

// Raw appends raw as json.Marshal encodes a json.RawMessage: compacted,
// with <, > and & escaped, refused when it is not JSON; nil is null.
func Raw(b []byte, raw json.RawMessage) ([]byte, error) {
	if raw == nil {
		return append(b, "null"...), nil
	}
	for _, c := range raw {
		if c == ' ' || !plain(c) && c != '"' && c != '\\' { // a space to drop, or a byte to escape
			q, err := json.Marshal(raw)
			if err != nil {
				return nil, err
			}
			return append(b, q...), nil
		}
	}
	if len(raw) == 0 || !json.Valid(raw) {
		_, err := json.Marshal(raw) // its error
		return nil, err
	}
	return append(b, raw...), nil
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
