package tpcc

import (
	"bytes"
	"encoding/json"
	"maps"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/writeback/writeback/internal/jsonscan"
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
		if r, rest, ok := scanRow(raw, 0); ok && len(rest) == 0 {
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
		size := 0 // the previous row's columns: an array's rows are alike
		if len(rows) > 0 {
			size = len(rows[len(rows)-1])
		}
		r, rest, ok := scanRow(b, size)
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

// scanRow scans a flat object, of about size columns, at the start of b
// and returns the rest.
func scanRow(b []byte, size int) (Row, []byte, bool) {
	if len(b) < 2 || b[0] != '{' {
		return nil, nil, false
	}
	r := make(Row, size)
	b = b[1:]
	if b[0] == '}' {
		return r, b[1:], true
	}
	for {
		key, rest, ok := scanName(b)
		if !ok || len(rest) == 0 || rest[0] != ':' {
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

// names holds the column names scanned so far, so that every row's keys
// are the same strings rather than new ones each: read without a lock,
// replaced whole (rarely: the schema's columns are few) to add one.
var names struct {
	sync.Mutex // serializes the replacements
	m          atomic.Pointer[map[string]string]
}

// maxNames bounds names, whatever keys the entries hold.
const maxNames = 1024

// scanName is scanString for a column name, valid UTF-8, returned as the
// string names holds.
func scanName(b []byte) (string, []byte, bool) {
	end, ok := stringEnd(b)
	if !ok {
		return "", nil, false
	}
	raw := b[1 : end-1]
	if m := names.m.Load(); m != nil {
		if s, ok := (*m)[string(raw)]; ok {
			return s, b[end:], true
		}
	}
	if !utf8.Valid(raw) {
		return "", nil, false
	}
	s := string(raw)
	names.Lock()
	defer names.Unlock()
	var old map[string]string
	if p := names.m.Load(); p != nil {
		old = *p
	}
	if len(old) < maxNames {
		m := make(map[string]string, len(old)+1)
		maps.Copy(m, old)
		m[s] = s
		names.m.Store(&m)
	}
	return s, b[end:], true
}

// stringEnd returns the end of the string without escapes or control
// characters at the start of b (just past its closing quote).
func stringEnd(b []byte) (int, bool) {
	end, escaped, ok := jsonscan.StringEnd(b, 0)
	return end, ok && !escaped
}

// scanString scans a string without escapes or control characters.
func scanString(b []byte) (string, []byte, bool) {
	end, ok := stringEnd(b)
	if !ok {
		return "", nil, false
	}
	return string(b[1 : end-1]), b[end:], true
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
	n := jsonscan.NumberLen(b)
	if n == 0 {
		return nil, nil, false
	}
	return json.Number(b[:n]), b[n:], true
}
