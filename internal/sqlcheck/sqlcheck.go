// Package sqlcheck decides whether a session's SQL statement may be run
// later by an applier: one parameterised INSERT, UPDATE or DELETE of one
// table its queue declares, whose values all come through placeholders. It
// also checks the parameterised SELECTs of mapping plugins. It lexes SQL
// in PostgreSQL's or MySQL's dialect and does no I/O.
//
// A session statement is an allow-list: it must fit a small grammar
// (parser, in dml.go) whose names are the declared table, its alias,
// columns, and functions and cast types of short lists (words.go). Any
// other token is refused: string literals, comments, quoted or qualified
// function names, subqueries, other tables, array subscripts, variables,
// several statements, unknown operators. A refusal is one sentence saying
// what to do instead. Such a statement could read or write what the queue
// does not order, call what the sidecar's database role may call, or
// smuggle values past the placeholders.
package sqlcheck

import (
	"fmt"
	"strconv"
	"strings"
)

// Dialect is the SQL flavour of a store.
type Dialect string

// Dialects.
const (
	Postgres Dialect = "postgres" // placeholders $1, $2 …; "quoted" identifiers
	MySQL    Dialect = "mysql"    // placeholders ?; `quoted` identifiers
)

// Error is a statement refused, with one sentence saying why.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func refuse(format string, args ...any) error { return &Error{Msg: fmt.Sprintf(format, args...)} }

// Statement is what CheckDML found: the statement's verb, its table and
// the functions it calls.
type Statement struct {
	Verb      string // insert, update, delete
	Table     string
	Functions []string // sorted, from the allow-list
}

// CheckDML checks that sql is one INSERT, UPDATE or DELETE of a table in
// tables, in the grammar of parser (an allow-list), with exactly nargs
// arguments for its placeholders, values only through placeholders, no
// other table and only allowlisted functions and types.
//
// Table names compare as the database resolves them: a quoted name
// exactly; an unquoted one on PostgreSQL folded to lower case, then
// exactly (declare the table as PostgreSQL stores its name); on MySQL
// exactly (table names are case-sensitive on Linux).
func CheckDML(d Dialect, sql string, tables []string, nargs int) (Statement, error) {
	if d != Postgres && d != MySQL {
		return Statement{}, refuse("unknown SQL dialect %q", d)
	}
	toks, err := lexStatement(d, sql, lexOptions{})
	if err != nil {
		return Statement{}, err
	}
	if len(toks) == 0 {
		return Statement{}, refuse("the statement is empty")
	}
	if toks[0].Kind != Ident {
		return Statement{}, refuse("the statement must be an INSERT, UPDATE or DELETE")
	}
	p := &parser{d: d, toks: toks, i: 1, funcs: map[string]bool{}}
	st := Statement{Verb: toks[0].Text}
	switch st.Verb {
	case "insert":
		if d == MySQL {
			p.accept("ignore")
		}
		if !p.accept("into") {
			return Statement{}, refuse("expected INTO after INSERT")
		}
	case "update":
		if d == Postgres {
			p.accept("only")
		} else {
			p.accept("low_priority")
			p.accept("ignore")
		}
	case "delete":
		if !p.accept("from") {
			return Statement{}, refuse("expected FROM after DELETE")
		}
		if d == Postgres {
			p.accept("only")
		}
	default:
		return Statement{}, refuse("%s statements are not allowed in a session; use INSERT, UPDATE or DELETE", strings.ToUpper(toks[0].Text))
	}
	if err := prescan(toks, p.i); err != nil {
		return Statement{}, err
	}
	tbl := p.peek()
	if tbl.Kind != Ident && tbl.Kind != QuotedIdent {
		return Statement{}, refuse("%s names no table", strings.ToUpper(st.Verb))
	}
	if p.peekAt(1).Kind == Punct && p.peekAt(1).Text == "." {
		return Statement{}, refuse("qualified table names (%s.…) are not allowed; name a table the queue declares", tbl.Text)
	}
	st.Table = declared(d, sql, tbl, tables)
	if st.Table == "" {
		name := describeName(tbl)
		if d == MySQL && tbl.Kind == Ident {
			name = sql[tbl.Pos:tbl.End]
		}
		return Statement{}, refuse("table %s is not declared for this queue; declare it under queues.<family>.tables or change a declared table (%s)", name, strings.Join(tables, ", "))
	}
	p.i++
	p.quals = []Token{tbl}
	switch st.Verb {
	case "insert":
		err = p.insert(st.Table)
	case "update":
		err = p.update()
	case "delete":
		err = p.delete()
	}
	if err != nil {
		return Statement{}, err
	}
	if !p.done() {
		return Statement{}, p.unexpected("the end of the statement")
	}
	want := p.maxPH
	if d == MySQL {
		want = p.qmarks
	}
	if want != nargs {
		return Statement{}, refuse("the statement has %d placeholders and %d arguments; pass one argument per placeholder", want, nargs)
	}
	st.Functions = p.functionsUsed()
	return st, nil
}

// prescan refuses, with their own sentence, the words that reach beyond
// the statement's table (the parser would refuse them anyway): a clearer
// answer than the parser's first unexpected token.
func prescan(toks []Token, from int) error {
	for j := from; j < len(toks); j++ {
		t := toks[j]
		if t.Kind == Punct && t.Text == ";" {
			return refuse("the statement holds more than one statement (;); send each as its own entry of statements")
		}
		if t.Kind != Ident {
			continue
		}
		why := refused[t.Text]
		prev := ""
		if j > 0 && toks[j-1].Kind == Ident {
			prev = toks[j-1].Text
		}
		if why == "" || (t.Text == "from" && prev == "distinct") || (t.Text == "with" && (prev == "timestamp" || prev == "time")) {
			continue
		}
		return refuse("%s at byte %d: %s", strings.ToUpper(t.Text), t.Pos, why)
	}
	return nil
}

func (p *parser) insert(table string) error {
	if p.d == Postgres {
		if err := p.alias(true); err != nil {
			return err
		}
	}
	if p.isP("(") {
		if err := p.list(func() error { _, err := p.name("a column"); return err }); err != nil {
			return err
		}
	}
	if p.d == Postgres && p.accept("default") {
		if !p.accept("values") {
			return p.unexpected("VALUES after DEFAULT")
		}
	} else {
		if !p.accept("values") && !(p.d == MySQL && p.accept("value")) {
			if p.isP(",") {
				return refuse("INSERT into several tables is not allowed; a session statement changes one declared table")
			}
			return p.unexpected("VALUES")
		}
		for {
			if err := p.list(p.expr); err != nil {
				return err
			}
			if !p.acceptP(",") {
				break
			}
		}
	}
	if !p.accept("on") {
		return nil
	}
	if p.d == MySQL {
		if !p.accept("duplicate") || !p.accept("key") || !p.accept("update") {
			return p.unexpected("DUPLICATE KEY UPDATE after ON")
		}
		return p.assigns()
	}
	if !p.accept("conflict") {
		return p.unexpected("CONFLICT after ON")
	}
	if p.accept("on") {
		if !p.accept("constraint") {
			return p.unexpected("CONSTRAINT after ON CONFLICT ON")
		}
		if _, err := p.name("a constraint's name"); err != nil {
			return err
		}
	} else if p.isP("(") {
		if err := p.list(p.expr); err != nil {
			return err
		}
		if err := p.where(); err != nil {
			return err
		}
	}
	if !p.accept("do") {
		return p.unexpected("DO after ON CONFLICT")
	}
	if p.accept("nothing") {
		return nil
	}
	if !p.accept("update") || !p.accept("set") {
		return p.unexpected("NOTHING or UPDATE SET after DO")
	}
	p.quals = append(p.quals, Token{Kind: Ident, Text: "excluded"})
	if err := p.assigns(); err != nil {
		return err
	}
	return p.where()
}

func (p *parser) update() error {
	if err := p.alias(false); err != nil {
		return err
	}
	if p.isP(",") {
		return refuse("UPDATE of several tables is not allowed; a session statement changes one declared table")
	}
	if !p.accept("set") {
		return p.unexpected("SET")
	}
	if err := p.assigns(); err != nil {
		return err
	}
	if err := p.where(); err != nil {
		return err
	}
	return p.orderLimit()
}

func (p *parser) delete() error {
	if err := p.alias(false); err != nil {
		return err
	}
	if p.isP(",") {
		return refuse("DELETE from several tables is not allowed; a session statement changes one declared table")
	}
	if err := p.where(); err != nil {
		return err
	}
	return p.orderLimit()
}

// declared returns the declared table tok names, or "": quoted names and
// PostgreSQL's unquoted ones (folded) by their text, MySQL's unquoted ones
// as written (MySQL does not fold table names on Linux).
func declared(d Dialect, sql string, tok Token, tables []string) string {
	name := tok.Text
	if d == MySQL && tok.Kind == Ident {
		name = sql[tok.Pos:tok.End]
	}
	for _, t := range tables {
		if name == t {
			return t
		}
	}
	return ""
}

func describeName(t Token) string {
	if t.Kind == QuotedIdent {
		return strconv.Quote(t.Text)
	}
	return t.Text
}

// Placeholders counts the parameters of a trusted query (a mapping's
// SELECT, string literals allowed): the highest $n for PostgreSQL, the
// number of ? for MySQL. It refuses several statements and comments.
func Placeholders(d Dialect, sql string) (int, error) {
	toks, err := lexStatement(d, sql, lexOptions{strings: true})
	if err != nil {
		return 0, err
	}
	if len(toks) == 0 {
		return 0, refuse("the query is empty")
	}
	if toks[0].Kind != Ident || (toks[0].Text != "select" && toks[0].Text != "with") {
		return 0, refuse("the query must be a SELECT")
	}
	n := 0
	for _, t := range toks {
		switch {
		case t.Kind == Punct && t.Text == ";":
			return 0, refuse("the query holds more than one statement (;)")
		case t.Kind == Placeholder && t.Text == "?":
			n++
		case t.Kind == Placeholder:
			k, err := strconv.Atoi(t.Text)
			if err != nil {
				return 0, refuse("placeholder $%s is out of range", t.Text)
			}
			n = max(n, k)
		}
	}
	return n, nil
}
