package change

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

// Operator is an update operator.
type Operator string

// The update operators, with MongoDB's semantics (see Op).
const (
	OpSet      Operator = "$set"
	OpUnset    Operator = "$unset"
	OpInc      Operator = "$inc"
	OpPush     Operator = "$push"
	OpAddToSet Operator = "$addToSet"
	OpPull     Operator = "$pull"
)

// Op is one update operator applied at one path of a value. Paths are
// dotted ("a.b.0.c"); a part made of digits indexes an array where the value
// there is an array, and names a field otherwise.
//
//   - $set: the value at Path becomes Value; missing objects along the path
//     are created, and an array indexed past its end is padded with nulls.
//   - $unset: removes the field at Path; an array element becomes null; a
//     missing path is a no-op.
//   - $inc: adds the number Value; a missing field is set to Value.
//   - $push: appends Values, in order, to the array at Path (created when
//     missing).
//   - $addToSet: appends each of Values that the array does not contain yet
//     (MongoDB's equality, see value.go), creating the array when missing.
//   - $pull: removes every element equal to Values[0], or, when In is set,
//     every element equal to one of Values or being an array that contains
//     one of them (MongoDB's {$in: […]} condition). A missing path is a no-op.
//
// A path through a scalar (or through an array with a part that is not an
// index) is a *TypeError, except for $unset, which then does nothing; so is
// $inc of a non-number and $push, $addToSet or $pull of a non-array.
type Op struct {
	Op     Operator          `json:"op"`
	Path   string            `json:"path,omitempty"`
	Value  json.RawMessage   `json:"value,omitempty"`  // $set: the value; $inc: the amount
	Values []json.RawMessage `json:"values,omitempty"` // $push, $addToSet: the values ($each); $pull: what to remove
	In     bool              `json:"in,omitempty"`     // $pull: Values is an {$in: […]} list
}

// TypeError is a change that cannot be applied because of a value the
// document holds: $inc of a string, $push to a non-array, a path through a
// scalar, an integer overflow. A caller that applies the change to the
// document's known current value (the write path, to the cached document)
// answers 400 with Msg; a store that finds out only when applying it
// dead-letters the change.
type TypeError struct {
	Path string // the operator's path ("a.b"; in a JSON column "column.a.b")
	Msg  string // one sentence, for clients
}

func (e *TypeError) Error() string { return "change: " + e.Msg }

func typeErr(path []string, format string, args ...any) error {
	return &TypeError{Path: strings.Join(path, "."), Msg: fmt.Sprintf(format, args...)}
}

// creates reports whether op creates its path when it is missing.
func (op Operator) creates() bool {
	switch op {
	case OpSet, OpInc, OpPush, OpAddToSet:
		return true
	}
	return false
}

// idempotent reports whether applying op twice equals applying it once.
func (op Operator) idempotent() bool {
	switch op {
	case OpSet, OpUnset, OpAddToSet:
		return true
	}
	return false
}

func (op Operator) valid() bool {
	switch op {
	case OpSet, OpUnset, OpInc, OpPush, OpAddToSet, OpPull:
		return true
	}
	return false
}

// segments splits a dotted path; the empty path has no segments.
func segments(p string) []string {
	if p == "" {
		return nil
	}
	return strings.Split(p, ".")
}

// checkPath validates a client's dotted path.
func checkPath(p string) error { return checkPathAs(p, p) }

// checkPathAs validates the dotted path p, naming it as name in messages.
func checkPathAs(p, name string) error {
	for _, s := range strings.Split(p, ".") {
		switch {
		case s == "":
			return invalid("field path %q has an empty part", truncate(name))
		case s[0] == '$':
			return invalid("field path %q has a part starting with '$'; positional operators are not supported", truncate(name))
		case strings.ContainsRune(s, 0):
			return invalid("field path %q contains a NUL character", truncate(name))
		case len(s) > 1 && s[0] == '0' && isDigits(s):
			return invalid("field path %q has a number with a leading zero", truncate(name))
		}
	}
	return nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// arrayIndex parses a path part as an array index.
func arrayIndex(s string) (int, bool) {
	if !isDigits(s) {
		return 0, false
	}
	if len(s) > 15 {
		return math.MaxInt32 * 2, true // far past any padding limit
	}
	n, _ := strconv.Atoi(s)
	return n, true
}

// comparePaths orders paths as MongoDB processes the fields of one update
// (since 5.0): part by part, parts made of digits in numeric order, others
// bytewise; a path sorts before the paths below it.
func comparePaths(a, b []string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if c := comparePart(a[i], b[i]); c != 0 {
			return c
		}
	}
	return len(a) - len(b)
}

func comparePart(a, b string) int {
	if isDigits(a) && isDigits(b) {
		a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
		if len(a) != len(b) {
			return len(a) - len(b)
		}
	}
	return strings.Compare(a, b)
}

// isPrefix reports whether p is a prefix of q (or equal to it).
func isPrefix(p, q []string) bool {
	if len(p) > len(q) {
		return false
	}
	for i := range p {
		if p[i] != q[i] {
			return false
		}
	}
	return true
}

// related reports whether one of p and q is a prefix of the other.
func related(p, q []string) bool { return isPrefix(p, q) || isPrefix(q, p) }

func joinPath(parts ...[]string) string {
	var all []string
	for _, p := range parts {
		all = append(all, p...)
	}
	return strings.Join(all, ".")
}

// applyOp applies op at rel below *slot, the current value (nil when
// absent). full is the op's whole path, for messages; rel is a suffix of it.
// m is how $addToSet and $pull compare objects.
func applyOp(slot **node, rel []string, op *Op, full []string, m eqMode) error {
	if len(rel) == 0 {
		return applyLeaf(slot, op, full, m)
	}
	at := full[:len(full)-len(rel)]
	cur := *slot
	if cur == nil {
		if !op.Op.creates() {
			return nil
		}
		cur = &node{kind: kindObject, keys: []string{}, elems: []*node{}}
		*slot = cur
	}
	switch cur.kind {
	case kindObject:
		i := cur.field(rel[0])
		if i < 0 {
			if !op.Op.creates() {
				return nil
			}
			var child *node
			if err := applyOp(&child, rel[1:], op, full, m); err != nil {
				return err
			}
			cur.keys = append(cur.keys, rel[0])
			cur.elems = append(cur.elems, child)
			return nil
		}
		if err := applyOp(&cur.elems[i], rel[1:], op, full, m); err != nil {
			return err
		}
		if cur.elems[i] == nil {
			cur.keys = append(cur.keys[:i], cur.keys[i+1:]...)
			cur.elems = append(cur.elems[:i], cur.elems[i+1:]...)
		}
		return nil
	case kindArray:
		idx, ok := arrayIndex(rel[0])
		if !ok {
			if op.Op == OpUnset {
				return nil
			}
			return typeErr(full, "cannot apply %s to %q: %q is an array and %q is not an index", op.Op, joinPath(full), joinPath(at), rel[0])
		}
		if idx < len(cur.elems) {
			if err := applyOp(&cur.elems[idx], rel[1:], op, full, m); err != nil {
				return err
			}
			if cur.elems[idx] == nil {
				cur.elems[idx] = nullNode // $unset of an element leaves a null
			}
			return nil
		}
		if !op.Op.creates() {
			return nil
		}
		if idx-len(cur.elems) > maxPadding {
			return typeErr(full, "cannot apply %s to %q: it would pad the array with more than %d nulls", op.Op, joinPath(full), maxPadding)
		}
		var child *node
		if err := applyOp(&child, rel[1:], op, full, m); err != nil {
			return err
		}
		for len(cur.elems) < idx {
			cur.elems = append(cur.elems, nullNode)
		}
		cur.elems = append(cur.elems, child)
		return nil
	}
	if op.Op == OpUnset {
		return nil
	}
	return typeErr(full, "cannot apply %s to %q: %q holds %s", op.Op, joinPath(full), joinPath(at), cur.describe())
}

// applyLeaf applies op to the value at its path (nil when absent).
func applyLeaf(slot **node, op *Op, full []string, m eqMode) error {
	cur := *slot
	path := joinPath(full)
	switch op.Op {
	case OpSet:
		v, err := mustParse(op.Value)
		if err != nil {
			return err
		}
		*slot = v
	case OpUnset:
		*slot = nil
	case OpInc:
		amount, ok := parseNumber(op.Value)
		if !ok {
			return typeErr(full, "$inc of %q has an amount that is not a number", path)
		}
		if cur == nil {
			*slot = &node{raw: append(json.RawMessage(nil), op.Value...)}
			return nil
		}
		if !cur.isNumber() {
			return typeErr(full, "$inc of %q needs a number, but the field holds %s", path, cur.describe())
		}
		have, _ := parseNumber(cur.raw)
		sum, err := addNumbers(have, amount)
		if err != nil {
			return typeErr(full, "$inc of %q %s", path, err.Error())
		}
		*slot = &node{raw: sum}
	case OpPush, OpAddToSet:
		if cur == nil {
			cur = &node{kind: kindArray, elems: []*node{}}
		} else if cur.kind != kindArray {
			return typeErr(full, "%s to %q needs an array, but the field holds %s", op.Op, path, cur.describe())
		}
		var have map[string]bool // $addToSet: the elements' keys
		if op.Op == OpAddToSet {
			have = make(map[string]bool, len(cur.elems)+len(op.Values))
			for _, e := range cur.elems {
				have[valueKey(e, m)] = true
			}
		}
		for _, raw := range op.Values {
			v, err := mustParse(raw)
			if err != nil {
				return err
			}
			if have != nil {
				k := valueKey(v, m)
				if have[k] {
					continue
				}
				have[k] = true
			}
			cur.elems = append(cur.elems, v)
		}
		*slot = cur
	case OpPull:
		if cur == nil {
			return nil
		}
		if cur.kind != kindArray {
			return typeErr(full, "$pull from %q needs an array, but the field holds %s", path, cur.describe())
		}
		match, err := newMatcher(op, m)
		if err != nil {
			return err
		}
		kept := make([]*node, 0, len(cur.elems))
		for _, e := range cur.elems {
			if !match.matches(e) {
				kept = append(kept, e)
			}
		}
		*slot = &node{kind: kindArray, elems: kept}
	default:
		return typeErr(full, "unknown operator %q", op.Op)
	}
	return nil
}

// matcher decides which elements a $pull removes.
type matcher struct {
	in   bool
	mode eqMode
	vals map[string]bool // the values' keys (valueKey)
}

func newMatcher(op *Op, mode eqMode) (matcher, error) {
	m := matcher{in: op.In, mode: mode, vals: make(map[string]bool, len(op.Values))}
	for _, raw := range op.Values {
		v, err := mustParse(raw)
		if err != nil {
			return matcher{}, err
		}
		m.vals[valueKey(v, mode)] = true
	}
	return m, nil
}

func (m matcher) matches(e *node) bool {
	if m.vals[valueKey(e, m.mode)] {
		return true
	}
	if m.in && e.kind == kindArray {
		for _, x := range e.elems {
			if m.vals[valueKey(x, m.mode)] {
				return true
			}
		}
	}
	return false
}

// addNumbers is $inc's arithmetic (see value.go).
func addNumbers(a, b number) (json.RawMessage, error) {
	if a.isInt && b.isInt {
		s := new(big.Int).Add(big.NewInt(a.i), big.NewInt(b.i))
		if !s.IsInt64() {
			return nil, fmt.Errorf("overflows a 64-bit integer")
		}
		return json.RawMessage(s.String()), nil
	}
	f := a.float() + b.float()
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, fmt.Errorf("does not give a finite number")
	}
	return json.RawMessage(formatDouble(f)), nil
}

// applyDocOps applies the operators of a document collection's patch to doc
// (in place; the caller passes a copy).
func applyDocOps(doc Doc, ops []Op) error {
	fields := map[string]*node{}
	for i := range ops {
		full := segments(ops[i].Path)
		if len(full) == 0 {
			return typeErr(nil, "%s has an empty path", ops[i].Op)
		}
		f := full[0]
		n, ok := fields[f]
		if !ok {
			if v, exists := doc[f]; exists {
				var err error
				if n, err = mustParse(v); err != nil {
					return err
				}
			}
		}
		if err := applyOp(&n, full[1:], &ops[i], full, ordered); err != nil {
			return err
		}
		fields[f] = n
	}
	for f, n := range fields {
		if n == nil {
			delete(doc, f)
		} else {
			doc[f] = n.encode()
		}
	}
	return nil
}

// ApplyJSON applies operators to the value v of the JSON column column (nil
// or null: SQL NULL, which the operators see as a missing value) and returns
// the new value (null if nothing is left). Paths are relative to the
// column's value; "" is the value itself. Objects inside the column are
// equal regardless of field order (see value.go). This is how a SQL store
// carries out Effect.JSON, in the transaction in which it read v.
func ApplyJSON(column string, v json.RawMessage, ops []Op) (json.RawMessage, error) {
	var n *node
	if t := bytes.TrimSpace(v); len(t) > 0 && string(t) != "null" {
		var err error
		if n, err = mustParse(t); err != nil {
			return nil, err
		}
	}
	for i := range ops {
		rel := segments(ops[i].Path)
		full := append([]string{column}, rel...)
		if err := applyOp(&n, rel, &ops[i], full, unordered); err != nil {
			return nil, err
		}
	}
	if n == nil {
		return null, nil
	}
	return n.encode(), nil
}

// buildOp validates one field of a client's operator and returns it as an
// Op at path.
func buildOp(op Operator, path string, v json.RawMessage) (Op, error) {
	v = bytes.TrimSpace(v)
	switch op {
	case OpSet:
		cv, err := canonicalValue(v)
		if err != nil {
			return Op{}, err
		}
		return Op{Op: op, Path: path, Value: cv}, nil
	case OpUnset:
		return Op{Op: op, Path: path}, nil
	case OpInc:
		if !isNumberLit(v) {
			return Op{}, invalid("$inc of %q must be a number, not %s", truncate(path), describe(v))
		}
		n, err := canonicalNumber(string(v))
		if err != nil {
			return Op{}, err
		}
		return Op{Op: op, Path: path, Value: json.RawMessage(n)}, nil
	case OpPush, OpAddToSet:
		if each, ok, err := eachList(op, path, v); err != nil {
			return Op{}, err
		} else if ok {
			return Op{Op: op, Path: path, Values: each}, nil
		}
		cv, err := canonicalValue(v)
		if err != nil {
			return Op{}, err
		}
		return Op{Op: op, Path: path, Values: []json.RawMessage{cv}}, nil
	case OpPull:
		if len(v) > 0 && v[0] == '{' {
			var cond map[string]json.RawMessage
			if err := decodeObject(v, &cond); err != nil {
				return Op{}, err
			}
			in, ok := cond["$in"]
			if !ok || len(cond) != 1 {
				for k := range cond {
					if strings.HasPrefix(k, "$") {
						return Op{}, invalid(`$pull of %q supports only the condition {"$in": […]}`, truncate(path))
					}
				}
				return Op{}, invalid(`$pull of %q with an object would be a MongoDB query, which is not supported; pull a value or use {"$in": […]}`, truncate(path))
			}
			vals, err := valueList(in, "$in", path)
			if err != nil {
				return Op{}, err
			}
			return Op{Op: op, Path: path, Values: vals, In: true}, nil
		}
		cv, err := canonicalValue(v)
		if err != nil {
			return Op{}, err
		}
		return Op{Op: op, Path: path, Values: []json.RawMessage{cv}}, nil
	}
	return Op{}, invalid("unknown operator %q", op)
}

// eachList recognizes {"$each": […]} as the value of $push or $addToSet.
// Any other object with a '$' field is refused: MongoDB would read it as
// modifiers ($slice, $sort, $position), which are not supported.
func eachList(op Operator, path string, v json.RawMessage) ([]json.RawMessage, bool, error) {
	if len(v) == 0 || v[0] != '{' {
		return nil, false, nil
	}
	var mods map[string]json.RawMessage
	if err := decodeObject(v, &mods); err != nil {
		return nil, false, err
	}
	dollar := false
	for k := range mods {
		if strings.HasPrefix(k, "$") {
			dollar = true
		}
	}
	if !dollar {
		return nil, false, nil
	}
	each, ok := mods["$each"]
	if !ok || len(mods) != 1 {
		names := make([]string, 0, len(mods))
		for k := range mods {
			if k != "$each" {
				names = append(names, k)
			}
		}
		sort.Strings(names)
		return nil, false, invalid(`%s of %q supports only {"$each": […]}, not %s`, op, truncate(path), truncate(names[0]))
	}
	vals, err := valueList(each, "$each", path)
	return vals, true, err
}

// valueList validates the array of $each or $in.
func valueList(raw json.RawMessage, what, path string) ([]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '[' {
		return nil, invalid("%s of %q must be an array, not %s", what, truncate(path), describe(raw))
	}
	n, err := parseClientValue(raw)
	if err != nil {
		return nil, err
	}
	vals := make([]json.RawMessage, len(n.elems))
	for i, e := range n.elems {
		vals[i] = e.encode()
	}
	return vals, nil
}
