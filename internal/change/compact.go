package change

import (
	"encoding/json"
	"sort"
)

// CompactDoc returns a sequence of changes equivalent to changes, never
// longer and usually shorter (read-modify-write compaction). Equivalent
// means: from any document on which ApplyAll(doc, changes) succeeds,
// ApplyAll(doc, CompactDoc(changes)) succeeds with the same document; and
// the compacted sequence never fails where the original succeeds. (It may
// succeed where the original fails: a failing change that a later Put or
// $set overwrites is dropped.)
//
// A Put or Delete discards what came before it; patches after a Put are
// folded into it; consecutive patches of a document collection merge into
// one patch, whose operators are then compacted:
//
//   - an operator followed by a $set of the same path or of a path above it
//     is dropped, and so is anything under a field that is then $unset at the
//     top level;
//   - an operator after a $set of its path or a path above it is folded into
//     the $set's value ($inc after $set is a $set of the sum);
//   - consecutive $push (or $addToSet, or $pull {$in}) of one path merge;
//   - a $push or $addToSet followed by a $pull of the same path drops the
//     values the $pull removes. This is the exact form of the paper's
//     Example 3.1 ($addToSet then $pull of the same value cancel): the $pull
//     stays, because it also removes a copy that was there before, and the
//     $addToSet stays with no values ({"$each": []}), because on a missing
//     field it still creates the empty array the original sequence leaves.
//
// Operators on different top-level fields are independent and may be
// reordered; within a field, only neighbors are combined, so nested fields
// keep the order in which they were created. A compacted patch keeps the Seq
// of the last change it absorbed. Patches of a table's row (Set, Unset, Inc,
// JSON) are not merged with each other: Compact turns those into an Effect.
func CompactDoc(changes []Change) []Change {
	var out []Change
	for _, c := range changes {
		switch c.Kind {
		case Put, Delete:
			out = append(out[:0], Change{Seq: c.Seq, Kind: c.Kind, Doc: c.Doc.Clone()})
			continue
		case Patch:
			if len(out) > 0 {
				last := &out[len(out)-1]
				if last.Kind == Put {
					if d, err := Apply(last.Doc, c); err == nil {
						last.Doc, last.Seq = d, c.Seq
						continue
					}
				}
				if isDocPatch(*last) && isDocPatch(c) {
					last.Ops = append(last.Ops, c.Ops...)
					last.Seq = c.Seq
					continue
				}
			}
		}
		out = append(out, cloneChange(c))
	}
	for i := range out {
		if out[i].Kind == Patch && len(out[i].Ops) > 0 {
			out[i].Ops = compactOps(out[i].Ops, true)
		}
	}
	return out
}

// isDocPatch reports whether c is a document collection's patch (no
// table fields).
func isDocPatch(c Change) bool {
	return c.Kind == Patch && len(c.Set) == 0 && len(c.Unset) == 0 && len(c.Inc) == 0 && len(c.JSON) == 0
}

func cloneChange(c Change) Change {
	out := Change{Seq: c.Seq, Kind: c.Kind, Doc: c.Doc.Clone(), Set: c.Set.Clone(), Ops: cloneOps(c.Ops)}
	if c.Unset != nil {
		out.Unset = append([]string(nil), c.Unset...)
	}
	if c.Inc != nil {
		out.Inc = make(map[string]json.Number, len(c.Inc))
		for k, v := range c.Inc {
			out.Inc[k] = v
		}
	}
	if c.JSON != nil {
		out.JSON = make(map[string][]Op, len(c.JSON))
		for k, v := range c.JSON {
			out.JSON[k] = cloneOps(v)
		}
	}
	return out
}

// fieldOp is an operator with its path split: below a top-level field of a
// document, or below a JSON column's value.
type fieldOp struct {
	op  Op
	rel []string
}

// compactOps compacts a list of operators applied in order (see CompactDoc).
// With byField, paths start with a top-level field and the operators of
// different fields are compacted apart; otherwise they are the relative
// paths of one JSON column.
func compactOps(ops []Op, byField bool) []Op {
	if len(ops) < 2 {
		return cloneOps(ops)
	}
	groups := map[string][]fieldOp{}
	for _, o := range ops {
		segs := segments(o.Path)
		field := ""
		if byField && len(segs) > 0 {
			field, segs = segs[0], segs[1:]
		}
		groups[field] = append(groups[field], fieldOp{op: o, rel: segs})
	}
	fields := make([]string, 0, len(groups))
	for f := range groups {
		fields = append(fields, f)
	}
	sort.Slice(fields, func(i, j int) bool { return comparePart(fields[i], fields[j]) < 0 })
	mode := unordered // a JSON column's value
	if byField {
		mode = ordered
	}
	out := make([]Op, 0, len(ops))
	for _, f := range fields {
		for _, fo := range compactField(groups[f], mode) {
			out = append(out, fo.op)
		}
	}
	return out
}

// compactField combines neighbors among the operators of one field until
// no rule applies. Every rule removes an operator or a value, so it ends.
func compactField(items []fieldOp, m eqMode) []fieldOp {
	for i := 0; i+1 < len(items); {
		merged, ok := combine(items[i], items[i+1], m)
		if !ok {
			i++
			continue
		}
		rest := append(merged, items[i+2:]...)
		items = append(items[:i], rest...)
		if i > 0 {
			i--
		}
	}
	return items
}

// combine returns what a and then b (neighbors on one field) can be
// replaced by, if anything; m is how values compare.
func combine(a, b fieldOp, m eqMode) ([]fieldOp, bool) {
	same := len(a.rel) == len(b.rel) && isPrefix(a.rel, b.rel)
	switch {
	case b.op.Op == OpSet && isPrefix(b.rel, a.rel):
		// b overwrites whatever a did below it. Not after an $unset of the
		// very same nested field: that one moves the field to the end of
		// its object, which b alone would not.
		if a.op.Op == OpUnset && same && len(b.rel) > 0 {
			return nil, false
		}
		return []fieldOp{b}, true
	case b.op.Op == OpUnset && isPrefix(b.rel, a.rel) &&
		(len(b.rel) == 0 || a.op.Op == OpUnset || a.op.Op == OpPull):
		// b removes what a did; a created nothing outside it.
		return []fieldOp{b}, true
	case a.op.Op == OpSet && isPrefix(a.rel, b.rel) && !(b.op.Op == OpUnset && same):
		// The value at a's path is known: fold b into it.
		v, err := mustParse(a.op.Value)
		if err != nil {
			return nil, false
		}
		full := segments(b.op.Path)
		if err := applyOp(&v, b.rel[len(a.rel):], &b.op, full, m); err != nil || v == nil {
			return nil, false
		}
		a.op.Value = v.encode()
		return []fieldOp{a}, true
	case !same:
		return nil, false
	case a.op.Op == OpPush && b.op.Op == OpPush:
		a.op.Values = append(append([]json.RawMessage(nil), a.op.Values...), b.op.Values...)
		return []fieldOp{a}, true
	case a.op.Op == OpAddToSet && b.op.Op == OpAddToSet:
		a.op.Values = dedup(append(append([]json.RawMessage(nil), a.op.Values...), b.op.Values...), m)
		return []fieldOp{a}, true
	case a.op.Op == OpPull && b.op.Op == OpPull && a.op.In && b.op.In:
		a.op.Values = dedup(append(append([]json.RawMessage(nil), a.op.Values...), b.op.Values...), m)
		return []fieldOp{a}, true
	case a.op.Op == OpPull && b.op.Op == OpPull && !a.op.In && !b.op.In &&
		len(a.op.Values) == 1 && len(b.op.Values) == 1 && sameValue(a.op.Values[0], b.op.Values[0], m):
		return []fieldOp{a}, true
	case a.op.Op == OpUnset && b.op.Op == OpUnset:
		return []fieldOp{a}, true
	case (a.op.Op == OpPush || a.op.Op == OpAddToSet) && b.op.Op == OpPull:
		// The values the $pull removes again need not be added at all.
		match, err := newMatcher(&b.op, m)
		if err != nil {
			return nil, false
		}
		var kept []json.RawMessage
		for _, raw := range a.op.Values {
			v, err := mustParse(raw)
			if err != nil {
				return nil, false
			}
			if !match.matches(v) {
				kept = append(kept, raw)
			}
		}
		if len(kept) == len(a.op.Values) {
			return nil, false
		}
		a.op.Values = kept
		return []fieldOp{a, b}, true
	}
	return nil, false
}

// dedup drops values equal (MongoDB equality) to an earlier one.
func dedup(vals []json.RawMessage, m eqMode) []json.RawMessage {
	seen := make(map[string]bool, len(vals))
	out := vals[:0:0]
	for _, raw := range vals {
		v, err := mustParse(raw)
		if err != nil {
			return vals
		}
		k := valueKey(v, m)
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, raw)
	}
	return out
}

func sameValue(a, b json.RawMessage, m eqMode) bool {
	na, err1 := mustParse(a)
	nb, err2 := mustParse(b)
	return err1 == nil && err2 == nil && valueKey(na, m) == valueKey(nb, m)
}
