package sqlcheck

import (
	"strconv"
	"strings"
)

// KeyedWrite is an UPDATE or DELETE that picks its rows by columns equal
// to placeholders and nothing else:
//
//	UPDATE [ONLY] t SET a = …, b = … WHERE k1 = $i AND k2 = $j …
//	DELETE FROM [ONLY] t WHERE k1 = $i AND k2 = $j …
//
// with no alias, no RETURNING (MySQL: no IGNORE, ORDER BY or LIMIT), and
// no SET of a key column (k1, k2, …). Executions of one such statement
// whose key arguments are pairwise distinct touch disjoint sets of rows (a
// row's keys do not change, and it equals one tuple of key values at
// most), and each row is changed from its own values and one execution's
// arguments. So they change the store exactly as one statement that joins
// the table with a list of their arguments does (Rows), bar the order in
// which rows are locked and row triggers fire, and statement-level
// triggers firing once. Whether the key arguments are distinct is the
// caller's to check (Keys): only it knows the values.
//
// MySQL evaluates a single-table UPDATE's assignments left to right, each
// seeing the ones before it, and a joined (multi-table) UPDATE's in an
// order of its own: a MySQL UPDATE is a keyed write only when no
// assignment reads a column another one sets.
type KeyedWrite struct {
	d      Dialect
	head   string  // up to the table: "UPDATE t", "DELETE FROM ONLY t"
	table  string  // the table as written
	set    string  // UPDATE: " SET …" up to WHERE; "" for DELETE
	setPhs []Token // set's placeholders, Pos and End within set
	keys   []keyColumn
	update bool
}

// keyColumn is one k = $i of a KeyedWrite's WHERE: the column as written
// and the placeholder's number (MySQL's ? by their order, from 1).
type keyColumn struct {
	col string
	arg int
}

// SingleKeyedWrite returns sql as a KeyedWrite; ok is false when sql is
// not one (or does not lex). It does not check the statement otherwise:
// CheckDML does, when the session commits.
func SingleKeyedWrite(d Dialect, sql string) (w KeyedWrite, ok bool) {
	toks, err := lexStatement(d, sql, lexOptions{})
	if err != nil {
		return KeyedWrite{}, false
	}
	// MySQL's placeholders are numbered here, by their order.
	n := 0
	for i, t := range toks {
		if t.Kind == Placeholder && d == MySQL {
			n++
			toks[i].Text = strconv.Itoa(n)
		}
	}
	p := &parser{d: d, toks: toks, funcs: map[string]bool{}}
	w.d = d
	switch {
	case p.accept("update"):
		w.update = true
	case p.accept("delete") && p.accept("from"):
	default:
		return KeyedWrite{}, false
	}
	if d == Postgres {
		p.accept("only")
	}
	tbl, err := p.name("a table")
	if err != nil || p.isP(".") {
		return KeyedWrite{}, false
	}
	w.head, w.table = sql[:tbl.End], sql[tbl.Pos:tbl.End]
	p.quals = []Token{tbl}
	// column names compare as the dialect does: MySQL's without case
	name := func(t Token) string {
		if d == MySQL {
			return strings.ToLower(t.Text)
		}
		return t.Text
	}
	assigned := map[string]bool{}
	if w.update {
		setAt := p.i
		if !p.accept("set") {
			return KeyedWrite{}, false
		}
		var reads [][]Token // each assignment's expression
		var cols []string
		for {
			if p.column() != nil {
				return KeyedWrite{}, false
			}
			col := name(toks[p.i-1]) // the column's own name, qualified or not
			if assigned[col] {
				return KeyedWrite{}, false // set twice: MySQL's second sees the first
			}
			assigned[col] = true
			if !p.acceptP("=") {
				return KeyedWrite{}, false
			}
			from := p.i
			if p.expr() != nil {
				return KeyedWrite{}, false
			}
			reads, cols = append(reads, toks[from:p.i]), append(cols, col)
			if !p.acceptP(",") {
				break
			}
		}
		if !p.is("where") {
			return KeyedWrite{}, false
		}
		if d == MySQL {
			for i, expr := range reads {
				for _, t := range expr {
					if (t.Kind == Ident || t.Kind == QuotedIdent) && assigned[name(t)] && name(t) != cols[i] {
						return KeyedWrite{}, false
					}
				}
			}
		}
		from, to := toks[setAt-1].End, toks[p.i-1].End
		w.set = sql[from:to]
		for _, t := range toks[setAt:p.i] {
			if t.Kind == Placeholder {
				t.Pos, t.End = t.Pos-from, t.End-from
				w.setPhs = append(w.setPhs, t)
			}
		}
	}
	if !p.accept("where") {
		return KeyedWrite{}, false
	}
	for {
		col, err := p.name("a key column")
		if err != nil || assigned[name(col)] || !p.acceptP("=") {
			return KeyedWrite{}, false
		}
		ph := p.peek()
		if ph.Kind != Placeholder {
			return KeyedWrite{}, false
		}
		p.i++
		n, _ := strconv.Atoi(ph.Text) // digits
		w.keys = append(w.keys, keyColumn{col: sql[col.Pos:col.End], arg: n})
		if p.done() {
			return w, true
		}
		if !p.accept("and") {
			return KeyedWrite{}, false
		}
	}
}

// Keys returns the numbers (1-based) of the placeholders the statement's
// rows are picked by, in WHERE's order.
func (w KeyedWrite) Keys() []int {
	out := make([]int, len(w.keys))
	for i, k := range w.keys {
		out[i] = k.arg
	}
	return out
}

// joinedArgs names the VALUES list of a joined KeyedWrite and its columns
// (writeback_1 …): names no application's table is likely to have, and if
// one has them, its unqualified references become ambiguous and the joined
// statement fails, which the appliers answer by running the executions one
// by one.
const joinedArgs = "writeback_v"

// Rows returns the statement of n executions, for their arguments one
// after another: each has params of them. On PostgreSQL types are their
// placeholders' types (a cast each, so that the VALUES columns have the
// types the executions' placeholders have):
//
//	UPDATE t SET … FROM (VALUES ($1::int4, …), …) AS writeback_v (writeback_1, …) WHERE k = writeback_v.writeback_1 …
//	DELETE FROM t USING (VALUES …) AS writeback_v (…) WHERE …
//
// On MySQL types is not used; the rows are a derived table:
//
//	UPDATE t JOIN (SELECT ? AS writeback_1, … UNION ALL SELECT ?, …) AS writeback_v ON k = writeback_v.writeback_1 … SET …
//	DELETE t FROM t JOIN (…) AS writeback_v ON …
//
// With n = 1 it is still the joined form.
func (w KeyedWrite) Rows(n, params int, types []string) string {
	var b strings.Builder
	// list writes item(0) … item(n-1) separated by sep.
	list := func(n int, sep string, item func(i int)) {
		for i := range n {
			if i > 0 {
				b.WriteString(sep)
			}
			item(i)
		}
	}
	arg := func(i int) string { return joinedArgs + ".writeback_" + strconv.Itoa(i) }
	set := func() {
		at := 0
		for _, t := range w.setPhs {
			b.WriteString(w.set[at:t.Pos])
			i, _ := strconv.Atoi(t.Text)
			b.WriteString(arg(i))
			at = t.End
		}
		b.WriteString(w.set[at:])
	}
	keys := func() {
		list(len(w.keys), " AND ", func(i int) { b.WriteString(w.keys[i].col + " = " + arg(w.keys[i].arg)) })
	}
	if w.d == MySQL {
		if w.update {
			b.WriteString(w.head)
		} else {
			b.WriteString("DELETE " + w.table + " FROM " + w.table)
		}
		b.WriteString(" JOIN (")
		list(n, " UNION ALL ", func(k int) {
			b.WriteString("SELECT ")
			list(params, ", ", func(i int) {
				b.WriteByte('?')
				if k == 0 {
					b.WriteString(" AS writeback_" + strconv.Itoa(i+1))
				}
			})
		})
		b.WriteString(") AS " + joinedArgs + " ON ")
		keys()
		if w.update {
			set()
		}
		return b.String()
	}
	b.WriteString(w.head)
	if w.update {
		set()
		b.WriteString(" FROM (VALUES ")
	} else {
		b.WriteString(" USING (VALUES ")
	}
	list(n, ", ", func(k int) {
		b.WriteByte('(')
		list(params, ", ", func(i int) {
			b.WriteString("$" + strconv.Itoa(1+i+k*params) + "::" + types[i])
		})
		b.WriteByte(')')
	})
	b.WriteString(") AS " + joinedArgs + " (")
	list(params, ", ", func(i int) { b.WriteString("writeback_" + strconv.Itoa(i+1)) })
	b.WriteString(") WHERE ")
	keys()
	return b.String()
}
