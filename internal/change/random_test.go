package change

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// gen makes random documents and changes over a small alphabet of fields,
// so that paths often meet, overlap and hit every case of the operators.
type gen struct {
	r *rand.Rand
	s *Schema
}

func newGen(t testing.TB, seed uint64) *gen {
	return &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), s: docSchema(t)}
}

var (
	genFields = []string{"a", "b", "c"}
	genParts  = []string{"a", "b", "x", "0", "1", "2"}
)

func (g *gen) pick(list []string) string { return list[g.r.IntN(len(list))] }

// scalar returns a random JSON scalar.
func (g *gen) scalar() string {
	switch g.r.IntN(12) {
	case 0, 1, 2:
		return fmt.Sprint(g.r.IntN(4) - 1)
	case 3:
		return []string{"0.5", "1.0", "-2.5", "1e300"}[g.r.IntN(4)]
	case 4:
		return []string{"9223372036854775807", "-9223372036854775808", "2147483647"}[g.r.IntN(3)]
	case 5, 6:
		return []string{`"x"`, `"y"`, `""`}[g.r.IntN(3)]
	case 7:
		return "true"
	case 8:
		return "null"
	case 9:
		return "2"
	default:
		return "1"
	}
}

// value returns a random JSON value nested at most depth levels.
func (g *gen) value(depth int) string {
	if depth <= 0 {
		return g.scalar()
	}
	switch g.r.IntN(6) {
	case 0, 1:
		n := g.r.IntN(4)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = g.value(depth - 1)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case 2:
		n := g.r.IntN(3)
		var parts []string
		seen := map[string]bool{}
		for range n {
			k := g.pick([]string{"a", "b", "x", "0", "1"})
			if seen[k] {
				continue
			}
			seen[k] = true
			parts = append(parts, fmt.Sprintf("%q:%s", k, g.value(depth-1)))
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	return g.scalar()
}

// doc returns a random document, usually shaped so that the typed paths
// below work: a is an object {x: number, l: array, o: {n, l}}, b an array,
// c a number.
func (g *gen) doc() Doc {
	var parts []string
	for _, f := range genFields {
		if g.r.IntN(5) == 0 {
			continue
		}
		v := g.value(2)
		if g.r.IntN(4) > 0 {
			switch f {
			case "a":
				var inner []string
				if g.r.IntN(4) > 0 {
					inner = append(inner, `"x":`+g.number())
				}
				if g.r.IntN(4) > 0 {
					inner = append(inner, `"l":`+g.array())
				}
				if g.r.IntN(4) > 0 {
					inner = append(inner, fmt.Sprintf(`"o":{"n":%s,"l":%s}`, g.number(), g.array()))
				}
				if g.r.IntN(3) == 0 {
					inner = append(inner, `"y":`+g.value(1))
				}
				v = "{" + strings.Join(inner, ",") + "}"
			case "b":
				v = g.array()
			case "c":
				v = g.number()
			}
		}
		parts = append(parts, fmt.Sprintf("%q:%s", f, v))
	}
	c, err := ParsePut(g.s, "v", []byte("{"+strings.Join(parts, ",")+"}"))
	if err != nil {
		panic(err)
	}
	return c.Doc
}

func (g *gen) number() string {
	return []string{"0", "1", "2", "-1", "1.5", "2.0", "9223372036854775807"}[g.r.IntN(7)]
}

func (g *gen) array() string {
	vals := make([]string, g.r.IntN(4))
	for i := range vals {
		vals[i] = []string{"1", "2", "1.0", `"x"`, `"y"`, `{"a":1}`, "[1]", "null"}[g.r.IntN(8)]
	}
	return "[" + strings.Join(vals, ",") + "]"
}

// Paths that usually suit an operator on a document from doc.
var (
	numberPaths = []string{"c", "a.x", "a.o.n", "b.0", "a.l.1", "a.new", "d"}
	arrayPaths  = []string{"b", "a.l", "a.o.l", "a.new", "d", "a.o.m"}
	anyPaths    = []string{"a", "a.o", "a.y", "a.x", "a.l.0", "b.2", "c", "d", "a.o.l", "a.z"}
)

// opPath returns a path for op: usually one that suits it.
func (g *gen) opPath(op Operator) string {
	if g.r.IntN(4) == 0 {
		return g.path()
	}
	switch op {
	case OpInc:
		return g.pick(numberPaths)
	case OpPush, OpAddToSet, OpPull:
		return g.pick(arrayPaths)
	}
	return g.pick(anyPaths)
}

func (g *gen) path() string {
	p := []string{g.pick(genFields)}
	for n := g.r.IntN(3); n > 0; n-- {
		p = append(p, g.pick(genParts))
	}
	return strings.Join(p, ".")
}

// elem returns a value for arrays: often one that arrays from doc hold.
func (g *gen) elem() string {
	if g.r.IntN(3) == 0 {
		return g.value(1)
	}
	return []string{"1", "2", "1.0", `"x"`, `"y"`, `{"a":1}`, "[1]", "null"}[g.r.IntN(8)]
}

// opValue returns the JSON a client would send for op.
func (g *gen) opValue(op Operator) string {
	switch op {
	case OpInc:
		return []string{"1", "2", "-1", "0.5", "1.0", "9223372036854775807"}[g.r.IntN(6)]
	case OpUnset:
		return `""`
	case OpPush, OpAddToSet:
		if g.r.IntN(2) == 0 {
			vals := make([]string, g.r.IntN(4))
			for i := range vals {
				vals[i] = g.elem()
			}
			return `{"$each":[` + strings.Join(vals, ",") + `]}`
		}
		return g.elem()
	case OpPull:
		if g.r.IntN(3) == 0 {
			vals := make([]string, g.r.IntN(3))
			for i := range vals {
				vals[i] = g.elem()
			}
			return `{"$in":[` + strings.Join(vals, ",") + `]}`
		}
		v := g.elem()
		for strings.HasPrefix(v, "{") {
			v = g.elem()
		}
		return v
	}
	return g.value(2)
}

var genOps = []Operator{OpSet, OpSet, OpUnset, OpInc, OpInc, OpPush, OpPush, OpAddToSet, OpAddToSet, OpPull, OpPull}

// patch returns a random client patch of a document collection.
func (g *gen) patch() Change {
	for {
		byOp := map[Operator][]string{}
		for n := 1 + g.r.IntN(3); n > 0; n-- {
			op := genOps[g.r.IntN(len(genOps))]
			byOp[op] = append(byOp[op], fmt.Sprintf("%q:%s", g.opPath(op), g.opValue(op)))
		}
		var parts []string
		for op, fields := range byOp {
			parts = append(parts, fmt.Sprintf("%q:{%s}", op, strings.Join(fields, ",")))
		}
		c, err := ParsePatch(g.s, []byte("{"+strings.Join(parts, ",")+"}"))
		if err == nil {
			return c
		}
	}
}

// changes returns a random sequence: mostly patches, sometimes a Put, a
// Delete or a patch holding overlapping operators (as CompactDoc makes).
func (g *gen) changes() []Change {
	n := 1 + g.r.IntN(6)
	out := make([]Change, 0, n)
	for i := range n {
		var c Change
		switch k := g.r.IntN(20); {
		case k == 0:
			c = Change{Kind: Put, Doc: g.doc()}
		case k == 1:
			c = Change{Kind: Delete}
		case k < 5:
			c = Change{Kind: Patch}
			for m := 1 + g.r.IntN(3); m > 0; m-- {
				c.Ops = append(c.Ops, g.patch().Ops...)
			}
		default:
			c = g.patch()
		}
		c.Seq = int64(i + 1)
		out = append(out, c)
	}
	return out
}

// replayAll applies changes as a store replays them: a patch of a missing
// document does nothing (an update that matches no document).
func replayAll(d Doc, changes []Change) (Doc, error) {
	for _, c := range changes {
		if c.Kind == Patch && d == nil {
			continue
		}
		var err error
		if d, err = Apply(d, c); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// steps splits changes into what a store without transactions may apply
// one at a time: each Put or Delete, and each operator of a patch.
func steps(changes []Change) []Change {
	var out []Change
	for _, c := range changes {
		if c.Kind != Patch || len(c.Ops) == 0 {
			out = append(out, c)
			continue
		}
		for _, o := range c.Ops {
			out = append(out, Change{Seq: c.Seq, Kind: Patch, Ops: []Op{o}})
		}
	}
	return out
}

func changesString(cs []Change) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%d:%s", c.Seq, Encode(c)))
	}
	return strings.Join(parts, "  ")
}

func encodeAll(cs []Change) string {
	b, _ := json.Marshal(changesString(cs))
	return string(b)
}

// sqlGen makes random rows and patches of testSchema's table, with JSON
// column j.
type sqlGen struct {
	*gen
	s *Schema
}

func newSQLGen(t testing.TB, seed uint64) *sqlGen {
	return &sqlGen{gen: newGen(t, seed), s: testSchema(t)}
}

func (g *sqlGen) row() Doc {
	j := []string{"null", `{"l":[1,"x"],"a":{"b":1},"n":2}`, `[1,2]`, `"s"`, `{"n":1.5}`, g.value(2)}[g.r.IntN(6)]
	n := []string{"null", "0", "7", "9223372036854775807"}[g.r.IntN(4)]
	f := []string{"null", "0.1", "2"}[g.r.IntN(3)]
	c, err := ParsePut(g.s, "1", []byte(fmt.Sprintf(`{"req":"r","n":%s,"f":%s,"j":%s}`, n, f, j)))
	if err != nil {
		panic(err)
	}
	return c.Doc
}

var sqlFields = map[Operator][]string{
	OpSet:      {"n", "f", "name", "j", "j.a", "j.a.b", "j.l.0", "j.x"},
	OpUnset:    {"n", "f", "j", "j.a", "j.l.1", "j.n"},
	OpInc:      {"n", "f", "j.n", "j.a.b", "j.l.0"},
	OpPush:     {"j", "j.l", "j.a.m"},
	OpAddToSet: {"j", "j.l"},
	OpPull:     {"j", "j.l"},
}

func (g *sqlGen) fieldValue(op Operator, field string) string {
	switch {
	case op == OpInc && field == "n":
		return fmt.Sprint(g.r.IntN(5) - 2)
	case op == OpSet && field == "n":
		return []string{"1", "null", "9223372036854775806"}[g.r.IntN(3)]
	case op == OpSet && field == "f":
		return "0.25"
	case op == OpSet && field == "name":
		return `"a"`
	case op == OpSet && field == "j":
		return []string{`{"l":[]}`, `[]`, `null`, `{"a":{}}`}[g.r.IntN(4)]
	}
	return g.opValue(op)
}

// patch returns a random client patch of the table.
func (g *sqlGen) patch() Change {
	for {
		byOp := map[Operator][]string{}
		for n := 1 + g.r.IntN(3); n > 0; n-- {
			op := genOps[g.r.IntN(len(genOps))]
			f := g.pick(sqlFields[op])
			byOp[op] = append(byOp[op], fmt.Sprintf("%q:%s", f, g.fieldValue(op, f)))
		}
		var parts []string
		for op, fields := range byOp {
			parts = append(parts, fmt.Sprintf("%q:{%s}", op, strings.Join(fields, ",")))
		}
		c, err := ParsePatch(g.s, []byte("{"+strings.Join(parts, ",")+"}"))
		if err == nil {
			return c
		}
	}
}

func (g *sqlGen) changes() []Change {
	n := 1 + g.r.IntN(6)
	out := make([]Change, 0, n)
	for i := range n {
		var c Change
		switch k := g.r.IntN(20); {
		case k == 0:
			c = Change{Kind: Put, Doc: g.row()}
		case k == 1:
			c = Change{Kind: Delete}
		default:
			c = g.patch()
		}
		c.Seq = int64(i + 1)
		out = append(out, c)
	}
	return out
}
