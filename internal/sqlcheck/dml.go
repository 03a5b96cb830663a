package sqlcheck

import (
	"sort"
	"strconv"
	"strings"
)

// parser checks a session statement against the grammar below, token by
// token: what it does not recognise is refused.
//
//	insert  = INSERT [IGNORE¹] INTO table [AS alias²] [(column, …)]
//	          (VALUES | VALUE¹) (expr, …), … | DEFAULT VALUES²
//	          [ON CONFLICT² [(expr, …) [WHERE expr] | ON CONSTRAINT name]
//	              DO NOTHING | DO UPDATE SET assign, … [WHERE expr]]
//	          [ON DUPLICATE KEY UPDATE¹ assign, …]
//	update  = UPDATE [ONLY² | LOW_PRIORITY¹ | IGNORE¹] table [[AS] alias]
//	          SET assign, … [WHERE expr] [ORDER BY¹ …] [LIMIT¹ n]
//	delete  = DELETE FROM [ONLY²] table [[AS] alias] [WHERE expr] [ORDER BY¹ …] [LIMIT¹ n]
//	assign  = column = expr
//	expr    = operand { binop operand | IS [NOT] (NULL | TRUE | FALSE | UNKNOWN | DISTINCT FROM operand)
//	          | [NOT] IN (expr, …) | [NOT] (BETWEEN | LIKE | ILIKE²) operand | ::type² }
//	operand = [- | + | NOT]… (placeholder | number | NULL | TRUE | FALSE | DEFAULT | niladic
//	          | column | (expr, …) | CASE … END | CAST(expr AS type) | function(expr, …) | VALUES(column)¹)
//	column  = name | qualifier.name   (qualifier: the table, its alias, EXCLUDED²)
//
// ¹ MySQL only, ² PostgreSQL only. Names are unquoted or quoted; a
// function's name is unquoted and unqualified.
type parser struct {
	d      Dialect
	toks   []Token
	i      int
	quals  []Token // names a column may be qualified with
	funcs  map[string]bool
	maxPH  int
	qmarks int
}

func (p *parser) peek() Token {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return Token{Kind: Punct, Text: "", Pos: -1}
}

func (p *parser) peekAt(k int) Token {
	if p.i+k < len(p.toks) {
		return p.toks[p.i+k]
	}
	return Token{Kind: Punct, Text: "", Pos: -1}
}

func (p *parser) done() bool { return p.i >= len(p.toks) }

// is reports whether the next token is keyword w.
func (p *parser) is(w string) bool { t := p.peek(); return t.Kind == Ident && t.Text == w }

// isP reports whether the next token is punctuation s.
func (p *parser) isP(s string) bool { t := p.peek(); return t.Kind == Punct && t.Text == s }

// accept consumes keyword w if it is next.
func (p *parser) accept(w string) bool {
	if p.is(w) {
		p.i++
		return true
	}
	return false
}

func (p *parser) acceptP(s string) bool {
	if p.isP(s) {
		p.i++
		return true
	}
	return false
}

// unexpected refuses the next token with a sentence saying why.
func (p *parser) unexpected(what string) error {
	if p.done() {
		return refuse("the statement ends where %s was expected", what)
	}
	t := p.peek()
	switch {
	case t.Kind == Punct && t.Text == ";":
		return refuse("the statement holds more than one statement (;); send each as its own entry of statements")
	case t.Kind == Ident && refused[t.Text] != "":
		return refuse("%s at byte %d: %s", strings.ToUpper(t.Text), t.Pos, refused[t.Text])
	case t.Kind == Punct && (t.Text == "[" || t.Text == "]" || t.Text == ":"):
		return refuse("%q at byte %d is not allowed: array subscripts, slices and variables are not part of a session statement", t.Text, t.Pos)
	case t.Kind == Punct && strings.IndexByte(opChars, t.Text[0]) >= 0:
		return refuse("operator %s at byte %d is not allowed; use + - * / %% || = < > <= >= <> !=", t.Text, t.Pos)
	}
	return refuse("unexpected %s at byte %d where %s was expected", describe(t), t.Pos, what)
}

func describe(t Token) string {
	switch t.Kind {
	case QuotedIdent:
		return strconv.Quote(t.Text)
	case Placeholder:
		return "placeholder"
	case Number:
		return "number " + t.Text
	}
	return strings.ToUpper(t.Text)
}

// name consumes a plain name (a column or an alias): an unquoted word that
// is not a keyword, or a quoted name.
func (p *parser) name(what string) (Token, error) {
	t := p.peek()
	if t.Kind == QuotedIdent || (t.Kind == Ident && !reserved[t.Text] && refused[t.Text] == "") {
		p.i++
		return t, nil
	}
	return Token{}, p.unexpected(what)
}

// same reports whether two name tokens name the same thing in the
// dialect: quoted names exactly, PostgreSQL's unquoted ones folded.
func same(a, b Token) bool { return a.Text == b.Text }

// column consumes a column reference: name or qualifier.name, never
// followed by ( or another dot.
func (p *parser) column() error {
	t, err := p.name("a column")
	if err != nil {
		return err
	}
	if p.isP(".") {
		ok := false
		for _, q := range p.quals {
			ok = ok || same(q, t)
		}
		if !ok {
			return refuse("%s.… at byte %d: a column may be qualified only by the statement's table or its alias", t.Text, t.Pos)
		}
		p.i++
		if _, err := p.name("a column after " + t.Text + "."); err != nil {
			return err
		}
	}
	if p.isP("(") {
		return refuse("%s at byte %d is called like a function; functions are called by their plain, unquoted name", describe(t), t.Pos)
	}
	if p.isP(".") {
		return refuse("the name at byte %d has more than two parts; name a column or table.column", t.Pos)
	}
	return nil
}

// list consumes "(" item, … ")".
func (p *parser) list(item func() error) error {
	if !p.acceptP("(") {
		return p.unexpected("(")
	}
	for {
		if err := item(); err != nil {
			return err
		}
		if p.acceptP(")") {
			return nil
		}
		if !p.acceptP(",") {
			return p.unexpected(", or )")
		}
	}
}

func (p *parser) expr() error {
	for {
		if err := p.operand(); err != nil {
			return err
		}
	postfix:
		t := p.peek()
		switch {
		case t.Kind == Punct && operators[t.Text]:
			p.i++
			continue
		case p.is("and") || p.is("or") || p.is("between") || p.is("like") || (p.d == Postgres && p.is("ilike")) ||
			(p.d == MySQL && (p.is("div") || p.is("mod") || p.is("xor"))):
			p.i++
			continue
		case p.is("not"):
			p.i++
			if p.accept("in") {
				if err := p.list(p.expr); err != nil {
					return err
				}
				goto postfix
			}
			if p.accept("between") || p.accept("like") || (p.d == Postgres && p.accept("ilike")) {
				continue
			}
			return p.unexpected("IN, BETWEEN or LIKE after NOT")
		case p.is("in"):
			p.i++
			if err := p.list(p.expr); err != nil {
				return err
			}
			goto postfix
		case p.is("is"):
			p.i++
			p.accept("not")
			if p.accept("null") || p.accept("true") || p.accept("false") || p.accept("unknown") {
				goto postfix
			}
			if p.accept("distinct") {
				if !p.accept("from") {
					return p.unexpected("FROM after IS DISTINCT")
				}
				continue
			}
			return p.unexpected("NULL, TRUE, FALSE, UNKNOWN or DISTINCT FROM after IS")
		case t.Kind == Punct && t.Text == "::" && p.d == Postgres:
			p.i++
			if err := p.typeName(); err != nil {
				return err
			}
			goto postfix
		}
		return nil
	}
}

// operand consumes one operand of an expression.
func (p *parser) operand() error {
	for p.isP("-") || p.isP("+") || p.is("not") {
		p.i++
	}
	t := p.peek()
	switch t.Kind {
	case Placeholder:
		p.i++
		if t.Text == "?" {
			p.qmarks++
			return nil
		}
		n, err := strconv.Atoi(t.Text)
		if err != nil || n < 1 || n > 65535 {
			return refuse("placeholder $%s is out of range", t.Text)
		}
		p.maxPH = max(p.maxPH, n)
		return nil
	case Number:
		p.i++
		return nil
	case Punct:
		if t.Text == "(" {
			return p.list(p.expr)
		}
		return p.unexpected("a value")
	case QuotedIdent:
		return p.column()
	}
	// An unquoted word.
	next := p.peekAt(1)
	call := next.Kind == Punct && next.Text == "("
	switch {
	case t.Text == "null" || t.Text == "true" || t.Text == "false" || t.Text == "default":
		p.i++
		return nil
	case t.Text == "case":
		return p.caseExpr()
	case t.Text == "cast" && call:
		p.i += 2
		if err := p.expr(); err != nil {
			return err
		}
		if !p.accept("as") {
			return p.unexpected("AS in CAST")
		}
		if err := p.typeName(); err != nil {
			return err
		}
		if !p.acceptP(")") {
			return p.unexpected(") closing CAST")
		}
		return nil
	case t.Text == "values" && call && p.d == MySQL:
		p.i++
		return p.list(p.column)
	case call:
		if !functions[t.Text] {
			return refuse("function %s is not allowed in a session statement; compute the value in the application and pass it as an argument", t.Text)
		}
		p.funcs[t.Text] = true
		p.i++
		if p.peekAt(1).Kind == Punct && p.peekAt(1).Text == ")" {
			p.i += 2
			return nil
		}
		return p.list(p.expr)
	case niladic[t.Text]:
		p.i++
		p.funcs[t.Text] = true
		return nil
	}
	return p.column()
}

// caseExpr consumes CASE [expr] WHEN expr THEN expr … [ELSE expr] END.
func (p *parser) caseExpr() error {
	p.i++
	if !p.is("when") {
		if err := p.expr(); err != nil {
			return err
		}
	}
	n := 0
	for p.accept("when") {
		if err := p.expr(); err != nil {
			return err
		}
		if !p.accept("then") {
			return p.unexpected("THEN")
		}
		if err := p.expr(); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return p.unexpected("WHEN")
	}
	if p.accept("else") {
		if err := p.expr(); err != nil {
			return err
		}
	}
	if !p.accept("end") {
		return p.unexpected("END closing CASE")
	}
	return nil
}

// typeName consumes a type of the allow-list with an optional modifier of
// one or two numbers.
func (p *parser) typeName() error {
	t := p.peek()
	if t.Kind != Ident || !types[t.Text] {
		if t.Kind == Ident || t.Kind == QuotedIdent {
			return refuse("type %s at byte %d is not allowed in a cast; use a plain number, text, date or JSON type", describe(t), t.Pos)
		}
		return p.unexpected("a type")
	}
	p.i++
	switch t.Text {
	case "double":
		p.accept("precision")
	case "character":
		p.accept("varying")
	case "signed", "unsigned":
		p.accept("integer")
	case "timestamp", "time":
		if p.accept("with") || p.accept("without") {
			if !p.accept("time") || !p.accept("zone") {
				return p.unexpected("TIME ZONE")
			}
		}
	}
	if p.isP("(") {
		return p.list(func() error {
			if p.peek().Kind != Number {
				return p.unexpected("a number in a type's modifier")
			}
			p.i++
			return nil
		})
	}
	return nil
}

// assigns consumes SET's column = expr, … (SET already consumed).
func (p *parser) assigns() error {
	for {
		if err := p.column(); err != nil {
			return err
		}
		if !p.acceptP("=") {
			return p.unexpected("= in SET")
		}
		if err := p.expr(); err != nil {
			return err
		}
		if !p.acceptP(",") {
			return nil
		}
	}
}

// where consumes an optional WHERE expr.
func (p *parser) where() error {
	if p.accept("where") {
		return p.expr()
	}
	return nil
}

// orderLimit consumes MySQL's optional ORDER BY … and LIMIT n.
func (p *parser) orderLimit() error {
	if p.d != MySQL {
		return nil
	}
	if p.accept("order") {
		if !p.accept("by") {
			return p.unexpected("BY after ORDER")
		}
		for {
			if err := p.expr(); err != nil {
				return err
			}
			_ = p.accept("asc") || p.accept("desc")
			if !p.acceptP(",") {
				break
			}
		}
	}
	if p.accept("limit") {
		if t := p.peek(); t.Kind != Number && t.Kind != Placeholder {
			return p.unexpected("a number or placeholder after LIMIT")
		}
		return p.operand()
	}
	return nil
}

// alias consumes an optional [AS] alias of the table.
func (p *parser) alias(asOnly bool) error {
	if p.accept("as") {
		a, err := p.name("an alias after AS")
		if err != nil {
			return err
		}
		p.quals = append(p.quals, a)
		return nil
	}
	if t := p.peek(); !asOnly && (t.Kind == QuotedIdent || (t.Kind == Ident && !reserved[t.Text] && refused[t.Text] == "" && t.Text != "value")) {
		p.i++
		p.quals = append(p.quals, t)
	}
	return nil
}

// functionsUsed returns the functions called, sorted.
func (p *parser) functionsUsed() []string {
	if len(p.funcs) == 0 {
		return nil
	}
	out := make([]string, 0, len(p.funcs))
	for f := range p.funcs {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}
