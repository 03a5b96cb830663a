package sqlcheck

import (
	"strings"
	"testing"
)

func TestCheckDML(t *testing.T) {
	tables := []string{"account", "log", "Mixed"}
	cases := []struct {
		name    string
		d       Dialect
		sql     string
		nargs   int
		table   string // accepted: the table found
		refused string // refused: a fragment of the message
	}{
		{"update", Postgres, "UPDATE account SET balance = balance + $1 WHERE id = $2", 2, "account", ""},
		{"update mysql", MySQL, "update account set balance = balance + ? where id = ?;", 2, "account", ""},
		{"insert", Postgres, "INSERT INTO log (branch, n, tag) VALUES ($1, $2, $3)", 3, "log", ""},
		{"insert several rows", MySQL, "INSERT INTO log (a, b) VALUES (?, ?), (?, ?)", 4, "log", ""},
		{"upsert pg", Postgres, "INSERT INTO account (id, balance) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET balance = account.balance + EXCLUDED.balance", 2, "account", ""},
		{"upsert pg do nothing", Postgres, "INSERT INTO account (id) VALUES ($1) ON CONFLICT DO NOTHING", 1, "account", ""},
		{"upsert mysql", MySQL, "INSERT INTO account (id, balance) VALUES (?, ?) ON DUPLICATE KEY UPDATE balance = balance + VALUES(balance)", 2, "account", ""},
		{"delete", Postgres, "DELETE FROM log WHERE id = $1 AND n < 10", 1, "log", ""},
		{"quoted table", Postgres, `UPDATE "account" SET n = $1`, 1, "account", ""},
		{"case-folded table", Postgres, "UPDATE ACCOUNT SET n = $1", 1, "account", ""},
		{"quoted mixed case", MySQL, "UPDATE `Mixed` SET n = ?", 1, "Mixed", ""},
		{"allowed functions and casts", Postgres, "UPDATE account SET n = GREATEST(n, $1::int), t = now(), d = CAST($2 AS numeric(10, 2)) WHERE id IN ($3, $4)", 4, "account", ""},
		{"repeated placeholder", Postgres, "UPDATE account SET a = $1, b = $1 WHERE id = $2", 2, "account", ""},
		{"numeric literal", Postgres, "UPDATE account SET n = n + 1 WHERE id = $1", 1, "account", ""},

		{"select", Postgres, "SELECT * FROM account", 0, "", "SELECT statements are not allowed"},
		{"undeclared table", Postgres, "UPDATE secrets SET a = $1", 1, "", "table secrets is not declared"},
		{"qualified table", Postgres, "UPDATE public.account SET a = $1", 1, "", "qualified table names"},
		{"string literal", Postgres, "UPDATE account SET name = 'x' WHERE id = $1", 1, "", "string literal"},
		{"escape string", Postgres, "UPDATE account SET name = E'x' WHERE id = $1", 1, "", "string literal"},
		{"double-quoted string mysql", MySQL, `UPDATE account SET name = "x" WHERE id = ?`, 1, "", "string literal"},
		{"dollar quote", Postgres, "UPDATE account SET name = $$x$$", 0, "", "dollar-quoted"},
		{"comment", Postgres, "UPDATE account SET n = $1 -- hi", 1, "", "comment"},
		{"hash comment", MySQL, "UPDATE account SET n = ? # hi", 1, "", "comment"},
		{"block comment", MySQL, "UPDATE account /* x */ SET n = ?", 1, "", "comment"},
		{"two statements", Postgres, "UPDATE account SET n = $1; DELETE FROM log", 1, "", "more than one statement"},
		{"subquery", Postgres, "UPDATE account SET n = (SELECT max(n) FROM log) WHERE id = $1", 1, "", "SELECT"},
		{"update from", Postgres, "UPDATE account SET n = l.n FROM log l WHERE l.id = $1", 1, "", "FROM"},
		{"delete using", Postgres, "DELETE FROM account USING log WHERE account.id = log.id", 0, "", "USING"},
		{"join", MySQL, "UPDATE account JOIN log ON account.id = log.id SET account.n = ?", 1, "", "JOIN"},
		{"multi-table update", MySQL, "UPDATE account, log SET account.n = ?", 1, "", "several tables"},
		{"insert select", Postgres, "INSERT INTO log (n) SELECT n FROM account", 0, "", "SELECT"},
		{"returning", Postgres, "DELETE FROM log WHERE id = $1 RETURNING *", 1, "", "RETURNING"},
		{"unknown function", Postgres, "UPDATE account SET n = pg_sleep($1)", 1, "", "function pg_sleep is not allowed"},
		{"file function", MySQL, "UPDATE account SET s = LOAD_FILE(?)", 1, "", "function load_file"},
		{"too few args", Postgres, "UPDATE account SET a = $1 WHERE id = $2", 1, "", "2 placeholders and 1 arguments"},
		{"too many args mysql", MySQL, "UPDATE account SET a = ?", 2, "", "1 placeholders and 2 arguments"},
		{"question mark in pg", Postgres, "UPDATE account SET a = ?", 1, "", "MySQL's"},
		{"empty", Postgres, "  ; ", 0, "", "empty"},
		{"delete without from", MySQL, "DELETE account FROM account", 0, "", "expected FROM"},
		{"truncate", Postgres, "TRUNCATE account", 0, "", "TRUNCATE statements are not allowed"},
		{"invalid utf8", Postgres, "UPDATE account SET n = $1 \xff", 1, "", "UTF-8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, err := CheckDML(tc.d, tc.sql, tables, tc.nargs)
			if tc.refused == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if st.Table != tc.table {
					t.Errorf("table %q, want %q", st.Table, tc.table)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted %+v, want refusal containing %q", st, tc.refused)
			}
			if !strings.Contains(err.Error(), tc.refused) {
				t.Errorf("message %q does not contain %q", err, tc.refused)
			}
		})
	}
}

func TestPlaceholders(t *testing.T) {
	cases := []struct {
		d    Dialect
		sql  string
		n    int
		fail bool
	}{
		{Postgres, "SELECT id, balance FROM account WHERE branch = $1 AND id = $2", 2, false},
		{Postgres, "SELECT 'a?$9' AS s FROM t WHERE x = $1", 1, false},
		{MySQL, "SELECT id FROM account WHERE branch = ? AND id = ? AND s <> 'x?'", 2, false},
		{Postgres, "UPDATE t SET a = 1", 0, true},
		{Postgres, "SELECT 1; SELECT 2", 0, true},
	}
	for _, tc := range cases {
		n, err := Placeholders(tc.d, tc.sql)
		if (err != nil) != tc.fail || n != tc.n {
			t.Errorf("Placeholders(%q) = %d, %v", tc.sql, n, err)
		}
	}
}
