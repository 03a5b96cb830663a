package store

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/testenv"
)

func TestDescribeTypes(t *testing.T) {
	c := func(name string, typ change.Type, nullable bool) change.Column {
		return change.Column{Name: name, Type: typ, Nullable: nullable}
	}
	want := map[string][]change.Column{
		"postgres": {
			c("id", change.TypeInt, false),
			c("i2", change.TypeInt, false),
			c("i4", change.TypeInt, true),
			c("ser", change.TypeInt, false),
			c("f4", change.TypeFloat, true),
			c("f8", change.TypeFloat, true),
			c("n", change.TypeDecimal, true),
			c("t", change.TypeText, false),
			c("vc", change.TypeText, true),
			c("ch", change.TypeText, true),
			c("mood", change.TypeText, true),
			c("pos", change.TypeInt, true), // domain over int
			c("b", change.TypeBool, true),
			c("j", change.TypeJSON, true),
			c("jb", change.TypeJSON, true),
			c("ts", change.TypeOther, true),
			c("u", change.TypeOther, true),
			c("bin", change.TypeOther, true),
			c("Mixed Case", change.TypeText, true),
		},
		"mysql": {
			c("id", change.TypeInt, false),
			c("flag", change.TypeInt, false),
			c("i3", change.TypeInt, true),
			c("i4", change.TypeInt, true),
			c("u8", change.TypeInt, true),
			c("f4", change.TypeFloat, true),
			c("f8", change.TypeFloat, true),
			c("n", change.TypeDecimal, true),
			c("t", change.TypeText, false),
			c("vc", change.TypeText, true),
			c("ch", change.TypeText, true),
			c("mood", change.TypeText, true),
			c("j", change.TypeJSON, true),
			c("j2", change.TypeJSON, true),
			c("lt", change.TypeText, true),
			c("ts", change.TypeOther, true),
			c("d", change.TypeOther, true),
			c("bin", change.TypeOther, true),
			c("Mixed Case", change.TypeText, true),
		},
	}
	eachStore(t, func(t *testing.T, h *harness) {
		ddl := map[string]string{
			"postgres": `CREATE TABLE %[1]s (
				id bigint PRIMARY KEY, i2 smallint NOT NULL, i4 integer, ser serial,
				f4 real, f8 double precision, n numeric(10,2),
				t text NOT NULL, vc varchar(5), ch char(3), mood %[1]s_mood, pos %[1]s_pos,
				b boolean, j json, jb jsonb, ts timestamptz, u uuid, bin bytea, "Mixed Case" text)`,
			"mysql": "CREATE TABLE %[1]s (" +
				"id bigint PRIMARY KEY, flag tinyint(1) NOT NULL, i3 mediumint, i4 int, u8 bigint unsigned, " +
				"f4 float, f8 double, n decimal(10,2), " +
				"t text NOT NULL, vc varchar(5), ch char(3), mood enum('sad','ok'), " +
				"j json, j2 longtext CHECK (json_valid(j2) AND length(j2) < 1000), lt longtext, " +
				"ts timestamp NULL, d date, bin varbinary(10), `Mixed Case` text)",
		}
		if h.driver == "postgres" {
			// The enum and the domain carry the table's name; create
			// them first and drop them after the table.
			name := testenv.UniqueName(t, "st")
			h.exec(t, fmt.Sprintf("CREATE TYPE %s_mood AS ENUM ('sad', 'ok')", name))
			h.exec(t, fmt.Sprintf("CREATE DOMAIN %s_pos AS integer CHECK (VALUE > 0)", name))
			t.Cleanup(func() { h.exec(t, fmt.Sprintf("DROP TYPE %[1]s_mood; DROP DOMAIN %[1]s_pos", name)) })
			h.exec(t, fmt.Sprintf(ddl["postgres"], name))
			t.Cleanup(func() { h.exec(t, "DROP TABLE "+name) })
			tbl, err := h.s.Describe(t.Context(), name, "id")
			require.NoError(t, err)
			assert.Equal(t, name, tbl.Name)
			assert.Equal(t, "id", tbl.Schema.Key)
			assert.Equal(t, want[h.driver], tbl.Schema.Columns)
			return
		}
		tbl := h.describe(t, ddl)
		assert.Equal(t, "id", tbl.Schema.Key)
		assert.Equal(t, want[h.driver], tbl.Schema.Columns)
	})
}

func TestDescribeErrors(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		plain := h.table(t, map[string]string{
			"postgres": "CREATE TABLE %s (id bigint PRIMARY KEY, name text, f double precision)",
			"mysql":    "CREATE TABLE %s (id bigint PRIMARY KEY, name text, f double)",
		})
		composite := h.table(t, map[string]string{
			"postgres": "CREATE TABLE %s (a int, b text, PRIMARY KEY (a, b))",
			"mysql":    "CREATE TABLE %s (a int, b varchar(10), PRIMARY KEY (a, b))",
		})
		noKey := h.table(t, map[string]string{
			"postgres": "CREATE TABLE %s (id int, v text)",
			"mysql":    "CREATE TABLE %s (id int, v text)",
		})
		missing := testenv.UniqueName(t, "missing")
		cases := []struct {
			name, table, key, want string
		}{
			{"missing table", missing, "id", "store: table " + missing + " does not exist"},
			{"missing column", plain, "ycsb_key", "store: table " + plain + " has no column ycsb_key"},
			{"not the key", plain, "name", "store: column name is not the primary key of " + plain + ": its primary key is (id)"},
			{"composite key", composite, "a", "store: column a is not the primary key of " + composite + ": its primary key is (a, b)"},
			{"no key", noKey, "id", "store: column id is not the primary key of " + noKey + ": the table has no primary key"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				_, err := h.s.Describe(t.Context(), tc.table, tc.key)
				require.Error(t, err)
				assert.Equal(t, tc.want, err.Error())
			})
		}
	})
}

// Keys under which different ids name one row are refused: the cache
// would hold two documents, with two buffered writes, for one row.
func TestDescribeRejectsAliasingKeys(t *testing.T) {
	variants := map[string]map[string]string{
		"padded": {
			"postgres": "CREATE TABLE %s (id char(8) PRIMARY KEY, v int)",
			"mysql":    "CREATE TABLE %s (id varchar(64) COLLATE utf8mb4_bin PRIMARY KEY, v int)",
		},
		"case-insensitive": {
			"postgres": `CREATE TABLE %s (id text COLLATE "und-x-icu" PRIMARY KEY, v int)`,
			"mysql":    "CREATE TABLE %s (id varchar(64) COLLATE utf8mb4_general_ci PRIMARY KEY, v int)",
		},
	}
	eachStore(t, func(t *testing.T, h *harness) {
		for name, ddl := range variants {
			t.Run(name, func(t *testing.T) {
				if name == "case-insensitive" && h.driver == "postgres" {
					// A nondeterministic collation is needed for case folding.
					coll := testenv.UniqueName(t, "ci")
					h.exec(t, `CREATE COLLATION `+coll+` (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`)
					t.Cleanup(func() { h.exec(t, `DROP COLLATION IF EXISTS `+coll+` CASCADE`) })
					ddl = map[string]string{"postgres": `CREATE TABLE %s (id text COLLATE ` + coll + ` PRIMARY KEY, v int)`}
				}
				_, err := h.s.Describe(t.Context(), h.table(t, ddl), "id")
				if err == nil || !IsPermanent(err) {
					t.Fatalf("Describe accepted a key that aliases ids: %v", err)
				}
			})
		}
	})
}
