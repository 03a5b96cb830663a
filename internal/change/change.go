// Package change owns the change operators of Design 1: it validates a
// client's update against a collection's schema, applies changes to a
// document, compacts a sequence of changes (into one store effect, or into
// a shorter sequence), makes a sequence idempotent for stores without
// transactions (the paper's Algorithm 2), and encodes changes for the
// buffered write. It does no I/O.
//
// A collection's schema is either a table's columns (SQL stores: a document
// is a row) or dynamic (document stores such as MongoDB: any field, any JSON
// value, nested paths). The operators and their MongoDB semantics are
// described on Op; values and numbers in value.go.
package change

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
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
//
// A patch of a table's row uses Set, Unset and Inc for whole columns, and
// JSON for operators inside JSON columns; a patch of a document collection's
// document uses Ops only. Within one client's patch no two paths overlap, so
// the order in which its parts apply does not matter; a patch made by
// CompactDoc may hold overlapping Ops, which apply in order.
type Change struct {
	Seq   int64                  // per-document order, assigned when buffered
	Kind  Kind                   // Put, Patch or Delete
	Doc   Doc                    // Put: the whole document (tables: every column present)
	Set   Doc                    // Patch (table): $set of whole columns
	Unset []string               // Patch (table): $unset of whole columns, which become null (sorted)
	Inc   map[string]json.Number // Patch (table): $inc of numeric columns
	// JSON holds, per JSON column, the operators on the column's value
	// (paths relative to it, "" for the value itself), in order. A NULL
	// column counts as a missing value.
	JSON map[string][]Op
	Ops  []Op // Patch (document collection): the operators, paths from the document's root, in order
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
	if s.dynamic {
		return parseDocPut(s, id, body)
	}
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

// parseDocPut is ParsePut for a document collection: any fields, any
// values; the key field, when given, must be the id.
func parseDocPut(s *Schema, id string, body []byte) (Change, error) {
	if !utf8.Valid(body) {
		return Change{}, invalid("the request body must be valid UTF-8")
	}
	var raw map[string]json.RawMessage
	if err := decodeObject(body, &raw); err != nil {
		return Change{}, err
	}
	doc := make(Doc, len(raw)+1)
	for name, v := range raw {
		if err := checkFieldName(name); err != nil {
			return Change{}, err
		}
		if name == s.reserved && name != "" {
			return Change{}, invalid("field %q is reserved for writeback's bookkeeping; rename it", name)
		}
		cv, err := canonicalValue(v)
		if err != nil {
			return Change{}, err
		}
		doc[name] = cv
	}
	key := s.KeyValue(id)
	if kv, ok := doc[s.Key]; ok && !bytes.Equal(kv, key) {
		return Change{}, invalid("field %q is %s but the id in the path is %s", s.Key, truncate(string(kv)), key)
	}
	doc[s.Key] = key
	return Change{Kind: Put, Doc: doc}, nil
}

// operators lists the update operators in the order ParsePatch reads them.
var operators = []Operator{OpAddToSet, OpInc, OpPull, OpPush, OpSet, OpUnset}

const useOperators = "use $set, $unset, $inc, $push, $addToSet or $pull"

// ParsePatch validates update operators against s: $set, $unset and $inc;
// $push, $addToSet and $pull on JSON columns (a table) or any field (a
// document collection). Paths may go inside JSON columns ("col.a.b") and
// documents ("a.b.0"); two paths of one patch must not overlap.
func ParsePatch(s *Schema, body []byte) (Change, error) {
	if s.dynamic && !utf8.Valid(body) {
		return Change{}, invalid("the request body must be valid UTF-8")
	}
	var ops map[string]json.RawMessage
	if err := decodeObject(body, &ops); err != nil {
		return Change{}, err
	}
	if len(ops) == 0 {
		return Change{}, invalid("the update has no operators; %s", useOperators)
	}
	for name := range ops {
		if !Operator(name).valid() {
			return Change{}, invalid("unknown operator %q: %s", truncate(name), useOperators)
		}
	}
	ch := Change{Kind: Patch}
	var paths []opPath
	for _, op := range operators {
		body, ok := ops[string(op)]
		if !ok {
			continue
		}
		var fields map[string]json.RawMessage
		if err := decodeObject(body, &fields); err != nil {
			return Change{}, invalid("the value of %s must be an object of fields", op)
		}
		if len(fields) == 0 {
			return Change{}, invalid("%s names no fields", op)
		}
		names := make([]string, 0, len(fields))
		for name := range fields {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			var err error
			if s.dynamic {
				err = parseDocField(s, &ch, op, name, fields[name])
			} else {
				err = parseColumnField(s, &ch, op, name, fields[name])
			}
			if err != nil {
				return Change{}, err
			}
			paths = append(paths, opPath{op: op, name: name, segs: segments(name)})
		}
	}
	if err := checkOverlaps(paths); err != nil {
		return Change{}, err
	}
	sort.Strings(ch.Unset)
	// MongoDB applies the fields of one update in path order; so do we.
	sortOps(ch.Ops)
	for _, ops := range ch.JSON {
		sortOps(ops)
	}
	return ch, nil
}

func sortOps(ops []Op) {
	sort.SliceStable(ops, func(i, j int) bool {
		return comparePaths(segments(ops[i].Path), segments(ops[j].Path)) < 0
	})
}

// opPath is one field of a patch, for the overlap check.
type opPath struct {
	op   Operator
	name string
	segs []string
}

// checkOverlaps refuses a patch in which one path equals or contains
// another (MongoDB: "would create a conflict"). In path order, a path that
// contains others comes right before them, so neighbors suffice.
func checkOverlaps(paths []opPath) error {
	sort.SliceStable(paths, func(i, j int) bool { return comparePaths(paths[i].segs, paths[j].segs) < 0 })
	for i := 1; i < len(paths); i++ {
		a, b := paths[i-1], paths[i]
		if !isPrefix(a.segs, b.segs) {
			continue
		}
		if len(a.segs) == len(b.segs) {
			first, second := a.op, b.op
			if second < first {
				first, second = second, first
			}
			return invalid("field %q appears in both %s and %s", truncate(a.name), first, second)
		}
		return invalid("fields %q (%s) and %q (%s) overlap; change them in separate requests", truncate(a.name), a.op, truncate(b.name), b.op)
	}
	return nil
}

// parseDocField adds one field of a document collection's patch.
func parseDocField(s *Schema, ch *Change, op Operator, name string, v json.RawMessage) error {
	if err := checkPath(name); err != nil {
		return err
	}
	segs := segments(name)
	if segs[0] == s.Key {
		return invalid("field %q is the key and cannot be changed", truncate(name))
	}
	if segs[0] == s.reserved && s.reserved != "" {
		return invalid("field %q is reserved for writeback's bookkeeping; rename it", s.reserved)
	}
	o, err := buildOp(op, name, v)
	if err != nil {
		return err
	}
	ch.Ops = append(ch.Ops, o)
	return nil
}

// parseColumnField adds one field of a table's patch: a whole column, or a
// path inside a JSON column.
func parseColumnField(s *Schema, ch *Change, op Operator, name string, v json.RawMessage) error {
	c, ok := s.Column(name)
	colName, rel, inside := name, "", false
	if !ok {
		colName, rel, inside = strings.Cut(name, ".")
		c, ok = s.Column(colName)
	}
	if !ok {
		return invalid("unknown field %q in %s: the collection has no such column", truncate(name), op)
	}
	if colName == s.Key {
		return invalid("field %q is the key and cannot be changed", truncate(name))
	}
	if inside {
		if c.Type != TypeJSON {
			return invalid("field %q goes inside column %q of type %s; only JSON columns have fields inside them", truncate(name), colName, c.Type)
		}
		if err := checkPathAs(rel, name); err != nil {
			return err
		}
		o, err := buildOp(op, rel, v)
		if err != nil {
			return err
		}
		addJSON(ch, colName, o)
		return nil
	}
	switch op {
	case OpSet:
		cv, err := Canonical(c, v)
		if err != nil {
			return err
		}
		if ch.Set == nil {
			ch.Set = Doc{}
		}
		ch.Set[name] = cv
	case OpUnset:
		if !c.Nullable {
			return invalid("field %q cannot be unset: the column is NOT NULL", name)
		}
		ch.Unset = append(ch.Unset, name)
	case OpInc:
		n, err := incAmount(c, v)
		if err != nil {
			return err
		}
		if ch.Inc == nil {
			ch.Inc = map[string]json.Number{}
		}
		ch.Inc[name] = n
	default: // $push, $addToSet, $pull
		if c.Type != TypeJSON {
			return invalid("%s needs a JSON column, but column %q has type %s", op, name, c.Type)
		}
		o, err := buildOp(op, "", v)
		if err != nil {
			return err
		}
		addJSON(ch, name, o)
	}
	return nil
}

func addJSON(ch *Change, col string, o Op) {
	if ch.JSON == nil {
		ch.JSON = map[string][]Op{}
	}
	ch.JSON[col] = append(ch.JSON[col], o)
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
		// Written as a double ("1.0", not "1"), so that Compact never folds
		// it with another amount as if both were integers: the store adds
		// float amounts one by one, rounding each time.
		return json.Number(formatDouble(f)), nil
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
