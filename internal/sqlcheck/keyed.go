package sqlcheck

import (
	"strconv"
	"strings"
)

// KeyedWrite is a PostgreSQL UPDATE or DELETE that picks its rows by
// columns equal to placeholders and nothing else:
//
//	UPDATE [ONLY] t SET a = …, b = … WHERE k1 = $i AND k2 = $j …
//	DELETE FROM [ONLY] t WHERE k1 = $i AND k2 = $j …
//
// with no alias, no RETURNING, and no SET of a key column (k1, k2, …).
// Executions of one such statement whose key arguments are pairwise
// distinct touch disjoint sets of rows (a row's keys do not change, and it
// equals one tuple of key values at most), and each row is changed from
// its own values and one execution's arguments. So they change the store
// exactly as one statement that joins the table with a VALUES list of their
// arguments does (Rows), bar the order in which rows are locked and row
// triggers fire, and statement-level triggers firing once. Whether the key
// arguments are distinct is the caller's to check (Keys): only it knows the
// values.
type KeyedWrite struct {
	head   string  // up to the table: "UPDATE t", "DELETE FROM ONLY t"
	set    string  // UPDATE: " SET …" up to WHERE; "" for DELETE
	setPhs []Token // set's placeholders, Pos and End within set
	keys   []keyColumn
	update bool
}

// keyColumn is one k = $i of a KeyedWrite's WHERE: the column as written
// and the placeholder's number.
type keyColumn struct {
	col string
	arg int
}

// SingleKeyedWrite returns sql as a KeyedWrite; ok is false when sql is
// not one (or does not lex), and on MySQL, whose joined UPDATE evaluates
// its assignments in an order of its own. It does not check the statement
// otherwise: CheckDML does, when the session commits.
func SingleKeyedWrite(d Dialect, sql string) (w KeyedWrite, ok bool) {
	if d != Postgres {
		return KeyedWrite{}, false
	}
	toks, err := lex(d, sql, lexOptions{})
	if err != nil {
		return KeyedWrite{}, false
	}
	if n := len(toks); n > 0 && toks[n-1].Kind == Punct && toks[n-1].Text == ";" {
		toks = toks[:n-1]
	}
	p := &parser{d: d, toks: toks, funcs: map[string]bool{}}
	switch {
	case p.accept("update"):
		w.update = true
	case p.accept("delete") && p.accept("from"):
	default:
		return KeyedWrite{}, false
	}
	p.accept("only")
	tbl, err := p.name("a table")
	if err != nil || p.isP(".") {
		return KeyedWrite{}, false
	}
	w.head = sql[:tbl.End]
	p.quals = []Token{tbl}
	assigned := map[string]bool{}
	if w.update {
		setAt := p.i
		if !p.accept("set") {
			return KeyedWrite{}, false
		}
		for {
			if p.column() != nil {
				return KeyedWrite{}, false
			}
			assigned[toks[p.i-1].Text] = true // the column's own name, qualified or not
			if !p.acceptP("=") || p.expr() != nil {
				return KeyedWrite{}, false
			}
			if !p.acceptP(",") {
				break
			}
		}
		if !p.is("where") {
			return KeyedWrite{}, false
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
		if err != nil || assigned[col.Text] || !p.acceptP("=") {
			return KeyedWrite{}, false
		}
		ph := p.peek()
		if ph.Kind != Placeholder {
			return KeyedWrite{}, false
		}
		p.i++
		n, _ := strconv.Atoi(ph.Text) // lexed: digits
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
// after another: each has params of them, whose PostgreSQL types are
// types (a cast each, so that the VALUES columns have the types the
// executions' placeholders have). With n = 1 it is still the joined form.
func (w KeyedWrite) Rows(n, params int, types []string) string {
	var b strings.Builder
	b.WriteString(w.head)
	if w.update {
		at := 0
		for _, t := range w.setPhs {
			b.WriteString(w.set[at:t.Pos])
			b.WriteString(joinedArgs + ".writeback_" + t.Text)
			at = t.End
		}
		b.WriteString(w.set[at:])
		b.WriteString(" FROM (VALUES ")
	} else {
		b.WriteString(" USING (VALUES ")
	}
	for k := range n {
		if k > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for i := range params {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(1 + i + k*params))
			b.WriteString("::")
			b.WriteString(types[i])
		}
		b.WriteByte(')')
	}
	b.WriteString(") AS " + joinedArgs + " (")
	for i := range params {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("writeback_" + strconv.Itoa(i+1))
	}
	b.WriteString(") WHERE ")
	for i, k := range w.keys {
		if i > 0 {
			b.WriteString(" AND ")
		}
		b.WriteString(k.col + " = " + joinedArgs + ".writeback_" + strconv.Itoa(k.arg))
	}
	return b.String()
}
