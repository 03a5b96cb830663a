package sqlcheck

import "strconv"

// RowInsert is a plain single-row INSERT: INSERT INTO table [(column, …)]
// VALUES (…) and nothing else — no IGNORE, no ON CONFLICT or ON
// DUPLICATE KEY, one row, and no clock in it (MySQL reads NOW() once per
// statement). Executions of one such statement in a row change the store
// as one INSERT of their rows, in the same order, does (bar
// statement-level triggers, which fire once instead of once per row): the
// appliers send them so (Rows).
type RowInsert struct {
	d    Dialect
	head string  // the statement up to its row: "INSERT INTO t (a, b) VALUES "
	row  string  // the row: "(" … ")"
	phs  []Token // the row's placeholders, Pos and End within row
}

// SingleRowInsert returns sql as a RowInsert; ok is false when sql is not
// a plain single-row INSERT (or does not lex). It does not check the
// statement otherwise: CheckDML does, when the session commits.
func SingleRowInsert(d Dialect, sql string) (r RowInsert, ok bool) {
	toks, err := lexStatement(d, sql, lexOptions{})
	if err != nil {
		return RowInsert{}, false
	}
	p := &parser{d: d, toks: toks, funcs: map[string]bool{}}
	if !p.accept("insert") || !p.accept("into") {
		return RowInsert{}, false
	}
	if t := p.peek(); t.Kind != Ident && t.Kind != QuotedIdent {
		return RowInsert{}, false
	}
	p.i++
	if p.isP("(") { // the columns: names between commas, as CheckDML takes them
		if p.list(func() error { _, err := p.name("a column"); return err }) != nil {
			return RowInsert{}, false
		}
	}
	start := p.i + 1
	if !p.accept("values") || p.list(p.expr) != nil || !p.done() {
		return RowInsert{}, false // no row, or a second row, ON …, anything after the row
	}
	end := p.i - 1
	from, to := toks[start].Pos, toks[end].End
	r = RowInsert{d: d, head: sql[:from], row: sql[from:to]}
	for _, t := range toks[start:end] {
		if t.Kind == Ident && clocks[t.Text] {
			return RowInsert{}, false
		}
		if t.Kind == Placeholder {
			t.Pos, t.End = t.Pos-from, t.End-from
			r.phs = append(r.phs, t)
		}
	}
	return r, true
}

// Rows returns the INSERT of n executions' rows, for their arguments one
// after another: each execution has params of them. PostgreSQL's $i of the
// k-th row (from 0) becomes $(i + k·params); MySQL's ? are positional and
// stay as they are. With n = 1 it is the statement itself, up to its row.
func (r RowInsert) Rows(n, params int) string {
	b := make([]byte, 0, len(r.head)+n*(len(r.row)+2))
	b = append(b, r.head...)
	for k := range n {
		if k > 0 {
			b = append(b, ", "...)
		}
		if r.d == MySQL || k == 0 {
			b = append(b, r.row...)
			continue
		}
		at := 0
		for _, t := range r.phs {
			i, _ := strconv.Atoi(t.Text) // lexed: digits
			b = append(b, r.row[at:t.Pos]...)
			b = append(b, '$')
			b = strconv.AppendInt(b, int64(i+k*params), 10)
			at = t.End
		}
		b = append(b, r.row[at:]...)
	}
	return string(b)
}

// clocks are the functions whose value depends on when a statement runs.
var clocks = map[string]bool{
	"now": true, "utc_timestamp": true, "current_timestamp": true, "current_date": true,
	"localtimestamp": true, "current_time": true, "localtime": true,
}
