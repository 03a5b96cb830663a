package sqlcheck

import (
	"strconv"
	"strings"
	"testing"
)

func TestSingleRowInsert(t *testing.T) {
	for _, c := range []struct {
		d      Dialect
		sql    string
		params int
		ok     bool
		rows3  string // Rows(3, params)
	}{
		{Postgres, "INSERT INTO t (a, b) VALUES ($1, $2)", 2, true,
			"INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4), ($5, $6)"},
		{Postgres, "insert into \"T\" values (CAST($2 AS timestamp), NULL, $1::int, $10 + 1);", 10, true,
			"insert into \"T\" values (CAST($2 AS timestamp), NULL, $1::int, $10 + 1), (CAST($12 AS timestamp), NULL, $11::int, $20 + 1), (CAST($22 AS timestamp), NULL, $21::int, $30 + 1)"},
		{Postgres, "INSERT INTO t (a) VALUES (coalesce($1, 0))", 1, true,
			"INSERT INTO t (a) VALUES (coalesce($1, 0)), (coalesce($2, 0)), (coalesce($3, 0))"},
		{MySQL, "INSERT INTO t (a, b) VALUES (?, CAST(? AS datetime))", 2, true,
			"INSERT INTO t (a, b) VALUES (?, CAST(? AS datetime)), (?, CAST(? AS datetime)), (?, CAST(? AS datetime))"},
		{Postgres, "INSERT INTO t (a) VALUES ($1), ($2)", 2, false, ""},
		{Postgres, "INSERT INTO t (a) VALUES ($1) ON CONFLICT (a) DO NOTHING", 1, false, ""},
		{MySQL, "INSERT INTO t (a) VALUES (?) ON DUPLICATE KEY UPDATE a = a + 1", 1, false, ""},
		{MySQL, "INSERT IGNORE INTO t (a) VALUES (?)", 1, false, ""},
		{MySQL, "INSERT INTO t (a) VALUE (?)", 1, false, ""},
		{Postgres, "INSERT INTO t AS x (a) VALUES ($1)", 1, false, ""},
		{Postgres, "INSERT INTO s.t (a) VALUES ($1)", 1, false, ""},
		{Postgres, "INSERT INTO t DEFAULT VALUES", 0, false, ""},
		{Postgres, "INSERT INTO t (a, b) VALUES ($1, now())", 1, false, ""},
		{MySQL, "INSERT INTO t (a, b) VALUES (?, CURRENT_TIMESTAMP)", 1, false, ""},
		{Postgres, "UPDATE t SET a = $1", 1, false, ""},
		{Postgres, "INSERT INTO t (a) VALUES ($1); DELETE FROM t", 1, false, ""},
		{Postgres, "INSERT INTO t (a) VALUES ($1", 1, false, ""},
		{MySQL, "INSERT INTO t ((?)) VALUES ()", 0, false, ""}, // no placeholder before the row
		{MySQL, "INSERT INTO t () VALUES ()", 0, false, ""},
		{Postgres, "INSERT INTO t (a) VALUES ('x')", 0, false, ""}, // string literals do not lex
	} {
		r, ok := SingleRowInsert(c.d, c.sql)
		if ok != c.ok {
			t.Errorf("%s %q: ok = %v, want %v", c.d, c.sql, ok, c.ok)
			continue
		}
		if !ok {
			continue
		}
		if got := r.Rows(3, c.params); got != c.rows3 {
			t.Errorf("%s %q: Rows(3) = %q, want %q", c.d, c.sql, got, c.rows3)
		}
		want := c.sql
		if want[len(want)-1] == ';' {
			want = want[:len(want)-1]
		}
		if got := r.Rows(1, c.params); got != want {
			t.Errorf("%s %q: Rows(1) = %q", c.d, c.sql, got)
		}
	}
}

// FuzzSingleRowInsert: SingleRowInsert never panics; a statement it takes
// is its own Rows(1) (bar a trailing ; and spaces), and Rows(3) lexes into
// three times its placeholders, PostgreSQL's numbered on by params a row,
// and is no longer a single-row INSERT. Corpus in
// testdata/fuzz/FuzzSingleRowInsert.
func FuzzSingleRowInsert(f *testing.F) {
	f.Add(false, "INSERT INTO t (a, b) VALUES ($1, CAST($2 AS timestamp))", 2)
	f.Add(true, "INSERT INTO t (a, b) VALUES (?, ?);", 2)
	f.Add(false, "insert into \"T\" values ($3 + $1, NULL, $2::int)", 3)
	f.Add(false, "INSERT INTO t (a) VALUES ($1) ON CONFLICT DO NOTHING", 1)
	f.Fuzz(func(t *testing.T, mysql bool, sql string, params int) {
		d := fuzzDialect(mysql)
		params = params&0xff + 1
		r, ok := SingleRowInsert(d, sql)
		if !ok {
			return
		}
		one := r.Rows(1, params)
		if !strings.HasPrefix(sql, one) || strings.Trim(sql[len(one):], " \t\r\n\f;") != "" {
			t.Fatalf("Rows(1) = %q is not the statement %q", one, sql)
		}
		three := r.Rows(3, params)
		if _, again := SingleRowInsert(d, three); again {
			t.Fatalf("Rows(3) = %q is a single-row INSERT", three)
		}
		toks, err := lex(d, three, lexOptions{})
		if err != nil {
			t.Fatalf("Rows(3) = %q does not lex: %v", three, err)
		}
		var got []string
		for _, tok := range toks {
			if tok.Kind == Placeholder {
				got = append(got, tok.Text)
			}
		}
		if len(got) != 3*len(r.phs) {
			t.Fatalf("Rows(3) = %q has %d placeholders, want 3 × %d", three, len(got), len(r.phs))
		}
		for k := range 3 {
			for i, ph := range r.phs {
				want := ph.Text
				if d == Postgres && k > 0 { // the first row is the statement's own
					n, _ := strconv.Atoi(ph.Text)
					want = strconv.Itoa(n + k*params)
				}
				if g := got[k*len(r.phs)+i]; g != want {
					t.Fatalf("Rows(3) = %q: row %d placeholder %d is %s, want %s", three, k, i, g, want)
				}
			}
		}
	})
}
