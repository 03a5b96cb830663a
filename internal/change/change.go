// Package change owns the change operators of Design 1: it validates a
// client's update against a collection's schema, applies changes to a
// document, compacts a sequence of changes into one store effect, and encodes
// changes for the buffered write. It does no I/O.
package change

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"
)

// Kind is what a change does to its document.
type Kind byte

const (
	// Put inserts or replaces the whole document.
	Put Kind = 'P'
	// Patch applies update operators to an existing document.
	Patch Kind = 'U'
	// Delete removes the document.
	Delete Kind = 'D'
)

func (k Kind) String() string {
	switch k {
	case Put:
		return "put"
	case Patch:
		return "patch"
	case Delete:
		return "delete"
	}
	return fmt.Sprintf("kind(%d)", byte(k))
}

// Type is the category of a column's type, which decides how its values are
// encoded in JSON and which operators apply to it.
type Type uint8

const (
	TypeText    Type = iota // JSON string
	TypeInt                 // JSON integer (int64)
	TypeFloat               // JSON number (float64)
	TypeDecimal             // JSON number, kept as written
	TypeBool                // JSON true/false
	TypeJSON                // any JSON value
	TypeOther               // JSON string in the store's text form (dates, uuids, ...)
)

func (t Type) String() string {
	switch t {
	case TypeText:
		return "text"
	case TypeInt:
		return "integer"
	case TypeFloat:
		return "float"
	case TypeDecimal:
		return "decimal"
	case TypeBool:
		return "boolean"
	case TypeJSON:
		return "json"
	}
	return "other"
}

// Column is one field of a collection's documents.
type Column struct {
	Name     string
	Type     Type
	Nullable bool
}

// Schema describes the documents of one collection: its columns and which of
// them is the key.
type Schema struct {
	Key     string
	Columns []Column // in the table's order; includes the key
	index   map[string]int
}

// NewSchema builds a schema; the key must be one of the columns and be an
// integer or text column.
func NewSchema(key string, cols []Column) (*Schema, error) {
	s := &Schema{Key: key, Columns: cols, index: make(map[string]int, len(cols))}
	for i, c := range cols {
		s.index[c.Name] = i
	}
	kc, ok := s.Column(key)
	if !ok {
		return nil, fmt.Errorf("change: key column %q is not a column of the table", key)
	}
	if kc.Type != TypeInt && kc.Type != TypeText {
		return nil, fmt.Errorf("change: key column %q must be an integer or text column, not %s", key, kc.Type)
	}
	return s, nil
}

// Column returns the column called name.
func (s *Schema) Column(name string) (Column, bool) {
	i, ok := s.index[name]
	if !ok {
		return Column{}, false
	}
	return s.Columns[i], true
}

// KeyType is the type of the key column.
func (s *Schema) KeyType() Type {
	c, _ := s.Column(s.Key)
	return c.Type
}

// Doc is a document: field name to its canonical JSON value. A nil Doc means
// the document does not exist.
type Doc map[string]json.RawMessage

// Clone returns a copy of d that shares no map with it.
func (d Doc) Clone() Doc {
	if d == nil {
		return nil
	}
	c := make(Doc, len(d))
	for k, v := range d {
		c[k] = v
	}
	return c
}

// Change is one write to one document.
type Change struct {
	Seq   int64                  // per-document order, assigned when buffered
	Kind  Kind                   // Put, Patch or Delete
	Doc   Doc                    // Put: the whole document, every column present
	Set   Doc                    // Patch: $set
	Unset []string               // Patch: $unset (sorted)
	Inc   map[string]json.Number // Patch: $inc
}

// Error is a client's mistake: the request is rejected with a 400 and this
// one-sentence message.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func invalid(format string, args ...any) error { return &Error{Msg: fmt.Sprintf(format, args...)} }

// ErrNotFound is returned by Apply when a patch meets a missing document.
var ErrNotFound = errors.New("change: document not found")

var null = json.RawMessage("null")

// MaxIDLen is the longest document id accepted, in bytes.
const MaxIDLen = 512

// CanonicalID validates a document id against the key column's type and
// returns its canonical form (integers without sign or leading zeros noise).
func (s *Schema) CanonicalID(id string) (string, error) {
	switch s.KeyType() {
	case TypeInt:
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			return "", invalid("invalid id %q: the key %q is an integer column", truncate(id), s.Key)
		}
		return strconv.FormatInt(n, 10), nil
	default:
		if id == "" || len(id) > MaxIDLen {
			return "", invalid("invalid id: it must be 1 to %d bytes long", MaxIDLen)
		}
		if !utf8.ValidString(id) {
			return "", invalid("invalid id: it must be valid UTF-8")
		}
		for _, r := range id {
			if r < 0x20 || r == 0x7f {
				return "", invalid("invalid id: it must not contain control characters")
			}
		}
		return id, nil
	}
}

// KeyValue is the canonical JSON value of the key field for a canonical id.
func (s *Schema) KeyValue(id string) json.RawMessage {
	if s.KeyType() == TypeInt {
		return json.RawMessage(id)
	}
	b, _ := json.Marshal(id)
	return b
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// Canonical validates v as a value of column c and returns its canonical JSON.
func Canonical(c Column, v json.RawMessage) (json.RawMessage, error) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return nil, invalid("field %q has no value", c.Name)
	}
	if string(v) == "null" {
		if !c.Nullable {
			return nil, invalid("field %q cannot be null: the column is NOT NULL", c.Name)
		}
		return null, nil
	}
	switch c.Type {
	case TypeText, TypeOther:
		var s string
		if v[0] != '"' || json.Unmarshal(v, &s) != nil {
			return nil, invalid("field %q must be a string (%s column)", c.Name, c.Type)
		}
		if !utf8.ValidString(s) {
			return nil, invalid("field %q must be valid UTF-8", c.Name)
		}
		b, _ := json.Marshal(s)
		return b, nil
	case TypeInt:
		n, ok := parseInt(v)
		if !ok {
			return nil, invalid("field %q must be an integer (integer column)", c.Name)
		}
		return json.RawMessage(strconv.FormatInt(n, 10)), nil
	case TypeFloat:
		f, ok := parseFloat(v)
		if !ok {
			return nil, invalid("field %q must be a number (float column)", c.Name)
		}
		return formatFloat(f), nil
	case TypeDecimal:
		if _, ok := parseFloat(v); !ok {
			return nil, invalid("field %q must be a number (decimal column)", c.Name)
		}
		return append(json.RawMessage(nil), v...), nil
	case TypeBool:
		if string(v) != "true" && string(v) != "false" {
			return nil, invalid("field %q must be true or false (boolean column)", c.Name)
		}
		return append(json.RawMessage(nil), v...), nil
	case TypeJSON:
		if !json.Valid(v) {
			return nil, invalid("field %q is not valid JSON", c.Name)
		}
		var buf bytes.Buffer
		_ = json.Compact(&buf, v)
		return buf.Bytes(), nil
	}
	return nil, invalid("field %q has an unsupported type", c.Name)
}

func parseInt(v json.RawMessage) (int64, bool) {
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	return n, err == nil
}

func parseFloat(v json.RawMessage) (float64, bool) {
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return 0, false
	}
	if !json.Valid(v) {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

func formatFloat(f float64) json.RawMessage {
	b, _ := json.Marshal(f)
	return b
}

// ParsePut validates a whole document for a Put of id (already canonical).
// Every column must be present or nullable; the key field, when given, must
// equal id.
func ParsePut(s *Schema, id string, body []byte) (Change, error) {
	var raw map[string]json.RawMessage
	if err := decodeObject(body, &raw); err != nil {
		return Change{}, err
	}
	doc := make(Doc, len(s.Columns))
	for name, v := range raw {
		c, ok := s.Column(name)
		if !ok {
			return Change{}, invalid("unknown field %q: the collection has no such column", truncate(name))
		}
		cv, err := Canonical(c, v)
		if err != nil {
			return Change{}, err
		}
		doc[name] = cv
	}
	key := s.KeyValue(id)
	if kv, ok := doc[s.Key]; ok && !bytes.Equal(kv, key) {
		return Change{}, invalid("field %q is %s but the id in the path is %s", s.Key, kv, key)
	}
	doc[s.Key] = key
	for _, c := range s.Columns {
		if _, ok := doc[c.Name]; ok {
			continue
		}
		if !c.Nullable {
			return Change{}, invalid("field %q is required: the column is NOT NULL", c.Name)
		}
		doc[c.Name] = null
	}
	return Change{Kind: Put, Doc: doc}, nil
}

// ParsePatch validates update operators ($set, $unset, $inc) against s.
func ParsePatch(s *Schema, body []byte) (Change, error) {
	var ops map[string]json.RawMessage
	if err := decodeObject(body, &ops); err != nil {
		return Change{}, err
	}
	if len(ops) == 0 {
		return Change{}, invalid("the update has no operators; use $set, $unset or $inc")
	}
	ch := Change{Kind: Patch}
	seen := map[string]string{}
	names := make([]string, 0, len(ops))
	for op := range ops {
		names = append(names, op)
	}
	sort.Strings(names)
	for _, op := range names {
		var fields map[string]json.RawMessage
		switch op {
		case "$set", "$unset", "$inc":
		case "$push", "$addToSet", "$pull":
			return Change{}, invalid("operator %s needs a JSON column; this collection has none it applies to", op)
		default:
			return Change{}, invalid("unknown operator %q: use $set, $unset or $inc", truncate(op))
		}
		if err := decodeObject(ops[op], &fields); err != nil {
			return Change{}, invalid("the value of %s must be an object of fields", op)
		}
		if len(fields) == 0 {
			return Change{}, invalid("%s names no fields", op)
		}
		for name, v := range fields {
			c, ok := s.Column(name)
			if !ok {
				return Change{}, invalid("unknown field %q in %s: the collection has no such column", truncate(name), op)
			}
			if name == s.Key {
				return Change{}, invalid("field %q is the key and cannot be changed", name)
			}
			if prev, dup := seen[name]; dup {
				return Change{}, invalid("field %q appears in both %s and %s", name, prev, op)
			}
			seen[name] = op
			switch op {
			case "$set":
				cv, err := Canonical(c, v)
				if err != nil {
					return Change{}, err
				}
				if ch.Set == nil {
					ch.Set = Doc{}
				}
				ch.Set[name] = cv
			case "$unset":
				if !c.Nullable {
					return Change{}, invalid("field %q cannot be unset: the column is NOT NULL", name)
				}
				ch.Unset = append(ch.Unset, name)
			case "$inc":
				n, err := incAmount(c, v)
				if err != nil {
					return Change{}, err
				}
				if ch.Inc == nil {
					ch.Inc = map[string]json.Number{}
				}
				ch.Inc[name] = n
			}
		}
	}
	sort.Strings(ch.Unset)
	return ch, nil
}

func incAmount(c Column, v json.RawMessage) (json.Number, error) {
	v = bytes.TrimSpace(v)
	switch c.Type {
	case TypeInt:
		n, ok := parseInt(v)
		if !ok {
			if _, isNum := parseFloat(v); isNum {
				return "", invalid("$inc of %q must be an integer: the column is an integer column", c.Name)
			}
			return "", invalid("$inc of %q must be a number, not %s", c.Name, describe(v))
		}
		return json.Number(strconv.FormatInt(n, 10)), nil
	case TypeFloat:
		f, ok := parseFloat(v)
		if !ok {
			return "", invalid("$inc of %q must be a number, not %s", c.Name, describe(v))
		}
		return json.Number(formatFloat(f)), nil
	}
	return "", invalid("$inc needs a numeric column, but %q is a %s column", c.Name, c.Type)
}

func describe(v json.RawMessage) string {
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a value of another type"
}

// decodeObject decodes a JSON object, rejecting anything else (including
// duplicate-free trailing data).
func decodeObject(body []byte, dst *map[string]json.RawMessage) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return invalid("the request body is empty; send a JSON object")
	}
	if body[0] != '{' {
		return invalid("the request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(dst); err != nil {
		return invalid("malformed JSON: %s", jsonMsg(err))
	}
	if dec.More() {
		return invalid("malformed JSON: unexpected data after the object")
	}
	if _, err := dec.Token(); err == nil {
		return invalid("malformed JSON: unexpected data after the object")
	}
	return nil
}

func jsonMsg(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s at byte %d", se.Error(), se.Offset)
	}
	return err.Error()
}
