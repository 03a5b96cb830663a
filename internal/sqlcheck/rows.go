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
	toks, err := lex(d, sql, lexOptions{})
	if err != nil {
		return RowInsert{}, false
	}
	if n := len(toks); n > 0 && toks[n-1].Kind == Punct && toks[n-1].Text == ";" {
		toks = toks[:n-1]
	}
	word := func(i int, w string) bool { return i < len(toks) && toks[i].Kind == Ident && toks[i].Text == w }
	punct := func(i int, s string) bool { return i < len(toks) && toks[i].Kind == Punct && toks[i].Text == s }
	// closing returns the index of the parenthesis closing the one at i.
	closing := func(i int) int {
		depth := 0
		for ; i < len(toks); i++ {
			switch {
			case punct(i, "("):
				depth++
			case punct(i, ")"):
				if depth--; depth == 0 {
					return i
				}
			case punct(i, ";"):
				return -1
			}
		}
		return -1
	}
	if !word(0, "insert") || !word(1, "into") || len(toks) < 3 || (toks[2].Kind != Ident && toks[2].Kind != QuotedIdent) {
		return RowInsert{}, false
	}
	i := 3
	if punct(i, ".") {
		return RowInsert{}, false
	}
	if punct(i, "(") { // the columns: names between commas
		for i++; ; i += 2 {
			if i >= len(toks) || (toks[i].Kind != Ident && toks[i].Kind != QuotedIdent) {
				return RowInsert{}, false
			}
			if punct(i+1, ")") {
				break
			}
			if !punct(i+1, ",") {
				return RowInsert{}, false
			}
		}
		i += 2
	}
	if !word(i, "values") || !punct(i+1, "(") {
		return RowInsert{}, false
	}
	start := i + 1
	end := closing(start)
	if end != len(toks)-1 {
		return RowInsert{}, false // a second row, ON …, or anything else after the row
	}
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
