// Package sqlcheck decides whether a session's SQL statement may be run
// later by an applier: one parameterised INSERT, UPDATE or DELETE of one
// table its queue declares, whose values all come through placeholders. It
// also checks the parameterised SELECTs of mapping plugins. It lexes SQL
// in PostgreSQL's or MySQL's dialect and parses no more than it must; it
// does no I/O.
//
// It errs on the side of refusing: string literals, comments, subqueries,
// other tables (FROM, JOIN, USING, a second INTO), several statements and
// functions outside a short allowlist are refused, with a sentence saying
// what to do instead. Such a statement could read or write what the queue
// does not order, or smuggle values past the placeholders.
package sqlcheck

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
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

// Kind is the kind of a token.
type Kind int

// Token kinds.
const (
	Ident       Kind = iota // a name or keyword; Text is folded to lower case unless quoted
	QuotedIdent             // a quoted name, Text unquoted and exact
	Number
	Placeholder // $n or ?; Text is the number (1-based) for $n, "?" for ?
	String      // a string literal (only when allowed)
	Punct       // operators and punctuation: ( ) , . ; = < > + - * / % etc.
)

// Token is one lexeme.
type Token struct {
	Kind Kind
	Text string
	Pos  int // byte offset
}

// lexOptions tune Lex.
type lexOptions struct {
	strings bool // allow string literals (trusted mapping queries)
}

// Lex splits sql into tokens. Comments and, unless allowed, string
// literals are refused.
func lex(d Dialect, sql string, o lexOptions) ([]Token, error) {
	if !utf8.ValidString(sql) {
		return nil, refuse("the statement is not valid UTF-8")
	}
	var out []Token
	i := 0
	for i < len(sql) {
		c := sql[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case c == '-' && strings.HasPrefix(sql[i:], "--"), c == '/' && strings.HasPrefix(sql[i:], "/*"), c == '#' && d == MySQL:
			return nil, refuse("the statement contains a comment at byte %d; remove it", i)
		case c == '\'' || (c == '"' && d == MySQL) || ((c == 'E' || c == 'e') && d == Postgres && i+1 < len(sql) && sql[i+1] == '\''):
			if !o.strings {
				return nil, refuse("the statement contains a string literal at byte %d; pass values as arguments through placeholders (%s)", i, placeholderHint(d))
			}
			start := i
			q := c
			if c == 'E' || c == 'e' {
				i++
				q = '\''
			}
			i++
			for {
				if i >= len(sql) {
					return nil, refuse("the string literal at byte %d is not closed", start)
				}
				if sql[i] == '\\' && (d == MySQL || c == 'E' || c == 'e') {
					i += 2
					continue
				}
				if sql[i] == q {
					if i+1 < len(sql) && sql[i+1] == q {
						i += 2
						continue
					}
					i++
					break
				}
				i++
			}
			out = append(out, Token{Kind: String, Text: sql[start:i], Pos: start})
		case c == '"' && d == Postgres, c == '`' && d == MySQL:
			start := i
			var b strings.Builder
			i++
			for {
				if i >= len(sql) {
					return nil, refuse("the quoted name at byte %d is not closed", start)
				}
				if sql[i] == c {
					if i+1 < len(sql) && sql[i+1] == c {
						b.WriteByte(c)
						i += 2
						continue
					}
					i++
					break
				}
				b.WriteByte(sql[i])
				i++
			}
			out = append(out, Token{Kind: QuotedIdent, Text: b.String(), Pos: start})
		case c == '$' && d == Postgres:
			j := i + 1
			for j < len(sql) && sql[j] >= '0' && sql[j] <= '9' {
				j++
			}
			if j == i+1 {
				return nil, refuse("the statement contains a dollar-quoted string or a stray $ at byte %d; use placeholders $1, $2 … for values", i)
			}
			out = append(out, Token{Kind: Placeholder, Text: sql[i+1 : j], Pos: i})
			i = j
		case c == '?':
			if d != MySQL {
				return nil, refuse("placeholder ? at byte %d is MySQL's; this store is PostgreSQL, use $1, $2 …", i)
			}
			out = append(out, Token{Kind: Placeholder, Text: "?", Pos: i})
			i++
		case c >= '0' && c <= '9' || (c == '.' && i+1 < len(sql) && sql[i+1] >= '0' && sql[i+1] <= '9'):
			start := i
			for i < len(sql) && (isDigit(sql[i]) || sql[i] == '.' || sql[i] == 'e' || sql[i] == 'E' ||
				((sql[i] == '+' || sql[i] == '-') && (sql[i-1] == 'e' || sql[i-1] == 'E'))) {
				i++
			}
			if i < len(sql) && isIdentStart(rune(sql[i])) {
				return nil, refuse("malformed number at byte %d", start)
			}
			out = append(out, Token{Kind: Number, Text: sql[start:i], Pos: start})
		case isIdentStart(rune(c)) || c >= utf8.RuneSelf:
			start := i
			for i < len(sql) {
				r, n := utf8.DecodeRuneInString(sql[i:])
				if !isIdentPart(r) {
					break
				}
				i += n
			}
			if i == start {
				return nil, refuse("unexpected character %q at byte %d", sql[i:i+1], i)
			}
			out = append(out, Token{Kind: Ident, Text: strings.ToLower(sql[start:i]), Pos: start})
		case strings.ContainsRune("(),.;=<>+-*/%!|&^~:[]@", rune(c)):
			out = append(out, Token{Kind: Punct, Text: string(c), Pos: i})
			i++
		default:
			return nil, refuse("unexpected character %q at byte %d", string(c), i)
		}
	}
	return out, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isIdentStart(r rune) bool { return r == '_' || unicode.IsLetter(r) }

func isIdentPart(r rune) bool {
	return r == '_' || r == '$' || unicode.IsLetter(r) || unicode.IsDigit(r)
}

func placeholderHint(d Dialect) string {
	if d == MySQL {
		return "?"
	}
	return "$1, $2 …"
}

// refused are keywords no session statement may contain: they read or
// write other tables, or combine statements.
var refused = map[string]string{
	"select":    "subqueries are not allowed; pass the values the statement needs as arguments",
	"from":      "other tables are not allowed (FROM); a session statement changes one declared table",
	"join":      "joins are not allowed; a session statement changes one declared table",
	"using":     "USING is not allowed; a session statement changes one declared table",
	"into":      "only INSERT INTO names a table",
	"with":      "WITH is not allowed",
	"table":     "TABLE is not allowed",
	"union":     "UNION is not allowed",
	"returning": "RETURNING is pointless in a session: its statements run later, on an applier",
	"call":      "CALL is not allowed",
	"do":        "DO is only allowed in ON CONFLICT … DO UPDATE | DO NOTHING",
	"lock":      "LOCK is not allowed",
	"outfile":   "OUTFILE is not allowed",
	"dumpfile":  "DUMPFILE is not allowed",
}

// functions are the functions a session statement may call: pure ones over
// its own row and arguments.
var functions = map[string]bool{
	"coalesce": true, "nullif": true, "greatest": true, "least": true, "abs": true, "round": true,
	"floor": true, "ceil": true, "ceiling": true, "mod": true, "sign": true, "trunc": true, "truncate": true,
	"lower": true, "upper": true, "length": true, "char_length": true, "concat": true, "substring": true, "substr": true,
	"trim": true, "ltrim": true, "rtrim": true, "replace": true, "cast": true, "convert": true,
	"now": true, "current_timestamp": true, "current_date": true, "localtimestamp": true, "utc_timestamp": true,
	"jsonb_set": true, "json_set": true, "jsonb_insert": true, "json_insert": true, "json_replace": true,
	"json_array_append": true, "json_remove": true, "to_jsonb": true, "jsonb_build_object": true, "json_object": true,
	"json_array": true, "jsonb_build_array": true,
	"values": true, // MySQL: ON DUPLICATE KEY UPDATE c = VALUES(c)
	"in":     true, // IN (…) is not a call but looks like one
	"row":    true,
}

// Statement is what CheckDML found: the statement's verb and table.
type Statement struct {
	Verb  string // insert, update, delete
	Table string
}

// CheckDML checks that sql is one INSERT, UPDATE or DELETE of a table in
// tables (unquoted names compare case-insensitively), with exactly nargs
// arguments for its placeholders, values only through placeholders, no
// other table and only allowlisted functions.
func CheckDML(d Dialect, sql string, tables []string, nargs int) (Statement, error) {
	toks, err := lex(d, sql, lexOptions{})
	if err != nil {
		return Statement{}, err
	}
	if n := len(toks); n > 0 && toks[n-1].Kind == Punct && toks[n-1].Text == ";" {
		toks = toks[:n-1]
	}
	if len(toks) == 0 {
		return Statement{}, refuse("the statement is empty")
	}
	var st Statement
	i := 0
	expect := func(word string) error {
		if i >= len(toks) || toks[i].Kind != Ident || toks[i].Text != word {
			return refuse("expected %s after %s", strings.ToUpper(word), strings.ToUpper(st.Verb))
		}
		i++
		return nil
	}
	if toks[0].Kind != Ident {
		return Statement{}, refuse("the statement must be an INSERT, UPDATE or DELETE")
	}
	st.Verb = toks[0].Text
	i = 1
	switch st.Verb {
	case "insert":
		if err := expect("into"); err != nil {
			return Statement{}, err
		}
	case "update":
		if i < len(toks) && toks[i].Kind == Ident && (toks[i].Text == "low_priority" || toks[i].Text == "ignore" || toks[i].Text == "only") {
			i++
		}
	case "delete":
		if err := expect("from"); err != nil {
			return Statement{}, err
		}
	default:
		return Statement{}, refuse("%s statements are not allowed in a session; use INSERT, UPDATE or DELETE", strings.ToUpper(toks[0].Text))
	}
	if i >= len(toks) || (toks[i].Kind != Ident && toks[i].Kind != QuotedIdent) {
		return Statement{}, refuse("%s names no table", strings.ToUpper(st.Verb))
	}
	if i+1 < len(toks) && toks[i+1].Kind == Punct && toks[i+1].Text == "." {
		return Statement{}, refuse("qualified table names (%s.…) are not allowed; name a table the queue declares", toks[i].Text)
	}
	name := toks[i]
	st.Table = declared(name, tables)
	if st.Table == "" {
		return Statement{}, refuse("table %s is not declared for this queue; declare it under queues.<family>.tables or change a declared table (%s)", name.Text, strings.Join(tables, ", "))
	}
	tableAt := i
	i++
	if st.Verb == "update" && i < len(toks) && toks[i].Kind == Punct && toks[i].Text == "," {
		return Statement{}, refuse("UPDATE of several tables is not allowed; a session statement changes one declared table")
	}
	maxPH, qmarks := 0, 0
	for j := i; j < len(toks); j++ {
		t := toks[j]
		switch t.Kind {
		case Punct:
			if t.Text == ";" {
				return Statement{}, refuse("the statement holds more than one statement (;); send each as its own entry of statements")
			}
		case Placeholder:
			if t.Text == "?" {
				qmarks++
				continue
			}
			n, err := strconv.Atoi(t.Text)
			if err != nil || n < 1 || n > 65535 {
				return Statement{}, refuse("placeholder $%s is out of range", t.Text)
			}
			maxPH = max(maxPH, n)
		case Ident:
			if why, bad := refused[t.Text]; bad {
				if t.Text == "do" && j > 0 && toks[j-1].Kind == Ident && toks[j-1].Text == "conflict" {
					continue
				}
				if t.Text == "do" && j > 0 && toks[j-1].Kind == Punct && toks[j-1].Text == ")" && onConflict(toks, j) {
					continue
				}
				return Statement{}, refuse("%s at byte %d: %s", strings.ToUpper(t.Text), t.Pos, why)
			}
			if j+1 < len(toks) && toks[j+1].Kind == Punct && toks[j+1].Text == "(" {
				if st.Verb == "insert" && j-1 == tableAt {
					continue // the column list
				}
				if functions[t.Text] || t.Text == "conflict" || t.Text == "set" {
					continue
				}
				if p := toks[j-1]; (p.Kind == Ident && p.Text == "as") || (p.Kind == Punct && p.Text == ":") {
					continue // a type with a modifier: CAST(x AS numeric(10, 2)), x::varchar(20)
				}
				return Statement{}, refuse("function %s is not allowed in a session statement; compute the value in the application and pass it as an argument", t.Text)
			}
		}
	}
	want := maxPH
	if d == MySQL {
		want = qmarks
	}
	if want != nargs {
		return Statement{}, refuse("the statement has %d placeholders and %d arguments; pass one argument per placeholder", want, nargs)
	}
	return st, nil
}

// onConflict reports whether the DO at j follows ON CONFLICT (…).
func onConflict(toks []Token, j int) bool {
	depth := 0
	for k := j - 1; k >= 1; k-- {
		t := toks[k]
		if t.Kind == Punct && t.Text == ")" {
			depth++
		} else if t.Kind == Punct && t.Text == "(" {
			depth--
			if depth == 0 {
				return toks[k-1].Kind == Ident && toks[k-1].Text == "conflict"
			}
		}
	}
	return false
}

// declared returns the declared table tok names, or "".
func declared(tok Token, tables []string) string {
	for _, t := range tables {
		if tok.Kind == QuotedIdent && tok.Text == t {
			return t
		}
		if tok.Kind == Ident && strings.EqualFold(tok.Text, t) {
			return t
		}
	}
	return ""
}

// Placeholders counts the parameters of a trusted query (a mapping's
// SELECT, string literals allowed): the highest $n for PostgreSQL, the
// number of ? for MySQL. It refuses several statements and comments.
func Placeholders(d Dialect, sql string) (int, error) {
	toks, err := lex(d, sql, lexOptions{strings: true})
	if err != nil {
		return 0, err
	}
	if n := len(toks); n > 0 && toks[n-1].Kind == Punct && toks[n-1].Text == ";" {
		toks = toks[:n-1]
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
