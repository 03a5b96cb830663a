package change

import (
	"encoding/json"
	"fmt"
	"sort"
)

// Idempotent is the conversion step of the paper's Algorithm 2, for stores
// that apply changes without a transaction covering the applied record
// (MongoDB without multi-document transactions): given the stored document
// and the prefix of its buffered changes an applier is about to apply, it
// returns equivalent changes (same length, same Seq and Kind) that are
// harmless to replay. The applier persists them in place of the originals,
// then applies them; after a crash it applies them again from the start.
//
// Precisely, with R = Idempotent(doc, changes):
//
//   - ApplyAll(doc, R) equals ApplyAll(doc, changes);
//   - for every state S reached by applying to doc a prefix of R, operator
//     by operator (a crash in the middle of a change included), applying R
//     to S gives the same document again (a patch of a deleted document
//     counting as a no-op, as an update that matches nothing does);
//   - Idempotent(S, R) == R for every such S: converting again is a no-op.
//
// How: every $inc, $push and $pull becomes a $set of the value it produced
// at the same path, computed from doc; a $pull that found nothing to work on
// (missing path) is dropped. $set, $unset and $addToSet stay, except where a
// replay could go wrong even so: a $set of a path inside a field that a
// later operator replaces by a scalar would fail on replay, an $unset and a
// later $set of the same nested field would move it within its object, an
// $addToSet followed by an operator on the same path or inside it would add
// its value again. Each top-level field (each column, for a table) for which
// the sequence has such a pattern — nested operators on paths of which one
// contains another, an operator on the field itself after nested ones, a
// nested $unset followed by another operator on that path — is written as a
// whole instead: its operators in each change become one $set of the field's
// value after that change (or a top-level $unset when the field is gone).
// Fields without such patterns (the common case: counters, arrays, fields
// set again and again) keep their paths.
//
// A patch of a missing document that a later Put or Delete of the prefix
// overrides (the Delete was applied before a crash) keeps only what is
// already safe to replay. A change that cannot be applied to doc is reported
// as an error wrapping the change's error (*TypeError, or ErrNotFound for a
// patch of a missing document), naming the change.
func Idempotent(doc Doc, changes []Change) ([]Change, error) {
	p := analyze(changes)
	out := make([]Change, len(changes))
	cur := doc
	for i, c := range changes {
		if c.Kind != Patch {
			next, err := Apply(cur, c)
			if err != nil {
				return nil, fmt.Errorf("change: change %d (seq %d): %w", i, c.Seq, err)
			}
			out[i], cur = cloneChange(c), next
			continue
		}
		if cur == nil {
			if !resetLater(changes[i+1:]) {
				return nil, fmt.Errorf("change: change %d (seq %d): %w", i, c.Seq, ErrNotFound)
			}
			// The document is gone (a later Delete was applied already) and
			// a later Put or Delete decides its fields: the patch does
			// nothing, now or on replay. Keep what is already safe to
			// replay; what would need the document's values goes.
			res := Change{Seq: c.Seq, Kind: Patch}
			for k, it := range decompose(c) {
				if !p.whole[it.field] && it.op.Op.idempotent() && !p.convert[[2]int{i, k}] {
					res.add(it)
				}
			}
			sort.Strings(res.Unset)
			out[i] = res
			continue
		}
		res := Change{Seq: c.Seq, Kind: Patch}
		var whole []string // rewritten fields this change touches, in order
		for k, it := range decompose(c) {
			next, err := Apply(cur, it.change())
			if err != nil {
				return nil, fmt.Errorf("change: change %d (seq %d): %w", i, c.Seq, err)
			}
			cur = next
			switch {
			case p.whole[it.field]:
				if !containsString(whole, it.field) {
					whole = append(whole, it.field)
				}
			case !it.op.Op.idempotent() || p.convert[[2]int{i, k}]:
				if v, ok := valueAt(cur, it); ok {
					res.add(it.withSet(v))
				}
			default:
				res.add(it)
			}
		}
		for _, f := range whole {
			v, ok := cur[f]
			switch {
			case c.isTable():
				res.add(item{field: f, kind: itemColumn, op: Op{Op: OpSet, Value: v}})
			case ok:
				res.add(item{field: f, kind: itemDoc, op: Op{Op: OpSet, Path: f, Value: v}})
			default:
				res.add(item{field: f, kind: itemDoc, op: Op{Op: OpUnset, Path: f}})
			}
		}
		sort.Strings(res.Unset)
		out[i] = res
	}
	return out, nil
}

// resetLater reports whether changes hold a Put or a Delete.
func resetLater(changes []Change) bool {
	for _, c := range changes {
		if c.Kind != Patch {
			return true
		}
	}
	return false
}

// IsIdempotent reports whether applying c again to a document that already
// contains it (entirely or in part) is harmless: Idempotent would leave it
// as it is. A Put or a Delete is; a patch is unless it has $inc, $push or
// $pull (or, for a patch that CompactDoc merged, one of the patterns that
// Idempotent writes as whole fields).
func IsIdempotent(c Change) bool {
	if c.Kind != Patch {
		return true
	}
	p := analyze([]Change{c})
	if len(p.whole) > 0 || len(p.convert) > 0 {
		return false
	}
	for _, it := range decompose(c) {
		if !it.op.Op.idempotent() {
			return false
		}
	}
	return true
}

// plan is what Idempotent decides before converting: the fields to write
// as a whole, and the $addToSet operators (change, item) to turn into $set.
type plan struct {
	whole   map[string]bool
	convert map[[2]int]bool
}

// fieldState tracks one field's operators during analyze.
type fieldState struct {
	nested [][]string      // distinct nested paths seen
	paths  map[string]bool // the same, joined
	unset  map[string]bool // nested paths that had an $unset
	adds   []addRef        // $addToSet operators seen
}

type addRef struct {
	at  [2]int
	rel []string
}

func analyze(changes []Change) plan {
	p := plan{whole: map[string]bool{}, convert: map[[2]int]bool{}}
	fields := map[string]*fieldState{}
	state := func(f string) *fieldState {
		s := fields[f]
		if s == nil {
			s = &fieldState{unset: map[string]bool{}, paths: map[string]bool{}}
			fields[f] = s
		}
		return s
	}
	// touch records an operator on path rel of field f (rel empty: the field
	// itself) and checks what it means for the operators before it.
	touch := func(f string, rel []string, op Operator) {
		s := state(f)
		for _, a := range s.adds {
			if related(a.rel, rel) {
				p.convert[a.at] = true
			}
		}
		if len(rel) == 0 {
			if len(s.nested) > 0 {
				p.whole[f] = true // the field itself after nested operators
			}
			return
		}
		key := joinPath(rel)
		if s.unset[key] && op != OpUnset {
			p.whole[f] = true // re-created after an $unset: its position would move
		}
		if op == OpUnset {
			s.unset[key] = true
		}
		if !s.paths[key] {
			for _, q := range s.nested {
				if related(q, rel) {
					p.whole[f] = true // one path inside another
				}
			}
			s.paths[key] = true
			s.nested = append(s.nested, rel)
		}
	}
	for i, c := range changes {
		if c.Kind != Patch {
			for f := range fields {
				touch(f, nil, OpSet)
			}
			continue
		}
		for k, it := range decompose(c) {
			touch(it.field, it.rel, it.op.Op)
			if it.op.Op == OpAddToSet {
				s := state(it.field)
				s.adds = append(s.adds, addRef{at: [2]int{i, k}, rel: it.rel})
			}
		}
	}
	return p
}

// item is one operator of a patch on one field, in a form common to tables
// and document collections.
type item struct {
	field string
	rel   []string // path below the field (or the column's value)
	kind  byte     // itemDoc, itemColumn or itemJSON
	op    Op       // Path as in the Change (itemColumn: unused)
}

const (
	itemDoc    byte = iota // Change.Ops
	itemColumn             // Change.Set, Unset, Inc: a whole column
	itemJSON               // Change.JSON
)

func (c Change) isTable() bool {
	return len(c.Set) > 0 || len(c.Unset) > 0 || len(c.Inc) > 0 || len(c.JSON) > 0
}

// decompose lists the operators of a patch in the order Apply applies them.
func decompose(c Change) []item {
	var items []item
	for _, f := range sortedKeys(c.Set) {
		items = append(items, item{field: f, kind: itemColumn, op: Op{Op: OpSet, Value: c.Set[f]}})
	}
	for _, f := range c.Unset {
		items = append(items, item{field: f, kind: itemColumn, op: Op{Op: OpUnset}})
	}
	for _, f := range sortedKeys(c.Inc) {
		items = append(items, item{field: f, kind: itemColumn, op: Op{Op: OpInc, Value: json.RawMessage(c.Inc[f])}})
	}
	for _, f := range sortedKeys(c.JSON) {
		for _, o := range c.JSON[f] {
			items = append(items, item{field: f, rel: segments(o.Path), kind: itemJSON, op: o})
		}
	}
	for _, o := range c.Ops {
		segs := segments(o.Path)
		if len(segs) == 0 {
			segs = []string{""}
		}
		items = append(items, item{field: segs[0], rel: segs[1:], kind: itemDoc, op: o})
	}
	return items
}

// change returns a patch of the single operator it.
func (it item) change() Change {
	c := Change{Kind: Patch}
	c.add(it)
	return c
}

// add appends it to the patch c.
func (c *Change) add(it item) {
	switch it.kind {
	case itemDoc:
		c.Ops = append(c.Ops, it.op)
	case itemJSON:
		if len(it.rel) == 0 && it.op.Op == OpSet {
			// A $set of the whole value is a $set of the column.
			c.add(item{field: it.field, kind: itemColumn, op: Op{Op: OpSet, Value: it.op.Value}})
			return
		}
		if c.JSON == nil {
			c.JSON = map[string][]Op{}
		}
		c.JSON[it.field] = append(c.JSON[it.field], it.op)
	case itemColumn:
		switch it.op.Op {
		case OpSet:
			if c.Set == nil {
				c.Set = Doc{}
			}
			c.Set[it.field] = it.op.Value
		case OpUnset:
			c.Unset = append(c.Unset, it.field)
		case OpInc:
			if c.Inc == nil {
				c.Inc = map[string]json.Number{}
			}
			c.Inc[it.field] = json.Number(it.op.Value)
		}
	}
}

// withSet returns the $set of v at it's path.
func (it item) withSet(v json.RawMessage) item {
	it.op = Op{Op: OpSet, Path: it.op.Path, Value: v}
	return it
}

// valueAt returns the value at it's path in d, if there is one.
func valueAt(d Doc, it item) (json.RawMessage, bool) {
	v, ok := d[it.field]
	if !ok {
		return nil, false
	}
	if it.kind == itemColumn {
		return v, true
	}
	if len(it.rel) == 0 && it.kind == itemDoc {
		return v, true
	}
	if it.kind == itemJSON && string(v) == "null" {
		return nil, false
	}
	n, err := mustParse(v)
	if err != nil {
		return nil, false
	}
	for _, s := range it.rel {
		switch n.kind {
		case kindObject:
			i := n.field(s)
			if i < 0 {
				return nil, false
			}
			n = n.elems[i]
		case kindArray:
			i, ok := arrayIndex(s)
			if !ok || i >= len(n.elems) {
				return nil, false
			}
			n = n.elems[i]
		default:
			return nil, false
		}
	}
	return n.encode(), true
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
