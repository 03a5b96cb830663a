package sqlcheck

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Kind is the kind of a token.
type Kind int

// Token kinds.
const (
	Ident       Kind = iota // a name or keyword; Text is folded to lower case (ASCII only) unless quoted
	QuotedIdent             // a quoted name, Text unquoted and exact
	Number
	Placeholder // $n or ?; Text is the number (1-based) for $n, "?" for ?
	String      // a string literal (only when allowed)
	Punct       // punctuation ( ) , . ; [ ] : and operators (a run of operator characters: <=, <>, ||, …)
)

// Token is one lexeme.
type Token struct {
	Kind Kind
	Text string
	Pos  int // byte offset of its first byte
	End  int // byte offset just past its last byte
}

// maxName is the longest name in bytes: PostgreSQL cuts longer names to
// 63 bytes (another name than the one checked), MySQL refuses them.
const maxName = 63

// lexOptions tune Lex.
type lexOptions struct {
	strings bool // allow string literals and any quoted name (trusted mapping queries)
}

// opChars make operators: PostgreSQL lexes a run of them as one operator
// (see isOpRunEnd), MySQL knows fewer; a run the checker does not know is
// refused by the parser.
const opChars = "+-*/<>=~!@%^&|"

// lex splits sql into tokens. Comments and, unless allowed, string
// literals are refused, as is anything the two databases might lex
// otherwise than this function does (a name longer than 63 bytes, a number
// run into a name, a quoted name with unusual characters).
func lex(d Dialect, sql string, o lexOptions) ([]Token, error) {
	if !utf8.ValidString(sql) {
		return nil, refuse("the statement is not valid UTF-8")
	}
	strict := !o.strings
	var out []Token
	emit := func(k Kind, text string, pos, end int) {
		out = append(out, Token{Kind: k, Text: text, Pos: pos, End: end})
	}
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
			end, err := stringEnd(d, sql, i)
			if err != nil {
				return nil, err
			}
			emit(String, sql[i:end], i, end)
			i = end
		case c == '"' && d == Postgres, c == '`' && d == MySQL:
			name, end, err := quotedName(sql, i, strict)
			if err != nil {
				return nil, err
			}
			emit(QuotedIdent, name, i, end)
			i = end
		case c == '$' && d == Postgres:
			j := i + 1
			for j < len(sql) && isDigit(sql[j]) {
				j++
			}
			if j == i+1 {
				return nil, refuse("the statement contains a dollar-quoted string or a stray $ at byte %d; use placeholders $1, $2 … for values", i)
			}
			if strict && j < len(sql) && (isIdentByte(sql[j]) || sql[j] >= utf8.RuneSelf) {
				return nil, refuse("placeholder %s at byte %d runs into a name; put a space or an operator after it", sql[i:j], i)
			}
			emit(Placeholder, sql[i+1:j], i, j)
			i = j
		case c == '?':
			if d != MySQL {
				return nil, refuse("placeholder ? at byte %d is MySQL's; this store is PostgreSQL, use $1, $2 …", i)
			}
			emit(Placeholder, "?", i, i+1)
			i++
		case isDigit(c) || (c == '.' && i+1 < len(sql) && isDigit(sql[i+1])):
			end := numberEnd(sql, i)
			if end < len(sql) && (isIdentByte(sql[end]) || sql[end] == '.' || sql[end] >= utf8.RuneSelf) {
				return nil, refuse("malformed number at byte %d", i)
			}
			emit(Number, sql[i:end], i, end)
			i = end
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
				return nil, refuse("unexpected character %q at byte %d", []rune(sql[i:])[0], i)
			}
			if strict && i-start > maxName {
				return nil, refuse("the name at byte %d is longer than %d bytes", start, maxName)
			}
			emit(Ident, foldASCII(sql[start:i]), start, i)
		case c == ':' && d == Postgres && strings.HasPrefix(sql[i:], "::"):
			emit(Punct, "::", i, i+2)
			i += 2
		case strings.IndexByte(opChars, c) >= 0:
			end := opEnd(d, sql, i)
			if op := sql[i:end]; strings.Contains(op, "--") || strings.Contains(op, "/*") {
				return nil, refuse("the statement contains a comment at byte %d; remove it", i)
			}
			emit(Punct, sql[i:end], i, end)
			i = end
		case strings.IndexByte("(),.;:[]", c) >= 0:
			emit(Punct, string(c), i, i+1)
			i++
		default:
			return nil, refuse("unexpected character %q at byte %d", []rune(sql[i:])[0], i)
		}
	}
	return out, nil
}

// lexStatement is lex without the statement's trailing ";", if any.
func lexStatement(d Dialect, sql string, o lexOptions) ([]Token, error) {
	toks, err := lex(d, sql, o)
	if n := len(toks); err == nil && n > 0 && toks[n-1].Kind == Punct && toks[n-1].Text == ";" {
		toks = toks[:n-1]
	}
	return toks, err
}

// stringEnd returns the end of the string literal at i (trusted queries).
func stringEnd(d Dialect, sql string, i int) (int, error) {
	start, c := i, sql[i]
	q := c
	if c == 'E' || c == 'e' {
		i++
		q = '\''
	}
	i++
	for {
		if i >= len(sql) {
			return 0, refuse("the string literal at byte %d is not closed", start)
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
			return i + 1, nil
		}
		i++
	}
}

// quotedName reads the quoted name at i. strict: the name must be 1 to 63
// bytes of letters, digits, '_', '$' and spaces (no quote, no ?, which
// MySQL's driver would take for a placeholder, no backslash).
func quotedName(sql string, i int, strict bool) (string, int, error) {
	start, q := i, sql[i]
	var b strings.Builder
	i++
	for {
		if i >= len(sql) {
			return "", 0, refuse("the quoted name at byte %d is not closed", start)
		}
		if sql[i] == q {
			if i+1 < len(sql) && sql[i+1] == q {
				if strict {
					return "", 0, refuse("the quoted name at byte %d holds a quote; use letters, digits, '_', '$' and spaces", start)
				}
				b.WriteByte(q)
				i += 2
				continue
			}
			i++
			break
		}
		b.WriteByte(sql[i])
		i++
	}
	name := b.String()
	if strict {
		if name == "" || len(name) > maxName {
			return "", 0, refuse("the quoted name at byte %d is empty or longer than %d bytes", start, maxName)
		}
		for _, r := range name {
			if !isIdentPart(r) && r != ' ' {
				return "", 0, refuse("the quoted name at byte %d holds %q; use letters, digits, '_', '$' and spaces", start, r)
			}
		}
	}
	return name, i, nil
}

// numberEnd returns the end of the number at i: digits, an optional
// fraction, an optional exponent.
func numberEnd(sql string, i int) int {
	for i < len(sql) && isDigit(sql[i]) {
		i++
	}
	if i < len(sql) && sql[i] == '.' {
		i++
		for i < len(sql) && isDigit(sql[i]) {
			i++
		}
	}
	if i < len(sql) && (sql[i] == 'e' || sql[i] == 'E') {
		j := i + 1
		if j < len(sql) && (sql[j] == '+' || sql[j] == '-') {
			j++
		}
		if j < len(sql) && isDigit(sql[j]) {
			for j < len(sql) && isDigit(sql[j]) {
				j++
			}
			i = j
		}
	}
	return i
}

// opEnd returns the end of the operator at i as PostgreSQL lexes it: the
// longest run of operator characters, less any trailing + or - unless the
// run holds one of ~ ! @ % ^ & | (those become operators of their own).
// MySQL lexes fewer operators; the parser accepts only runs both agree on.
func opEnd(d Dialect, sql string, i int) int {
	j := i
	for j < len(sql) && strings.IndexByte(opChars, sql[j]) >= 0 {
		j++
	}
	run := sql[i:j]
	if len(run) > 1 && !strings.ContainsAny(run, "~!@%^&|") {
		for len(run) > 1 && (run[len(run)-1] == '+' || run[len(run)-1] == '-') {
			run = run[:len(run)-1]
		}
	}
	return i + len(run)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || isDigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'z')
}

func isIdentStart(r rune) bool { return r == '_' || unicode.IsLetter(r) }

func isIdentPart(r rune) bool {
	return r == '_' || r == '$' || unicode.IsLetter(r) || unicode.IsDigit(r)
}

// foldASCII lower-cases ASCII letters only, as PostgreSQL folds unquoted
// names (strings.ToLower would fold the Kelvin sign into k, naming in the
// check another table than the database's).
func foldASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

func placeholderHint(d Dialect) string {
	if d == MySQL {
		return "?"
	}
	return "$1, $2 …"
}
