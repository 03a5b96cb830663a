package sqlcheck

import (
	"slices"
	"strconv"
	"testing"
)

func TestSingleKeyedWrite(t *testing.T) {
	types := []string{"int4", "numeric", "int8", "int4"}
	for _, c := range []struct {
		d      Dialect
		sql    string
		params int
		keys   []int
		rows2  string // Rows(2, params, types)
	}{
		{Postgres, "UPDATE stock SET q = CASE WHEN q >= $1 + 10 THEN q - $1 ELSE q - $1 + 91 END, n = n + $2 WHERE w = $3 AND i = $4", 4, []int{3, 4},
			"UPDATE stock SET q = CASE WHEN q >= writeback_v.writeback_1 + 10 THEN q - writeback_v.writeback_1 ELSE q - writeback_v.writeback_1 + 91 END, n = n + writeback_v.writeback_2" +
				" FROM (VALUES ($1::int4, $2::numeric, $3::int8, $4::int4), ($5::int4, $6::numeric, $7::int8, $8::int4)) AS writeback_v (writeback_1, writeback_2, writeback_3, writeback_4)" +
				" WHERE w = writeback_v.writeback_3 AND i = writeback_v.writeback_4"},
		{Postgres, `update only "T" set "A" = $2, "T".b = coalesce($2, b) where "k" = $1;`, 2, []int{1},
			`update only "T" set "A" = writeback_v.writeback_2, "T".b = coalesce(writeback_v.writeback_2, b)` +
				" FROM (VALUES ($1::int4, $2::numeric), ($3::int4, $4::numeric)) AS writeback_v (writeback_1, writeback_2)" +
				` WHERE "k" = writeback_v.writeback_1`},
		{Postgres, "DELETE FROM new_order WHERE w = $1 AND d = $2 AND o = $3", 3, []int{1, 2, 3},
			"DELETE FROM new_order USING (VALUES ($1::int4, $2::numeric, $3::int8), ($4::int4, $5::numeric, $6::int8)) AS writeback_v (writeback_1, writeback_2, writeback_3)" +
				" WHERE w = writeback_v.writeback_1 AND d = writeback_v.writeback_2 AND o = writeback_v.writeback_3"},
		{Postgres, "UPDATE t SET a = now() WHERE k = $1", 1, []int{1},
			"UPDATE t SET a = now() FROM (VALUES ($1::int4), ($2::int4)) AS writeback_v (writeback_1) WHERE k = writeback_v.writeback_1"},

		// not keyed writes
		{Postgres, "UPDATE t SET k = k + 1 WHERE k = $1", 1, nil, ""}, // a key that changes
		{Postgres, "UPDATE t SET t.k = 1 WHERE k = $1", 0, nil, ""},   // the same, qualified
		{Postgres, "UPDATE t SET a = $1 WHERE k = $2 OR j = $3", 3, nil, ""},
		{Postgres, "UPDATE t SET a = $1 WHERE k > $2", 2, nil, ""},
		{Postgres, "UPDATE t SET a = $1 WHERE k = $2 + 1", 2, nil, ""},
		{Postgres, "UPDATE t SET a = $1 WHERE $2 = k", 2, nil, ""},
		{Postgres, "UPDATE t SET a = $1 WHERE t.k = $2", 2, nil, ""},
		{Postgres, "UPDATE t SET a = $1 WHERE k = $2 RETURNING a", 2, nil, ""},
		{Postgres, "UPDATE t SET a = $1", 1, nil, ""},
		{Postgres, "UPDATE t x SET a = $1 WHERE k = $2", 2, nil, ""},
		{Postgres, "UPDATE s.t SET a = $1 WHERE k = $2", 2, nil, ""},
		{Postgres, "UPDATE t SET a = $1 WHERE k = $2; DELETE FROM t", 2, nil, ""},
		{Postgres, "DELETE FROM t", 0, nil, ""},
		{Postgres, "DELETE FROM t WHERE k = $1 AND", 1, nil, ""},
		{Postgres, "INSERT INTO t (k) VALUES ($1)", 1, nil, ""},

		// MySQL: a derived table of the arguments
		{MySQL, "UPDATE stock SET q = CASE WHEN q >= ? + 10 THEN q - ? ELSE q + 91 END, `n` = n + 1 WHERE w = ? AND i = ?", 4, []int{3, 4},
			"UPDATE stock JOIN (SELECT ? AS writeback_1, ? AS writeback_2, ? AS writeback_3, ? AS writeback_4 UNION ALL SELECT ?, ?, ?, ?) AS writeback_v" +
				" ON w = writeback_v.writeback_3 AND i = writeback_v.writeback_4" +
				" SET q = CASE WHEN q >= writeback_v.writeback_1 + 10 THEN q - writeback_v.writeback_2 ELSE q + 91 END, `n` = n + 1"},
		{MySQL, "DELETE FROM new_order WHERE w = ? AND o = ?;", 2, []int{1, 2},
			"DELETE new_order FROM new_order JOIN (SELECT ? AS writeback_1, ? AS writeback_2 UNION ALL SELECT ?, ?) AS writeback_v" +
				" ON w = writeback_v.writeback_1 AND o = writeback_v.writeback_2"},
		{MySQL, "UPDATE t SET a = a + 1, b = a WHERE k = ?", 1, nil, ""},     // b reads a, which a's assignment sets
		{MySQL, "UPDATE t SET a = b, b = 1 WHERE k = ?", 1, nil, ""},         // a reads b, set after it
		{MySQL, "UPDATE t SET a = a + 1, A = a + 1 WHERE k = ?", 1, nil, ""}, // a set twice
		{MySQL, "UPDATE t SET `A` = 1 WHERE a = ?", 1, nil, ""},              // a key set (MySQL's names ignore case)
		{MySQL, "UPDATE t SET a = ? WHERE k = ? ORDER BY k LIMIT 1", 2, nil, ""},
		{MySQL, "UPDATE IGNORE t SET a = ? WHERE k = ?", 2, nil, ""},
	} {
		w, ok := SingleKeyedWrite(c.d, c.sql)
		if ok != (c.keys != nil) {
			t.Errorf("%s %q: ok = %v", c.d, c.sql, ok)
			continue
		}
		if !ok {
			continue
		}
		if got := w.Keys(); !slices.Equal(got, c.keys) {
			t.Errorf("%q: Keys() = %v, want %v", c.sql, got, c.keys)
		}
		if got := w.Rows(2, c.params, types[:c.params]); got != c.rows2 {
			t.Errorf("%q: Rows(2) =\n%s\nwant\n%s", c.sql, got, c.rows2)
		}
	}
}

// FuzzSingleKeyedWrite: SingleKeyedWrite never panics; a statement it
// takes has keys among its placeholders, and its Rows(2) lexes, has two
// rows of placeholders (PostgreSQL's numbered 1 … 2·params) and no other,
// and is not a keyed write itself. Corpus in
// testdata/fuzz/FuzzSingleKeyedWrite.
func FuzzSingleKeyedWrite(f *testing.F) {
	f.Add(false, "UPDATE t SET a = a + $1, b = CAST($2 AS timestamp) WHERE k = $3 AND j = $4", 4)
	f.Add(false, "DELETE FROM ONLY t WHERE k = $1;", 1)
	f.Add(false, "UPDATE t SET k = $1 WHERE k = $2", 2)
	f.Add(true, "UPDATE t SET a = CASE WHEN a > ? THEN ? ELSE a END WHERE k = ? AND j = ?", 4)
	f.Add(true, "DELETE FROM t WHERE k = ?", 1)
	f.Fuzz(func(t *testing.T, mysql bool, sql string, params int) {
		d := fuzzDialect(mysql)
		params = params&0x1f + 1
		w, ok := SingleKeyedWrite(d, sql)
		if !ok {
			return
		}
		if len(w.Keys()) == 0 {
			t.Fatalf("%q: no keys", sql)
		}
		types := make([]string, params)
		for i := range types {
			types[i] = "int4"
		}
		two := w.Rows(2, params, types)
		if _, again := SingleKeyedWrite(d, two); again {
			t.Fatalf("Rows(2) = %q is a keyed write", two)
		}
		toks, err := lex(d, two, lexOptions{})
		if err != nil {
			t.Fatalf("Rows(2) = %q does not lex: %v", two, err)
		}
		n := 0
		for _, tok := range toks {
			if tok.Kind == Placeholder {
				n++
				if want := strconv.Itoa(n); d == Postgres && tok.Text != want {
					t.Fatalf("Rows(2) = %q: placeholder %d is $%s", two, n, tok.Text)
				}
			}
		}
		if n != 2*params {
			t.Fatalf("Rows(2) = %q has %d placeholders, want %d", two, n, 2*params)
		}
	})
}
