package change

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/writeback/writeback/internal/jsonscan"
)

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
	if m, ok := compactObject(body); ok {
		*dst = m
		return nil
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

// compactObject is decodeObject's answer for the shape json.Marshal
// writes — no whitespace, keys without escapes — read without
// encoding/json's decoder, the values slices of one copy of body; false
// for anything else (which the decoder then reads or refuses). As the
// decoder's, a key given twice keeps its last value.
func compactObject(body []byte) (map[string]json.RawMessage, bool) {
	// One copy for the values: the caller's buffer may be reused.
	return ownedObject(bytes.Clone(body))
}

// ownedObject is compactObject of a body the values may point into.
func ownedObject(body []byte) (map[string]json.RawMessage, bool) {
	if len(body) < 2 || body[0] != '{' {
		return nil, false
	}
	m := map[string]json.RawMessage{}
	i := 1
	if len(body) == 2 && body[1] == '}' {
		return m, true
	}
	for {
		end, escaped, ok := jsonscan.StringEnd(body, i)
		if !ok || escaped || end >= len(body) || body[end] != ':' || !utf8.Valid(body[i+1:end-1]) {
			return nil, false
		}
		key := string(body[i+1 : end-1])
		vend, ok := jsonscan.ValueEnd(body, end+1)
		if !ok || vend >= len(body) {
			return nil, false
		}
		m[key] = body[end+1 : vend : vend]
		switch body[vend] {
		case ',':
			i = vend + 1
		case '}':
			return m, vend+1 == len(body)
		default:
			return nil, false
		}
	}
}

func jsonMsg(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s at byte %d", se.Error(), se.Offset)
	}
	return err.Error()
}
