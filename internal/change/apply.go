package change

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"

	"github.com/writeback/writeback/internal/jsonscan"
)

// Apply returns the document that results from applying c to doc (nil when
// absent). doc is not modified. A patch of a missing document is ErrNotFound;
// a patch that the document's values do not allow is a *TypeError.
func Apply(doc Doc, c Change) (Doc, error) {
	switch c.Kind {
	case Put:
		return c.Doc.Clone(), nil
	case Delete:
		return nil, nil
	case Patch:
		if doc == nil {
			return nil, ErrNotFound
		}
		out := doc.Clone()
		for k, v := range c.Set {
			out[k] = v
		}
		for _, k := range c.Unset {
			out[k] = null
		}
		for k, n := range c.Inc {
			v, err := addNumber(out[k], n)
			if err != nil {
				return nil, typeErr([]string{k}, "$inc of %q: %v", k, err)
			}
			out[k] = v
		}
		for _, col := range sortedKeys(c.JSON) {
			v, err := ApplyJSON(col, out[col], c.JSON[col])
			if err != nil {
				return nil, err
			}
			out[col] = v
		}
		if len(c.Ops) > 0 {
			if err := applyDocOps(out, c.Ops); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("change: unknown kind %v", c.Kind)
}

// ApplyAll applies changes in order, starting from doc.
func ApplyAll(doc Doc, changes []Change) (Doc, error) {
	for _, c := range changes {
		var err error
		if doc, err = Apply(doc, c); err != nil {
			return nil, err
		}
	}
	return doc, nil
}

// addNumber adds n to the JSON number v. A missing or null v counts as zero,
// as in SQL's COALESCE(col, 0) + n and MongoDB's $inc. Two integers add
// exactly (overflow is an error, as in the store); otherwise float64.
func addNumber(v json.RawMessage, n json.Number) (json.RawMessage, error) {
	if len(v) == 0 || string(v) == "null" {
		v = json.RawMessage("0")
	}
	a, aInt := parseInt(v)
	b, bInt := parseInt(json.RawMessage(n))
	if aInt && bInt {
		s := new(big.Int).Add(big.NewInt(a), big.NewInt(b))
		if !s.IsInt64() {
			return nil, fmt.Errorf("integer overflow")
		}
		return json.RawMessage(s.String()), nil
	}
	fa, ok := parseFloat(v)
	if !ok {
		return nil, fmt.Errorf("%s is not a number", v)
	}
	fb, ok := parseFloat(json.RawMessage(n))
	if !ok {
		return nil, fmt.Errorf("%s is not a number", n)
	}
	f := fa + fb
	if math.IsInf(f, 0) {
		return nil, fmt.Errorf("float overflow")
	}
	return formatFloat(f), nil
}

// Effect is the net result of a run of changes to one document: what the
// store has to do to go from the state before the run to the state after it.
type Effect struct {
	Kind Kind // Put (upsert Doc), Patch (Set, Inc and JSON; or Ops), Delete
	Doc  Doc  // Put: the whole document
	Set  Doc  // Patch: column = value (null for $unset)
	// Inc holds, per column, the amounts to add in order:
	// column = COALESCE(column, 0) + a0 + a1 + … . Integer amounts are folded
	// into one; float amounts are kept apart so the store rounds exactly as
	// applying them one by one would. A column is never in both Set and Inc.
	Inc map[string][]json.Number
	// JSON holds, per JSON column, operators on the column's value whose
	// result depends on the value before the run (a $push to an array the
	// run did not set, say): the store reads the column in its transaction,
	// computes the new value with ApplyJSON(column, value, ops) and writes it
	// (a *TypeError from ApplyJSON is a permanent failure of the change). When
	// the run sets the column first, the operators are folded into Set
	// instead. A column is never in both Set and JSON.
	JSON map[string][]Op
	// Ops holds a document collection's patch: its operators, in order,
	// compacted (see CompactDoc); a MongoDB store sends them as the update
	// documents Updates(Ops) returns.
	Ops []Op
}

// Compact folds a non-empty run of changes, in order, into one Effect
// (consecutive $sets collapse, $inc after $set becomes a $set of the sum, a
// Put or Delete discards what came before it). It fails only on changes that
// could not have been accepted (a patch after a delete, overflow).
//
// The Effect of a single put, or of a single patch that only sets columns
// (the common run: one write per document between two applies), shares
// its Doc or Set with the change instead of copying it; callers treat an
// Effect's maps, like a change's, as read-only.
func Compact(changes []Change) (Effect, error) {
	if len(changes) == 1 {
		switch c := changes[0]; {
		case c.Kind == Put:
			return Effect{Kind: Put, Doc: c.Doc}, nil
		case c.Kind == Patch && len(c.Set) > 0 && len(c.Unset) == 0 && len(c.Inc) == 0 && len(c.JSON) == 0 && len(c.Ops) == 0:
			return Effect{Kind: Patch, Set: c.Set}, nil
		}
	}
	var e Effect
	for i, c := range changes {
		switch c.Kind {
		case Put:
			e = Effect{Kind: Put, Doc: c.Doc.Clone()}
		case Delete:
			e = Effect{Kind: Delete}
		case Patch:
			switch e.Kind {
			case Put:
				d, err := Apply(e.Doc, c)
				if err != nil {
					return Effect{}, err
				}
				e.Doc = d
			case Delete:
				return Effect{}, fmt.Errorf("change: change %d patches a deleted document", i)
			default:
				e.Kind = Patch
				if e.Set == nil {
					e.Set = Doc{}
				}
				if e.Inc == nil {
					e.Inc = map[string][]json.Number{}
				}
				if e.JSON == nil {
					e.JSON = map[string][]Op{}
				}
				for k, v := range c.Set {
					e.Set[k] = v
					delete(e.Inc, k)
					delete(e.JSON, k)
				}
				for _, k := range c.Unset {
					e.Set[k] = null
					delete(e.Inc, k)
					delete(e.JSON, k)
				}
				for k, n := range c.Inc {
					if v, ok := e.Set[k]; ok {
						s, err := addNumber(v, n)
						if err != nil {
							return Effect{}, typeErr([]string{k}, "$inc of %q: %v", k, err)
						}
						e.Set[k] = s
						continue
					}
					e.Inc[k] = foldInc(e.Inc[k], n)
				}
				for _, col := range sortedKeys(c.JSON) {
					ops := c.JSON[col]
					if v, ok := e.Set[col]; ok {
						// The run set the column: the operators' result is known.
						nv, err := ApplyJSON(col, v, ops)
						if err != nil {
							return Effect{}, err
						}
						e.Set[col] = nv
						continue
					}
					e.JSON[col] = append(e.JSON[col], cloneOps(ops)...)
				}
				e.Ops = append(e.Ops, cloneOps(c.Ops)...)
			}
		default:
			return Effect{}, fmt.Errorf("change: unknown kind %v", c.Kind)
		}
	}
	if e.Kind == 0 {
		return Effect{}, fmt.Errorf("change: nothing to compact")
	}
	if e.Kind == Patch {
		for k, amounts := range e.Inc {
			if len(amounts) == 0 {
				delete(e.Inc, k)
			}
		}
		for col, ops := range e.JSON {
			e.JSON[col] = compactOps(ops, false)
		}
		e.Ops = compactOps(e.Ops, true)
	}
	return e, nil
}

func foldInc(amounts []json.Number, n json.Number) []json.Number {
	if len(amounts) > 0 {
		last := amounts[len(amounts)-1]
		a, aInt := parseInt(json.RawMessage(last))
		b, bInt := parseInt(json.RawMessage(n))
		if aInt && bInt {
			s := new(big.Int).Add(big.NewInt(a), big.NewInt(b))
			if s.IsInt64() {
				amounts[len(amounts)-1] = json.Number(s.String())
				return amounts
			}
		}
	}
	return append(amounts, n)
}

// wire is the JSON form of a change in a buffered write.
type wire struct {
	Doc   Doc                    `json:"doc,omitempty"`
	Set   Doc                    `json:"$set,omitempty"`
	Unset []string               `json:"$unset,omitempty"`
	Inc   map[string]json.Number `json:"$inc,omitempty"`
	JSON  map[string][]Op        `json:"json,omitempty"`
	Ops   []Op                   `json:"ops,omitempty"`
}

// Encode returns the body of c as stored in a buffered write, without its
// sequence number: "<kind>|<json>". The buffer prepends "<seq>|".
func Encode(c Change) []byte {
	b, _ := json.Marshal(wire{Doc: c.Doc, Set: c.Set, Unset: c.Unset, Inc: c.Inc, JSON: c.JSON, Ops: c.Ops})
	out := make([]byte, 0, len(b)+2)
	out = append(out, byte(c.Kind), '|')
	return append(out, b...)
}

// Decode parses one buffered-write entry "<seq>|<ms>|<kind>|<json>" (the
// buffer adds the sequence number and the time it was buffered at).
func Decode(entry string) (Change, error) {
	seqStr, rest, ok1 := strings.Cut(entry, "|")
	_, rest, ok2 := strings.Cut(rest, "|")
	if !ok1 || !ok2 || len(rest) < 2 || rest[1] != '|' {
		return Change{}, fmt.Errorf("change: malformed entry %.40q", entry)
	}
	seq, err := strconv.ParseInt(seqStr, 10, 64)
	if err != nil {
		return Change{}, fmt.Errorf("change: malformed sequence in entry %.40q", entry)
	}
	c := Change{Seq: seq, Kind: Kind(rest[0])}
	switch c.Kind {
	case Put, Patch, Delete:
	default:
		return Change{}, fmt.Errorf("change: unknown kind in entry %.40q", entry)
	}
	body := rest[2:]
	if doc, set, ok := decodeSets(body); ok {
		c.Doc, c.Set = doc, set
		return c, nil
	}
	var w wire
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&w); err != nil {
		return Change{}, fmt.Errorf("change: malformed entry body: %w", err)
	}
	c.Doc, c.Set, c.Unset, c.Inc, c.JSON, c.Ops = w.Doc, w.Set, w.Unset, w.Inc, w.JSON, w.Ops
	for _, ops := range c.JSON {
		if err := checkOps(ops); err != nil {
			return Change{}, err
		}
	}
	if err := checkOps(c.Ops); err != nil {
		return Change{}, err
	}
	return c, nil
}

// decodeSets is Decode's answer for the bodies of puts and of patches that
// only set columns, as json.Marshal writes them — {"doc":{…}}, {"$set":{…}}
// or {} — read without encoding/json's decoder (ownedObject), the values
// slices of one copy of body; false for anything else, which the decoder
// then reads or refuses.
func decodeSets(body string) (doc, set Doc, ok bool) {
	b := []byte(body)
	if len(b) < 2 || b[0] != '{' {
		return nil, nil, false
	}
	if len(b) == 2 && b[1] == '}' {
		return nil, nil, true
	}
	for i := 1; ; {
		end, escaped, ok := jsonscan.StringEnd(b, i)
		if !ok || escaped || end >= len(b) || b[end] != ':' {
			return nil, nil, false
		}
		vend, ok := jsonscan.ValueEnd(b, end+1)
		if !ok || vend >= len(b) {
			return nil, nil, false
		}
		m, ok := ownedObject(b[end+1 : vend : vend])
		if !ok {
			return nil, nil, false
		}
		// A member given twice would be merged by the decoder: leave it
		// to the decoder.
		switch string(b[i+1 : end-1]) {
		case "doc":
			if doc != nil {
				return nil, nil, false
			}
			doc = m
		case "$set":
			if set != nil {
				return nil, nil, false
			}
			set = m
		default:
			return nil, nil, false
		}
		switch b[vend] {
		case ',':
			i = vend + 1
		case '}':
			return doc, set, vend+1 == len(b)
		default:
			return nil, nil, false
		}
	}
}

// checkOps rejects decoded operators this package could not have written.
func checkOps(ops []Op) error {
	for _, o := range ops {
		if !o.Op.valid() {
			return fmt.Errorf("change: unknown operator %.40q in entry", o.Op)
		}
	}
	return nil
}

func cloneOps(ops []Op) []Op {
	if len(ops) == 0 {
		return nil
	}
	return append([]Op(nil), ops...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
