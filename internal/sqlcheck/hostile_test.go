package sqlcheck

import (
	"strings"
	"testing"
)

// hostile are statements that reach past the session's table (functions
// with side effects or reads, other tables, settings) in ways the first
// checker let through, and more found by reading it adversarially. Each
// must be refused in its dialect; the message fragment says why.
var hostile = []struct {
	name  string
	d     Dialect
	sql   string
	nargs int
	msg   string
}{
	// Committed with a 200 on PostgreSQL by the first checker.
	{"quoted function", Postgres, `UPDATE account SET n = $1 WHERE id = $1 AND "pg_sleep"($2) IS NULL`, 2, `"pg_sleep" at byte 44 is called like a function`},
	{"schema-qualified quoted function", Postgres, `UPDATE account SET n = pg_catalog."set_config"($1, $2, false) WHERE id = $3`, 3, "pg_catalog.… at byte 23: a column may be qualified only"},
	{"array slice calling nextval", Postgres, `UPDATE account SET n = (ARRAY[1,2])[1:nextval($1)] WHERE id = $2`, 2, "ARRAY at byte 24"},
	{"slice without ARRAY", Postgres, `UPDATE account SET n = (n)[1:nextval($1)] WHERE id = $2`, 2, `"[" at byte 26 is not allowed`},
	{"name after a slice colon", Postgres, `UPDATE account SET n = n[1:pg_sleep($1)] WHERE id = $2`, 2, `"[" at byte 24`},
	{"schema-qualified function", Postgres, `UPDATE account SET n = pg_catalog.pg_sleep($1)`, 1, "pg_catalog.… at byte 23"},
	{"three-part name", Postgres, `UPDATE account SET n = account.n.x WHERE id = $1`, 1, "more than two parts"},
	{"qualified by another table", Postgres, `UPDATE account SET n = secret.n WHERE id = $1`, 1, "secret.… at byte 23"},
	{"cast to regclass", Postgres, `UPDATE account SET n = $1::regclass::oid WHERE id = $2`, 2, "type REGCLASS at byte 27 is not allowed"},
	{"cast to a quoted type", Postgres, `UPDATE account SET n = $1::"int4" WHERE id = $2`, 2, `type "int4" at byte 27 is not allowed`},
	{"cast to a qualified type", Postgres, `UPDATE account SET n = $1::pg_catalog.int4 WHERE id = $2`, 2, "type PG_CATALOG"},
	{"CAST to txid_snapshot", Postgres, `UPDATE account SET n = CAST($1 AS txid_snapshot) WHERE id = $2`, 2, "type TXID_SNAPSHOT"},
	{"cast to an array type", Postgres, `UPDATE account SET n = $1::int[] WHERE id = $2`, 2, `"[" at byte 30`},
	{"unicode-escaped name", Postgres, `UPDATE account SET n = U&"pg\0073leep"($1)`, 1, `holds '\\'`},
	{"unicode name", Postgres, `UPDATE account SET n = U&"pg_sleep"($1)`, 1, "operator & at byte 24"},
	{"unicode-escaped string", Postgres, `UPDATE account SET n = U&'\0041' WHERE id = $1`, 1, "string literal"},
	{"dollar-quoted string with tag", Postgres, `UPDATE account SET s = $x$a$x$ WHERE id = $1`, 1, "dollar-quoted"},
	{"nested comment", Postgres, `UPDATE account SET n = $1 /* /* */ */`, 1, "comment"},
	{"comment inside an operator", Postgres, `UPDATE account SET n = n +/**/ $1`, 1, "comment"},
	{"operator containing a comment", Postgres, `UPDATE account SET n = n *--x` + "\n" + `$1`, 1, "comment"},
	{"current_user", Postgres, `UPDATE account SET s = current_user WHERE id = $1`, 1, "CURRENT_USER at byte 23"},
	{"session_user", Postgres, `UPDATE account SET s = SESSION_USER WHERE id = $1`, 1, "SESSION_USER"},
	{"user", Postgres, `UPDATE account SET s = user WHERE id = $1`, 1, "USER at byte 23"},
	{"row subquery", Postgres, `UPDATE account SET n = (SELECT secret FROM vault LIMIT 1) WHERE id = $1`, 1, "SELECT at byte 24"},
	{"exists", Postgres, `DELETE FROM account WHERE EXISTS (SELECT 1)`, 0, "EXISTS at byte 26"},
	{"operator function", Postgres, `UPDATE account SET n = n OPERATOR(pg_catalog.+) $1`, 1, "OPERATOR"},
	{"named argument", Postgres, `UPDATE account SET n = round(n => $1)`, 1, "operator =>"},
	{"jsonb operator", Postgres, `UPDATE account SET n = j #>> $1`, 1, `unexpected character '#'`},
	{"ilike escape", Postgres, `UPDATE account SET n = $1 WHERE s LIKE $2 ESCAPE $3`, 3, "ESCAPE"},
	{"unquoted mixed case", Postgres, `UPDATE Mixed SET n = $1`, 1, "table mixed is not declared"},
	{"kelvin sign folds", Postgres, "UPDATE \u212Aey SET n = $1", 1, "is not declared"},
	{"long name truncated to another", Postgres, `UPDATE account SET n = ` + strings.Repeat("x", 64) + ` WHERE id = $1`, 1, "longer than 63 bytes"},
	{"placeholder run into a name", Postgres, `UPDATE account SET n = $1abc`, 1, "runs into a name"},
	{"hex number", Postgres, `UPDATE account SET n = 0x10 WHERE id = $1`, 1, "malformed number"},
	{"number run into a dot", Postgres, `UPDATE account SET n = 1.2.3 WHERE id = $1`, 1, "malformed number"},
	{"returning", Postgres, `UPDATE account SET n = $1 RETURNING (SELECT 1)`, 1, "RETURNING"},
	{"on conflict update of another table", Postgres, `INSERT INTO account (id) VALUES ($1) ON CONFLICT (id) DO UPDATE SET n = secret.n`, 1, "secret.…"},
	{"insert select", Postgres, `INSERT INTO account (id) SELECT id FROM secret`, 0, "SELECT"},
	{"insert from table", Postgres, `INSERT INTO account TABLE secret`, 0, "TABLE"},
	{"update with", Postgres, `WITH x AS (DELETE FROM secret) UPDATE account SET n = $1`, 1, "WITH statements are not allowed"},
	{"vertical tab", Postgres, "UPDATE account SET n = $1\vWHERE id = $2", 2, "unexpected character"},
	{"nbsp", Postgres, "UPDATE account SET n = $1\u00a0WHERE id = $2", 2, "runs into a name"},
	{"nbsp alone", Postgres, "UPDATE account SET n = $1 \u00a0WHERE id = $2", 2, "unexpected character"},
	{"nul byte", Postgres, "UPDATE account SET n = $1\x00", 1, "unexpected character"},
	{"set_config unquoted", Postgres, `UPDATE account SET s = set_config($1, $2, false)`, 2, "function set_config is not allowed"},
	{"collate", Postgres, `UPDATE account SET s = $1 COLLATE "C"`, 1, "COLLATE"},
	{"stray word after value", Postgres, `UPDATE account SET n = $1 pg_sleep`, 1, "PG_SLEEP at byte 26"},
	{"interval literal", Postgres, `UPDATE account SET t = now() + interval '1 day'`, 0, "string literal"},

	// MySQL / MariaDB.
	{"quoted function mysql", MySQL, "UPDATE account SET s = `load_file`(?) WHERE id = ?", 2, "\"load_file\" at byte 23 is called like a function"},
	{"db-qualified quoted function", MySQL, "UPDATE account SET s = `mysql`.`load_file`(?) WHERE id = ?", 2, "mysql.… at byte 23"},
	{"comma join with aliases", MySQL, "UPDATE account a, secret s SET a.n = s.n WHERE a.id = ?", 1, "UPDATE of several tables"},
	{"comma join", MySQL, "UPDATE account, secret SET account.n = secret.n", 0, "UPDATE of several tables"},
	{"multi-table delete", MySQL, "DELETE FROM account, secret USING account JOIN secret", 0, "USING"},
	{"delete with alias list", MySQL, "DELETE FROM account a, secret s WHERE a.id = ?", 1, "DELETE from several tables"},
	{"join mysql", MySQL, "UPDATE account a STRAIGHT_JOIN secret s ON a.id = s.id SET a.n = s.n", 0, "unexpected STRAIGHT_JOIN"},
	{"user variable", MySQL, "UPDATE account SET n = @x WHERE id = ?", 1, "operator @"},
	{"system variable", MySQL, "UPDATE account SET s = @@version WHERE id = ?", 1, "operator @@"},
	{"assignment", MySQL, "UPDATE account SET n = (@x := ?) WHERE id = ?", 2, "operator @"},
	{"version comment", MySQL, "UPDATE account SET n = ? /*!50000 , s = load_file('/etc/passwd') */", 1, "comment"},
	{"dash comment", MySQL, "UPDATE account SET n = ? -- x", 1, "comment"},
	{"backslash in a string", MySQL, `UPDATE account SET s = 'a\' WHERE id = ?`, 1, "string literal"},
	{"double-quoted string", MySQL, `UPDATE account SET s = "x" WHERE id = ?`, 1, "string literal"},
	{"hex literal", MySQL, "UPDATE account SET s = 0x2f6574632f706173737764 WHERE id = ?", 1, "malformed number"},
	{"charset introducer", MySQL, "UPDATE account SET s = _binary ? WHERE id = ?", 2, "unexpected placeholder"},
	{"backslash outside strings", MySQL, `UPDATE account SET s = \N WHERE id = ?`, 1, "unexpected character"},
	{"placeholder in a quoted name", MySQL, "UPDATE account SET `a?b` = ? WHERE id = ?", 2, "holds '?'"},
	{"backtick in a quoted name", MySQL, "UPDATE account SET `a``b` = ? WHERE id = ?", 2, "holds a quote"},
	{"odbc escape", MySQL, "UPDATE account SET s = {fn user()} WHERE id = ?", 1, "unexpected character '{'"},
	{"current_user mysql", MySQL, "UPDATE account SET s = CURRENT_USER WHERE id = ?", 1, "CURRENT_USER"},
	{"user() mysql", MySQL, "UPDATE account SET s = user() WHERE id = ?", 1, "USER at byte 23"},
	{"sleep", MySQL, "UPDATE account SET n = ? WHERE id = ? AND sleep(?) = 0", 3, "function sleep is not allowed"},
	{"benchmark", MySQL, "UPDATE account SET n = benchmark(?, md5(?))", 2, "function benchmark"},
	{"into outfile", MySQL, "UPDATE account SET n = ? INTO OUTFILE x", 1, "INTO at byte"},
	{"uppercase table mysql", MySQL, "UPDATE ACCOUNT SET n = ?", 1, "table ACCOUNT is not declared"},
	{"database-qualified table", MySQL, "UPDATE `mysql`.`user` SET n = ?", 1, "qualified table names"},
	{"partition clause", MySQL, "UPDATE account PARTITION (p0) SET n = ?", 1, "unexpected"},
	{"pg cast in mysql", MySQL, "UPDATE account SET n = ?::int", 1, `":" at byte 24`},
	{"json arrow", MySQL, "UPDATE account SET n = j->? WHERE id = ?", 2, "operator ->"},
	{"null-safe equality", MySQL, "UPDATE account SET n = ? WHERE id <=> ?", 2, "operator <=>"},
	{"not as bang", MySQL, "UPDATE account SET n = ? WHERE !id", 1, "operator !"},
	{"limit with expression", MySQL, "DELETE FROM account WHERE id = ? LIMIT (SELECT 1)", 1, "SELECT"},
	{"insert set", MySQL, "INSERT INTO account SET id = ?", 1, "unexpected SET"},
	{"insert on duplicate with subquery", MySQL, "INSERT INTO account (id) VALUES (?) ON DUPLICATE KEY UPDATE n = (SELECT 1)", 1, "SELECT"},
	{"values of another table", MySQL, "INSERT INTO account (id) VALUES (?) ON DUPLICATE KEY UPDATE n = VALUES(secret.n)", 1, "secret.…"},
	{"pg placeholders in mysql", MySQL, "UPDATE account SET n = $1", 1, "unexpected"},
}

func TestHostileStatements(t *testing.T) {
	tables := []string{"account", "log", "Mixed", "key"}
	for _, tc := range hostile {
		t.Run(string(tc.d)+" "+tc.name, func(t *testing.T) {
			st, err := CheckDML(tc.d, tc.sql, tables, tc.nargs)
			if err == nil {
				t.Fatalf("accepted %+v, want a refusal containing %q", st, tc.msg)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("message %q does not contain %q", err, tc.msg)
			}
		})
	}
}

// The grammar still accepts what applications send: upserts, CASE, casts,
// allowed functions, aliases, MySQL's ORDER BY and LIMIT, quoted columns.
func TestAcceptedStatements(t *testing.T) {
	tables := []string{"account", "log", "Mixed", "stock"}
	cases := []struct {
		d     Dialect
		sql   string
		nargs int
		funcs string
	}{
		{Postgres, "UPDATE stock SET s_quantity = CASE WHEN s_quantity >= $1 + 10 THEN s_quantity - $1 ELSE s_quantity - $1 + 91 END, s_ytd = s_ytd + $1 WHERE s_w_id = $2 AND s_i_id = $3", 3, ""},
		{Postgres, "UPDATE account SET s = substring(concat(CAST($1 AS varchar), s), 1, 500) WHERE id = $2", 2, "concat,substring"},
		{Postgres, "INSERT INTO log (a, b, t) VALUES ($1, $2, CAST($3 AS timestamp)), ($4, NULL, DEFAULT)", 4, ""},
		{Postgres, "INSERT INTO account AS a (id, n) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET n = a.n + excluded.n WHERE a.n IS DISTINCT FROM excluded.n", 2, ""},
		{Postgres, "INSERT INTO account (id) VALUES ($1) ON CONFLICT ON CONSTRAINT account_pkey DO NOTHING", 1, ""},
		{Postgres, "INSERT INTO account DEFAULT VALUES", 0, ""},
		{Postgres, `UPDATE "Mixed" AS m SET "Col" = $1::numeric(10,2), t = current_timestamp WHERE m."Col" IS NOT NULL AND n NOT IN ($2, $3)`, 3, "current_timestamp"},
		{Postgres, "UPDATE ONLY account SET n = -$1 WHERE NOT (id BETWEEN $2 AND $3) OR s ILIKE $4", 4, ""},
		{Postgres, "UPDATE account SET t = $1::timestamp with time zone, d = $2::double precision, j = jsonb_set(j, $3, $4::jsonb)", 4, "jsonb_set"},
		{Postgres, "DELETE FROM account a WHERE a.id = $1 AND a.n <> 0 AND s || $2 = $3", 3, ""},
		{MySQL, "UPDATE LOW_PRIORITY account AS a SET a.n = a.n DIV ? WHERE a.id = ? ORDER BY a.id DESC LIMIT 1", 2, ""},
		{MySQL, "INSERT IGNORE INTO account (id, `value`) VALUE (?, ?) ON DUPLICATE KEY UPDATE `value` = VALUES(`value`) + 1", 2, ""},
		{MySQL, "UPDATE account SET n = CAST(? AS SIGNED INTEGER), s = COALESCE(?, s), t = NOW() WHERE id = ? AND n MOD 2 = 0", 3, "coalesce,now"},
		{MySQL, "DELETE FROM log WHERE id IN (?, ?, ?) LIMIT ?", 4, ""},
	}
	for _, tc := range cases {
		st, err := CheckDML(tc.d, tc.sql, tables, tc.nargs)
		if err != nil {
			t.Errorf("%s: %q refused: %v", tc.d, tc.sql, err)
			continue
		}
		if got := strings.Join(st.Functions, ","); got != tc.funcs {
			t.Errorf("%q: functions %q, want %q", tc.sql, got, tc.funcs)
		}
	}
}
