package change

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Values inside documents (the fields of a dynamic schema's documents, the
// contents of JSON columns) are JSON with MongoDB's data model:
//
//   - Numbers have two kinds. A literal without '.', 'e' or 'E' that fits
//     an int64 is an integer (BSON int32 or int64, whichever fits); any other
//     number is a double (float64). The canonical form of a double always has
//     a '.' or an exponent ("2.0", "1e+21"), so the kind survives a round trip
//     through JSON, and the canonical form of an integer is its decimal digits.
//     $inc follows MongoDB: integer + integer is an integer (overflowing int64
//     is an error); anything with a double is a double. Infinity and NaN cannot
//     be written in JSON: a result that is not finite is an error.
//   - Equality (for $addToSet and $pull) is MongoDB's: numbers compare by
//     value across kinds (1 == 1.0), strings bytewise, arrays element by
//     element, objects field by field in order (field order matters: {a,b} and
//     {b,a} differ, as in MongoDB). Inside a table's JSON column objects are
//     equal regardless of field order, as PostgreSQL's jsonb (which does not
//     keep the order) and MariaDB's JSON functions see them.
//   - Object field order is kept: a new field is appended, an updated one stays
//     where it is. (The top level of a Doc is a map, so only nested order is
//     kept; a store writes top-level fields in an order of its own.)

// maxDepth bounds the nesting of values, as MongoDB does (100 levels).
const maxDepth = 100

// maxPadding is the most nulls a $set of an array index may append (MongoDB:
// "can't backfill more than 1500000 elements"). A variable so that the fuzz
// test can keep documents small.
var maxPadding = 1500000

// node is a parsed JSON value that keeps the order of object fields.
type node struct {
	kind  byte            // kindObject, kindArray or kindScalar
	keys  []string        // object: field names, in order
	elems []*node         // object: values, parallel to keys; array: elements
	raw   json.RawMessage // scalar: canonical JSON
}

const (
	kindScalar byte = iota
	kindObject
	kindArray
)

// nullNode is JSON null; scalar nodes are never modified, so it is shared.
var nullNode = &node{raw: json.RawMessage("null")}

func (n *node) isNumber() bool { return n.kind == kindScalar && isNumberLit(n.raw) }

func isNumberLit(b []byte) bool { return len(b) > 0 && (b[0] == '-' || (b[0] >= '0' && b[0] <= '9')) }

// field returns the index of the object field called name, or -1.
func (n *node) field(name string) int {
	for i, k := range n.keys {
		if k == name {
			return i
		}
	}
	return -1
}

// describe names the type of n for messages: "a string", "an array", ….
func (n *node) describe() string {
	switch n.kind {
	case kindObject:
		return "an object"
	case kindArray:
		return "an array"
	}
	if n.isNumber() {
		return "a number"
	}
	return describe(n.raw)
}

// encode returns the compact JSON of n.
func (n *node) encode() json.RawMessage {
	var b []byte
	return n.appendTo(b)
}

func (n *node) appendTo(b []byte) []byte {
	switch n.kind {
	case kindObject:
		b = append(b, '{')
		for i, k := range n.keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = n.elems[i].appendTo(b)
		}
		return append(b, '}')
	case kindArray:
		b = append(b, '[')
		for i, e := range n.elems {
			if i > 0 {
				b = append(b, ',')
			}
			b = e.appendTo(b)
		}
		return append(b, ']')
	}
	return append(b, n.raw...)
}

func appendString(b []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(b, q...)
}

// parseMode says how strictly parseValue checks a value.
type parseMode uint8

const (
	// trusted: canonical JSON written by this package, or a JSON column's
	// current value. Only well-formedness is checked; literals are kept.
	trusted parseMode = iota
	// client: a value sent by a client for a document field or an
	// operator. Field names must be valid, duplicates and non-finite numbers
	// are refused, depth is bounded, and numbers and strings are
	// canonicalized.
	client
)

// parseValue parses one JSON value. (A hand-written parser: the
// json.Decoder token API costs an allocation per token, and documents with
// large arrays are parsed on every Apply.)
func parseValue(v []byte, mode parseMode) (*node, error) {
	if !json.Valid(v) {
		var x json.RawMessage
		err := json.Unmarshal(v, &x)
		if err == nil {
			err = errors.New("invalid JSON")
		}
		return nil, invalid("malformed JSON: %s", jsonMsg(err))
	}
	p := parser{b: v, mode: mode}
	p.space()
	n, err := p.value(0)
	if err != nil {
		return nil, err
	}
	return n, nil
}

// parser reads JSON that json.Valid accepted.
type parser struct {
	b    []byte
	i    int
	mode parseMode
}

func (p *parser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) (*node, error) {
	switch c := p.b[p.i]; {
	case c == '{' || c == '[':
		if p.mode == client && depth >= maxDepth {
			return nil, invalid("the value is nested more than %d levels deep", maxDepth)
		}
		p.i++
		if c == '[' {
			n := &node{kind: kindArray, elems: []*node{}}
			for p.space(); p.b[p.i] != ']'; p.space() {
				child, err := p.value(depth + 1)
				if err != nil {
					return nil, err
				}
				n.elems = append(n.elems, child)
				if p.space(); p.b[p.i] == ',' {
					p.i++
					p.space()
				}
			}
			p.i++
			return n, nil
		}
		n := &node{kind: kindObject, keys: []string{}, elems: []*node{}}
		var seen map[string]bool // for the duplicate check of large objects
		for p.space(); p.b[p.i] != '}'; p.space() {
			raw := p.str()
			k := decodeString(raw)
			if p.mode == client {
				if err := checkFieldName(k); err != nil {
					return nil, err
				}
				dup := false
				switch {
				case seen != nil:
					dup = seen[k]
				case len(n.keys) < 16:
					dup = n.field(k) >= 0
				default:
					seen = make(map[string]bool, 2*len(n.keys))
					for _, x := range n.keys {
						seen[x] = true
					}
					dup = seen[k]
				}
				if dup {
					return nil, invalid("field %q appears twice in one object", truncate(k))
				}
				if seen != nil {
					seen[k] = true
				}
			}
			p.space()
			p.i++ // ':'
			p.space()
			child, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			n.keys = append(n.keys, k)
			n.elems = append(n.elems, child)
			if p.space(); p.b[p.i] == ',' {
				p.i++
			}
		}
		p.i++
		return n, nil
	case c == '"':
		return &node{raw: canonicalString(p.str())}, nil
	case c == 't':
		p.i += 4
		return &node{raw: json.RawMessage("true")}, nil
	case c == 'f':
		p.i += 5
		return &node{raw: json.RawMessage("false")}, nil
	case c == 'n':
		p.i += 4
		return nullNode, nil
	}
	start := p.i
	for p.i < len(p.b) && strings.IndexByte("+-0123456789.eE", p.b[p.i]) >= 0 {
		p.i++
	}
	lit := string(p.b[start:p.i])
	if p.mode == client {
		c, err := canonicalNumber(lit)
		if err != nil {
			return nil, err
		}
		lit = c
	}
	return &node{raw: json.RawMessage(lit)}, nil
}

// str returns the next string literal, quotes included.
func (p *parser) str() []byte {
	start := p.i
	p.i++
	for p.b[p.i] != '"' {
		if p.b[p.i] == '\\' {
			p.i++
		}
		p.i++
	}
	p.i++
	return p.b[start:p.i]
}

// plainString reports whether the string literal raw is already what
// json.Marshal writes for its value: no escapes, no control characters, no
// characters Marshal escapes, valid UTF-8.
func plainString(raw []byte) bool {
	body := raw[1 : len(raw)-1]
	for _, c := range body {
		if c < 0x20 || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return utf8.Valid(body) && !bytes.Contains(body, []byte("\u2028")) && !bytes.Contains(body, []byte("\u2029"))
}

func decodeString(raw []byte) string {
	if plainString(raw) {
		return string(raw[1 : len(raw)-1])
	}
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

// canonicalString returns the string literal raw as json.Marshal writes it.
func canonicalString(raw []byte) json.RawMessage {
	if plainString(raw) {
		return append(json.RawMessage(nil), raw...)
	}
	return appendString(nil, decodeString(raw))
}

// canonicalNumber returns the canonical form of a JSON number literal (see
// the comment at the top of this file).
func canonicalNumber(lit string) (string, error) {
	if !strings.ContainsAny(lit, ".eE") {
		if n, err := strconv.ParseInt(lit, 10, 64); err == nil {
			return strconv.FormatInt(n, 10), nil
		}
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) || math.IsInf(f, 0) {
		return "", invalid("the number %s is not a finite 64-bit floating-point number", truncate(lit))
	}
	return formatDouble(f), nil
}

// FormatDouble returns the canonical JSON of a double (a BSON double a
// store read, say): like encoding/json, plus ".0" when the result would
// read as an integer, so that it stays a double.
func FormatDouble(f float64) string { return formatDouble(f) }

// formatDouble formats f as a double: like encoding/json, plus ".0" when
// the result would read as an integer.
func formatDouble(f float64) string {
	b := formatFloat(f)
	if !bytes.ContainsAny(b, ".eE") {
		b = append(b, ".0"...)
	}
	return string(b)
}

// number is a parsed JSON number: an integer or a double.
type number struct {
	isInt bool
	i     int64
	f     float64
}

// parseNumber parses a number literal of a value (canonical or not).
func parseNumber(raw []byte) (number, bool) {
	if !isNumberLit(raw) {
		return number{}, false
	}
	s := string(raw)
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return number{isInt: true, i: i}, true
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return number{}, false
	}
	return number{f: f}, true
}

func (n number) float() float64 {
	if n.isInt {
		return float64(n.i)
	}
	return n.f
}

// equal is MongoDB's numeric equality: exact across kinds.
func (n number) equal(m number) bool {
	switch {
	case n.isInt && m.isInt:
		return n.i == m.i
	case !n.isInt && !m.isInt:
		return n.f == m.f
	case n.isInt:
		return intEqualsFloat(n.i, m.f)
	default:
		return intEqualsFloat(m.i, n.f)
	}
}

func intEqualsFloat(i int64, f float64) bool {
	if f != math.Trunc(f) || f < -(1<<63) || f >= 1<<63 {
		return false
	}
	return int64(f) == i
}

// equalNodes is MongoDB's equality of two values (see the top of this file).
func equalNodes(a, b *node) bool {
	if a.kind != b.kind {
		return false
	}
	switch a.kind {
	case kindObject:
		if len(a.keys) != len(b.keys) {
			return false
		}
		for i := range a.keys {
			if a.keys[i] != b.keys[i] || !equalNodes(a.elems[i], b.elems[i]) {
				return false
			}
		}
		return true
	case kindArray:
		if len(a.elems) != len(b.elems) {
			return false
		}
		for i := range a.elems {
			if !equalNodes(a.elems[i], b.elems[i]) {
				return false
			}
		}
		return true
	}
	if bytes.Equal(a.raw, b.raw) {
		return true
	}
	na, aNum := parseNumber(a.raw)
	nb, bNum := parseNumber(b.raw)
	if aNum || bNum {
		return aNum && bNum && na.equal(nb)
	}
	if a.raw[0] == '"' && b.raw[0] == '"' {
		// Canonical strings are unique, but a JSON column's stored value
		// may spell a string with other escapes.
		var sa, sb string
		_ = json.Unmarshal(a.raw, &sa)
		_ = json.Unmarshal(b.raw, &sb)
		return sa == sb
	}
	return false
}

// eqMode says whether object field order matters to equality.
type eqMode uint8

const (
	ordered   eqMode = iota // document collections, as in MongoDB
	unordered               // JSON columns, as in PostgreSQL and MariaDB
)

// valueKey returns a string that two values share exactly when they are
// equal (equalNodes, for ordered), so that $addToSet and $pull can use sets
// instead of comparing every value with every element.
func valueKey(n *node, m eqMode) string { return string(appendKey(nil, n, m)) }

func appendKey(b []byte, n *node, m eqMode) []byte {
	switch n.kind {
	case kindObject:
		b = strconv.AppendInt(append(b, '{'), int64(len(n.keys)), 10)
		order := make([]int, len(n.keys))
		for i := range order {
			order[i] = i
		}
		if m == unordered {
			sort.Slice(order, func(i, j int) bool { return n.keys[order[i]] < n.keys[order[j]] })
		}
		for _, i := range order {
			k := n.keys[i]
			b = strconv.AppendInt(append(b, ','), int64(len(k)), 10)
			b = append(append(b, ':'), k...)
			b = appendKey(b, n.elems[i], m)
		}
		return append(b, '}')
	case kindArray:
		b = strconv.AppendInt(append(b, '['), int64(len(n.elems)), 10)
		for _, e := range n.elems {
			b = appendKey(append(b, ','), e, m)
		}
		return append(b, ']')
	}
	if num, ok := parseNumber(n.raw); ok {
		// Integers, and doubles equal to one, by their integer value;
		// other doubles by their bits (no NaN here; -0.0 is integral).
		i, f := num.i, num.f
		if num.isInt || f == math.Trunc(f) && f >= -(1<<63) && f < 1<<63 {
			if !num.isInt {
				i = int64(f)
			}
			return append(strconv.AppendInt(append(b, 'i'), i, 10), ';')
		}
		return append(strconv.AppendUint(append(b, 'f'), math.Float64bits(f), 16), ';')
	}
	if n.raw[0] == '"' {
		s := decodeString(n.raw)
		b = strconv.AppendInt(append(b, 's'), int64(len(s)), 10)
		return append(append(b, ':'), s...)
	}
	return append(append(b, n.raw...), ';')
}

// checkFieldName validates the name of a field inside a value: MongoDB
// cannot address names that are empty, start with '$' or contain '.' with
// update operators, and cannot store NUL in them.
func checkFieldName(k string) error {
	switch {
	case k == "":
		return invalid("a field name is empty")
	case k[0] == '$':
		return invalid("field name %q starts with '$'", truncate(k))
	case strings.ContainsRune(k, '.'):
		return invalid("field name %q contains '.'; nest objects instead", truncate(k))
	case strings.ContainsRune(k, 0):
		return invalid("field name %q contains a NUL character", truncate(k))
	case !utf8.ValidString(k):
		return invalid("field name %q is not valid UTF-8", truncate(k))
	}
	return nil
}

// canonicalValue validates a client's value and returns its canonical JSON.
func canonicalValue(v json.RawMessage) (json.RawMessage, error) {
	n, err := parseClientValue(v)
	if err != nil {
		return nil, err
	}
	return n.encode(), nil
}

func parseClientValue(v json.RawMessage) (*node, error) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return nil, invalid("a value is missing")
	}
	if !utf8.Valid(v) {
		return nil, invalid("the value must be valid UTF-8")
	}
	return parseValue(v, client)
}

// mustParse parses a value this package wrote (or a store returned); a
// malformed one is reported as an error, not a panic.
func mustParse(v json.RawMessage) (*node, error) {
	n, err := parseValue(v, trusted)
	if err != nil {
		return nil, &TypeError{Msg: "a stored value is not valid JSON"}
	}
	return n, nil
}
