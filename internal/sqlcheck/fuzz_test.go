package sqlcheck

import (
	"slices"
	"strings"
	"testing"
)

var fuzzTables = []string{"account", "log", "Mixed"}

// FuzzCheckDML: CheckDML never panics, and a statement it accepts
// re-checks identically once re-spaced, names a declared table, calls only
// allowlisted functions and holds none of what the allow-list excludes
// (strings, quoted or qualified calls, a second statement), whatever the
// dialect. Seeds: every hostile and accepted statement of the tests
// (corpus in testdata/fuzz/FuzzCheckDML).
func FuzzCheckDML(f *testing.F) {
	for _, tc := range hostile {
		f.Add(tc.d == MySQL, tc.sql, tc.nargs)
	}
	f.Add(false, "UPDATE account SET n = GREATEST(n, $1::int), t = now() WHERE id IN ($2, $3)", 3)
	f.Add(true, "INSERT INTO account (id, n) VALUES (?, ?) ON DUPLICATE KEY UPDATE n = n + VALUES(n)", 2)
	f.Add(false, "INSERT INTO account AS a (id) VALUES ($1) ON CONFLICT (id) DO UPDATE SET n = a.n + excluded.n", 1)
	f.Fuzz(func(t *testing.T, mysql bool, sql string, nargs int) {
		d := fuzzDialect(mysql)
		st, err := CheckDML(d, sql, fuzzTables, nargs)
		if err != nil {
			var e *Error
			if !asError(err, &e) || e.Msg == "" {
				t.Fatalf("refusal %T %v is not a one-sentence *Error", err, err)
			}
			return
		}
		checkAccepted(t, d, sql, nargs, st)
	})
}

func asError(err error, e **Error) bool {
	x, ok := err.(*Error)
	*e = x
	return ok
}

// checkAccepted holds the properties of an accepted statement.
func checkAccepted(t *testing.T, d Dialect, sql string, nargs int, st Statement) {
	t.Helper()
	if !slices.Contains(fuzzTables, st.Table) {
		t.Fatalf("%q accepted with table %q, not a declared one", sql, st.Table)
	}
	if st.Verb != "insert" && st.Verb != "update" && st.Verb != "delete" {
		t.Fatalf("%q accepted with verb %q", sql, st.Verb)
	}
	for _, fn := range st.Functions {
		if !functions[fn] && !niladic[fn] {
			t.Fatalf("%q accepted calling %s, not an allowlisted function", sql, fn)
		}
	}
	toks, err := lex(d, sql, lexOptions{})
	if err != nil {
		t.Fatalf("%q accepted but does not lex: %v", sql, err)
	}
	// An INSERT's column list follows its table or alias: the one name
	// before a parenthesis that is not a call.
	columnList := -1
	if st.Verb == "insert" {
		for i, tk := range toks {
			if tk.Kind == Punct && tk.Text == "(" {
				columnList = i - 1
				break
			}
		}
	}
	raw := make([]string, len(toks))
	for i, tk := range toks {
		raw[i] = sql[tk.Pos:tk.End]
		next := Token{Kind: Punct}
		if i+1 < len(toks) {
			next = toks[i+1]
		}
		calls := next.Kind == Punct && next.Text == "("
		switch {
		case tk.Kind == String:
			t.Fatalf("%q accepted with a string literal", sql)
		case tk.Kind == Punct && tk.Text == ";" && i != len(toks)-1:
			t.Fatalf("%q accepted with two statements", sql)
		case tk.Kind == QuotedIdent && calls && i != columnList:
			t.Fatalf("%q accepted calling the quoted name %q", sql, tk.Text)
		case tk.Kind == Ident && calls && !functions[tk.Text] && !types[tk.Text] && !reserved[tk.Text] &&
			tk.Text != "conflict" && tk.Text != "value" && i != columnList:
			t.Fatalf("%q accepted calling %s", sql, tk.Text)
		case tk.Kind == Punct && tk.Text == "." && i+2 < len(toks) && toks[i+2].Kind == Punct && (toks[i+2].Text == "(" || toks[i+2].Text == "."):
			t.Fatalf("%q accepted a qualified call or a three-part name", sql)
		case tk.Kind == Punct && (tk.Text == "[" || tk.Text == ":" || tk.Text == "@"):
			t.Fatalf("%q accepted %s", sql, tk.Text)
		}
	}
	again, err := CheckDML(d, strings.Join(raw, " "), fuzzTables, nargs)
	if err != nil {
		t.Fatalf("%q accepted, its re-spaced form %q refused: %v", sql, strings.Join(raw, " "), err)
	}
	if again.Verb != st.Verb || again.Table != st.Table || !slices.Equal(again.Functions, st.Functions) {
		t.Fatalf("%q: %+v, re-spaced %+v", sql, st, again)
	}
}

func isKeyword(t Token, w string) bool { return t.Kind == Ident && t.Text == w }

// The accepted statements of the tests hold the fuzz properties too.
func TestAcceptedProperties(t *testing.T) {
	for _, sql := range []string{
		"UPDATE account SET n = GREATEST(n, $1::int), t = now() WHERE id IN ($2, $3)",
		`UPDATE "Mixed" AS m SET "Col" = $1::numeric(10,2) WHERE m."Col" IS NOT NULL`,
		"INSERT INTO account AS a (id) VALUES ($1) ON CONFLICT (id) DO UPDATE SET n = a.n + excluded.n",
	} {
		st, err := CheckDML(Postgres, sql, fuzzTables, strings.Count(sql, "$"))
		if err != nil {
			t.Fatalf("%q: %v", sql, err)
		}
		checkAccepted(t, Postgres, sql, strings.Count(sql, "$"), st)
	}
}

// fuzzDialect is the dialect a fuzzer's mysql input picks.
func fuzzDialect(mysql bool) Dialect {
	if mysql {
		return MySQL
	}
	return Postgres
}
