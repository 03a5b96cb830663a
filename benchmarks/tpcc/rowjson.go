package tpcc

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// The sidecar's entries are compact JSON objects of one row's columns (or
// arrays of them), whose values are strings, numbers and nulls: what
// sqlmap writes from a store's rows. The terminals read them as
// encoding/json with UseNumber does — a string, a json.Number, nil, a bool
// — but with a scan of that shape only: encoding/json's reflection, per
// column of every row, was the largest cost of the terminals'
// (FuzzDecodeRows holds the two to the same answers). Anything else (an
// escape, a nested value, spaces) goes to encoding/json.

// decodeJSON decodes raw into v, a *Row or a *[]Row.
func decodeJSON(raw []byte, v any) error {
	switch into := v.(type) {
	case *Row:
		if r, rest, ok := scanRow(raw); ok && len(rest) == 0 {
			*into = r
			return nil
		}
	case *[]Row:
		if rows, ok := scanRows(raw); ok {
			*into = rows
			return nil
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}

// scanRows scans an array of flat objects.
func scanRows(b []byte) ([]Row, bool) {
	if len(b) < 2 || b[0] != '[' {
		return nil, false
	}
	rows := []Row{}
	b = b[1:]
	if b[0] == ']' {
		return rows, len(b) == 1
	}
	for {
		r, rest, ok := scanRow(b)
		if !ok || len(rest) == 0 {
			return nil, false
		}
		rows = append(rows, r)
		switch rest[0] {
		case ',':
			b = rest[1:]
		case ']':
			return rows, len(rest) == 1
		default:
			return nil, false
		}
	}
}

// scanRow scans a flat object at the start of b and returns the rest.
func scanRow(b []byte) (Row, []byte, bool) {
	if len(b) < 2 || b[0] != '{' {
		return nil, nil, false
	}
	r := Row{}
	b = b[1:]
	if b[0] == '}' {
		return r, b[1:], true
	}
	for {
		key, rest, ok := scanString(b)
		if !ok || !utf8.ValidString(key) || len(rest) == 0 || rest[0] != ':' {
			return nil, nil, false
		}
		var v any
		if v, b, ok = scanValue(rest[1:]); !ok || len(b) == 0 {
			return nil, nil, false
		}
		r[key] = v
		switch b[0] {
		case ',':
			b = b[1:]
		case '}':
			return r, b[1:], true
		default:
			return nil, nil, false
		}
	}
}

// scanString scans a string without escapes or control characters.
func scanString(b []byte) (string, []byte, bool) {
	if len(b) == 0 || b[0] != '"' {
		return "", nil, false
	}
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return string(b[1:i]), b[i+1:], true
		case c == '\\' || c < 0x20:
			return "", nil, false
		}
	}
	return "", nil, false
}

// scanValue scans a string (without escapes), a number, null, true or
// false.
func scanValue(b []byte) (any, []byte, bool) {
	if len(b) == 0 {
		return nil, nil, false
	}
	switch b[0] {
	case '"':
		// encoding/json replaces invalid UTF-8, which a plain copy keeps.
		s, rest, ok := scanString(b)
		if !ok || !utf8.ValidString(s) {
			return nil, nil, false
		}
		return s, rest, true
	case 'n':
		return nil, b[min(4, len(b)):], bytes.HasPrefix(b, []byte("null"))
	case 't':
		return true, b[min(4, len(b)):], bytes.HasPrefix(b, []byte("true"))
	case 'f':
		return false, b[min(5, len(b)):], bytes.HasPrefix(b, []byte("false"))
	}
	n := numberLen(b)
	if n == 0 {
		return nil, nil, false
	}
	return json.Number(b[:n]), b[n:], true
}

// numberLen is the length of the JSON number at the start of b (0: none):
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func numberLen(b []byte) int {
	i := 0
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		return 0
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return 0
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return 0
		}
	}
	return i
}
