package change

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// Type is the category of a column's type, which decides how its values are
// encoded in JSON and which operators apply to it.
type Type uint8

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
	dynamic bool
	// reserved is a top-level field of a document collection that the
	// store keeps for itself (MongoDB: the applied seq stamp); clients can
	// neither write nor change it.
	reserved string
}

// Reserve makes the top-level field name of a document collection the
// store's own: a Put or Patch that names it is refused.
func (s *Schema) Reserve(name string) { s.reserved = name }

// Reserved is the field Reserve set ("" when none).
func (s *Schema) Reserved() string { return s.reserved }

// NewDynamicSchema builds the schema of a document collection (MongoDB): the
// key field (MongoDB: "_id") holds the document's id as a string, and any
// other field may hold any JSON value. Field names must not be empty, start
// with '$', contain '.' or NUL, at any depth; update operators take dotted
// paths ("a.b.0"). Its only column is the key.
func NewDynamicSchema(key string) (*Schema, error) {
	if err := checkFieldName(key); err != nil {
		return nil, fmt.Errorf("change: key field: %s", err.Error())
	}
	s, err := NewSchema(key, []Column{{Name: key, Type: TypeText}})
	if err != nil {
		return nil, err
	}
	s.dynamic = true
	return s, nil
}

// Dynamic reports whether s is a document collection's schema (see
// NewDynamicSchema) rather than a table's columns.
func (s *Schema) Dynamic() bool { return s.dynamic }

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
