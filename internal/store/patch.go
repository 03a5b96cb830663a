package store

import (
	"hash/maphash"
	"slices"

	"github.com/writeback/writeback/internal/change"
)

// patchCol is one column of a patch's shape: either set to a value (a
// NULL for $unset) or, when amounts > 0, incremented by that many amounts
// (col = COALESCE(col, 0) + a1 + … + an, computed by the database).
type patchCol struct {
	c       change.Column
	amounts int
}

// patchGroup is the patches of one table that share a shape — the columns
// they set and those they increment, with as many amounts each — and so
// one statement: the row values differ, the statement's text does not.
// Its rows have distinct keys (see patchGroups.add).
type patchGroup struct {
	t      *Table
	cols   []patchCol // in schema order
	ids    []string
	writes []int   // the index of the write each row belongs to (Result.Missing)
	rows   [][]any // per row: per column of cols, the value or the amounts
	round  int     // see patchGroups.rounds
}

// patchGroups gathers a batch's patches into groups, in first-seen order.
type patchGroups struct {
	list  []*patchGroup
	index map[uint64][]*patchGroup // by shapeHash
	// rounds counts the patches of each row (table and key) so far. Two
	// collections over one table can patch one row in the same batch; one
	// statement must not name a row twice (PostgreSQL's UPDATE … FROM
	// would apply only one of them), so the n-th patch of a row goes to a
	// group of round n, and the groups run round after round (ordered).
	rounds map[rowKey]int
}

// rowKey names a row of a batch: collections over one table share it.
type rowKey struct{ table, id string }

// ordered returns the groups round by round, each round in first-seen
// order: the patches of a row run in the batch's order.
func (p *patchGroups) ordered() []*patchGroup {
	slices.SortStableFunc(p.list, func(a, b *patchGroup) int { return a.round - b.round })
	return p.list
}

// add files the patch (cols, vals) of row id of t, from write w.
func (p *patchGroups) add(t *Table, cols []patchCol, id string, w int, vals []any) {
	row := rowKey{t.Name, id}
	round := p.rounds[row]
	p.rounds[row] = round + 1
	h := shapeHash(t, cols, round)
	var g *patchGroup
	for _, c := range p.index[h] {
		if c.round == round && c.t.Name == t.Name && slices.EqualFunc(c.cols, cols, samePatchCol) {
			g = c
			break
		}
	}
	if g == nil {
		g = &patchGroup{t: t, cols: cols, round: round}
		p.index[h] = append(p.index[h], g)
		p.list = append(p.list, g)
	}
	g.ids = append(g.ids, id)
	g.writes = append(g.writes, w)
	g.rows = append(g.rows, vals)
}

// newPatchGroups returns the groups of a batch of n writes.
func newPatchGroups(n int) patchGroups {
	return patchGroups{index: map[uint64][]*patchGroup{}, rounds: make(map[rowKey]int, n)}
}

// shapeHash hashes the shape of a patch of t in round — the table, and
// each column with its number of amounts (0 for a set) — without building
// a name for it: a batch computes one per patch.
func shapeHash(t *Table, cols []patchCol, round int) uint64 {
	var h maphash.Hash
	h.SetSeed(shapeSeed)
	h.WriteString(t.Name)
	for _, pc := range cols {
		h.WriteByte(0)
		h.WriteString(pc.c.Name)
		h.WriteByte(byte(pc.amounts))
	}
	h.WriteByte(byte(round))
	return h.Sum64()
}

var shapeSeed = maphash.MakeSeed()

func samePatchCol(a, b patchCol) bool { return a.c.Name == b.c.Name && a.amounts == b.amounts }

// patchRow checks the Set and Inc of a Patch effect of row id of t and
// returns its shape and values: per column in schema order, the value to
// set (columnArg: NULL or text) or the amounts to add (incArg: int64 or
// float64, kept apart so the database rounds float sums as applying them
// one by one would).
func patchRow(t *Table, id string, e change.Effect) ([]patchCol, []any, error) {
	var cols []patchCol
	var vals []any
	for _, c := range t.Schema.Columns {
		v, isSet := e.Set[c.Name]
		amounts, isInc := e.Inc[c.Name]
		if !isSet && !isInc {
			continue
		}
		if c.Name == t.Schema.Key {
			return nil, nil, permanentf("store: %s: a patch of %s changes the key column %q", t.Name, id, c.Name)
		}
		if isSet {
			a, err := columnArg(c, v)
			if err != nil {
				return nil, nil, err
			}
			cols, vals = append(cols, patchCol{c: c}), append(vals, a)
			continue
		}
		for _, amount := range amounts {
			a, err := incArg(c, amount)
			if err != nil {
				return nil, nil, err
			}
			vals = append(vals, a)
		}
		cols = append(cols, patchCol{c: c, amounts: len(amounts)})
	}
	for name := range e.Set {
		if _, ok := t.Schema.Column(name); !ok {
			return nil, nil, permanentf("store: %s has no column %q", t.Name, name)
		}
	}
	for name := range e.Inc {
		if _, ok := t.Schema.Column(name); !ok {
			return nil, nil, permanentf("store: %s has no column %q", t.Name, name)
		}
	}
	return cols, vals, nil
}

// setList writes the SET list of a patch group's statement: each column of
// cols assigned its value (val(i), the i-th value of the row) or
// incremented by its amounts, target(col) naming the column's current
// value. A group without columns assigns the key to itself: the statement
// still finds (and locks) the rows, which tells a missing one.
func setList(q *query, t *Table, cols []patchCol, target func(col string) string, assign func(col string) string, val func(i int, pc patchCol) string) {
	i := 0
	for n, pc := range cols {
		if n > 0 {
			q.add(", ")
		}
		col := q.d.ident(pc.c.Name)
		if pc.amounts == 0 {
			q.add(assign(col), " = ", val(i, pc))
			i++
			continue
		}
		q.add(assign(col), " = COALESCE(", target(col), ", 0)")
		for range pc.amounts {
			q.add(" + ", val(i, pc))
			i++
		}
	}
	if len(cols) == 0 {
		key := q.d.ident(t.Schema.Key)
		q.add(assign(key), " = ", target(key))
	}
}
