package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/writeback/writeback/internal/sqlcheck"
)

// joinRuns joins runs of one single-row INSERT text, whoever's
// statements they are, and nothing else: other texts, other argument
// counts, clocks and multi-row INSERTs stay apart; a run longer than
// maxJoinedRows is cut.
func TestJoinInserts(t *testing.T) {
	ins := "INSERT INTO t (a, b) VALUES ($1, $2)"
	upd := "UPDATE t SET b = $1 WHERE a = $2"
	clock := "INSERT INTO t (a, b) VALUES ($1, now())"
	st := func(sql string, s, j int, args ...any) batchStmt {
		return batchStmt{sql: sql, args: args, ref: stmtRef{s, j}, rows: 1}
	}
	in := []batchStmt{
		st(ins, 0, 0, 1, 2), st(ins, 0, 1, 3, 4), st(ins, 1, 0, 5, 6), // across sessions
		st(upd, 1, 1, 7, 8),
		st(ins, 1, 2, 9, 10),                     // alone
		st(upd, 1, 3, 1, 1), st(upd, 1, 4, 2, 2), // not an INSERT
		st(clock, 2, 0, 1), st(clock, 2, 1, 2),
		st(ins, 2, 2, 1, 2), st(ins, 2, 3, 3), // another argument count
	}
	got := joinRuns(sqlcheck.Postgres, in, nil)
	want := []batchStmt{
		{sql: "INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4), ($5, $6)", args: []any{1, 2, 3, 4, 5, 6}, ref: stmtRef{0, 0}, rows: 3},
		in[3], in[4], in[5], in[6], in[7], in[8], in[9], in[10],
	}
	require.Equal(t, want, got)

	var long []batchStmt
	for i := range maxJoinedRows + 3 {
		long = append(long, st(ins, i, 0, i, i))
	}
	got = joinRuns(sqlcheck.Postgres, long, nil)
	require.Len(t, got, 2)
	require.Equal(t, maxJoinedRows, got[0].rows)
	require.Equal(t, 3, got[1].rows)
	require.Equal(t, stmtRef{maxJoinedRows, 0}, got[1].ref)
	require.Equal(t, "INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4), ($5, $6)", got[1].sql)
}

// joinRuns joins runs of one keyed write (PostgreSQL) in groups of
// distinct integer keys: a repeated key starts a new group, a key that is
// not an integer is sent alone, and a text whose types are unknown or
// whose keys are not integers is not joined.
func TestJoinKeyed(t *testing.T) {
	upd := "UPDATE t SET b = b + $1 WHERE a = $2 AND c = $3"
	del := "DELETE FROM t WHERE a = $1"
	untyped := "UPDATE t SET b = $1 WHERE a = $2"
	textKey := "UPDATE u SET b = $1 WHERE a = $2"
	types := func(sql string) ([]string, bool) {
		switch sql {
		case upd:
			return []string{"numeric", "int4", "int8"}, true
		case del:
			return []string{"int8"}, true
		case textKey:
			return []string{"int4", "text"}, true
		}
		return nil, false
	}
	st := func(sql string, s, j int, args ...any) batchStmt {
		return batchStmt{sql: sql, args: args, ref: stmtRef{s, j}, rows: 1}
	}
	in := []batchStmt{
		st(upd, 0, 0, "1", "1", "1"), st(upd, 0, 1, "2", "1", "2"), st(upd, 0, 2, "3", " 01", "1"), // the third repeats (1, 1)
		st(upd, 0, 3, "4", "2", "2"), st(upd, 0, 4, "5", "x", "2"), st(upd, 0, 5, "6", "3", "3"), // "x" is no integer
		st(del, 1, 0, "7"), st(del, 1, 1, "8"),
		st(untyped, 1, 2, "1", "1"), st(untyped, 1, 3, "1", "2"),
		st(textKey, 1, 4, "1", "1"), st(textKey, 1, 5, "1", "2"),
	}
	got := joinRuns(sqlcheck.Postgres, in, types)
	w, ok := sqlcheck.SingleKeyedWrite(sqlcheck.Postgres, upd)
	require.True(t, ok)
	d, ok := sqlcheck.SingleKeyedWrite(sqlcheck.Postgres, del)
	require.True(t, ok)
	ts, _ := types(upd)
	dts, _ := types(del)
	want := []batchStmt{
		{sql: w.Rows(2, 3, ts), args: []any{"1", "1", "1", "2", "1", "2"}, ref: stmtRef{0, 0}, rows: 2},
		{sql: w.Rows(2, 3, ts), args: []any{"3", " 01", "1", "4", "2", "2"}, ref: stmtRef{0, 2}, rows: 2},
		in[4], in[5],
		{sql: d.Rows(2, 1, dts), args: []any{"7", "8"}, ref: stmtRef{1, 0}, rows: 2},
		in[8], in[9], in[10], in[11],
	}
	require.Equal(t, want, got)
	require.Equal(t, in[4:6], joinRuns(sqlcheck.Postgres, in[4:6], types), "one joinable alone is sent as it is")
	short := []batchStmt{st(del, 2, 0), st(del, 2, 1)} // no argument for $1: the store's error, unjoined
	require.Equal(t, short, joinRuns(sqlcheck.Postgres, short, func(string) ([]string, bool) { return nil, true }))
	mshort := []batchStmt{st("DELETE FROM t WHERE a = ?", 2, 0), st("DELETE FROM t WHERE a = ?", 2, 1)}
	require.Equal(t, mshort, joinRuns(sqlcheck.MySQL, mshort, nil))
	require.Equal(t, in[:2], joinRuns(sqlcheck.Postgres, in[:2], nil), "no types: not joined")
}

var joinDDL = map[string]string{
	"postgres": "CREATE TABLE %s (id bigint PRIMARY KEY, n numeric(8,2), s varchar(40), t timestamp, j jsonb, k int)",
	"mysql":    "CREATE TABLE %s (id bigint PRIMARY KEY, n decimal(8,2), s varchar(40), t datetime(6), j json, k int)",
}

// A batch whose sessions insert rows one statement each — NULLs, JSON,
// casts, numbers as text, different column sets, updates between them —
// leaves exactly the rows those statements leave run one by one; and a
// joined INSERT that fails names the session and statement at fault, as
// unjoined statements do, with nothing applied.
func TestApplySessionsJoinedInserts(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		ss := sessionStore(t, h)
		ts := castTimestamp(h, 4)
		statements := func(tbl string) ([]Statement, []Statement) {
			ins := "INSERT INTO " + tbl + " (id, n, s, t, j) VALUES (" + h.ph(1) + ", " + h.ph(2) + ", " + h.ph(3) + ", " + ts + ", " + h.ph(5) + ")"
			short := "INSERT INTO " + tbl + " (id, k) VALUES (" + h.ph(1) + ", " + h.ph(2) + " + 1)"
			upd := "UPDATE " + tbl + " SET k = " + h.ph(1) + " WHERE id = " + h.ph(2)
			return []Statement{
					{SQL: ins, Args: args("1", "12.5", `"one"`, `"2026-11-29 10:00:00.123456"`, `{"a":[1,2],"b":null}`)},
					{SQL: ins, Args: args("2", "null", "null", "null", "null")},
					{SQL: ins, Args: args("3", "-0.01", `"thr\"ee"`, `"2026-11-29 10:00:01"`, `[true,"x"]`)},
					{SQL: upd, Args: args("7", "2")},
					{SQL: short, Args: args("4", "41")},
					{SQL: short, Args: args("5", "null")},
				}, []Statement{
					{SQL: short, Args: args("6", "1")},
					{SQL: ins, Args: args("7", "1", `"seven"`, "null", `{"z":"é"}`)},
					{SQL: ins, Args: args("8", "2", `"eight"`, "null", "3")},
				}
		}
		rows := func(tbl string) []json.RawMessage {
			out, err := ss.QueryJSON(t.Context(), "SELECT id, n, s, t, j, k FROM "+tbl+" ORDER BY id")
			require.NoError(t, err)
			return out
		}

		// The reference: every statement alone, in order.
		ref := h.table(t, joinDDL)
		a, b := statements(ref)
		for i, st := range append(a, b...) {
			_, err := ss.ApplySessions(t.Context(), []Session{{ID: newSessionID(t), Queue: "j/1", Seq: int64(i + 1), Statements: []Statement{st}}})
			require.NoError(t, err)
		}

		tbl := h.table(t, joinDDL)
		a, b = statements(tbl)
		s1 := Session{ID: newSessionID(t), Queue: "j/1", Seq: 1, Statements: a}
		s2 := Session{ID: newSessionID(t), Queue: "j/1", Seq: 2, Statements: b}
		applied, err := ss.ApplySessions(t.Context(), []Session{s1, s2})
		require.NoError(t, err)
		require.Equal(t, []bool{true, true}, applied)
		require.Equal(t, rows(ref), rows(tbl))
		require.Len(t, rows(tbl), 8)
		t.Cleanup(func() { _, _ = ss.CompactAppliedSessions(context.Background(), []string{s1.ID, s2.ID}) })

		// A duplicate key in the middle of a joined run: the error names
		// session 1 (of 0, 1), statement 1, and nothing is applied.
		bad := h.table(t, joinDDL)
		a, b = statements(bad)
		b[2].Args[0] = json.RawMessage("7") // the same id as b[1]
		s3 := Session{ID: newSessionID(t), Queue: "j/2", Seq: 1, Statements: a}
		s4 := Session{ID: newSessionID(t), Queue: "j/2", Seq: 2, Statements: b}
		_, err = ss.ApplySessions(t.Context(), []Session{s3, s4})
		requireStatementError(t, err, 1, 2)
		require.Empty(t, rows(bad))
	})
}

// TestApplySessionsJoinsRuns counts the INSERT statements the store runs
// for a batch whose runs of one INSERT text span statements and sessions:
// one per run, not one per row. PostgreSQL counts them with a
// statement-level trigger, MariaDB (row triggers only) with the apply
// connection's Com_insert.
func TestApplySessionsJoinsRuns(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		ss := sessionStore(t, h)
		tbl := h.table(t, joinDDL)
		ins := "INSERT INTO " + tbl + " (id, n) VALUES (" + h.ph(1) + ", " + h.ph(2) + ")"
		short := "INSERT INTO " + tbl + " (id, k) VALUES (" + h.ph(1) + ", " + h.ph(2) + ")"
		upd := "UPDATE " + tbl + " SET k = " + h.ph(1) + " WHERE id = " + h.ph(2)
		s1 := Session{ID: newSessionID(t), Queue: "j/3", Seq: 1, Statements: []Statement{
			{SQL: ins, Args: args("1", "1")}, {SQL: ins, Args: args("2", "2")}, {SQL: ins, Args: args("3", "3")},
			{SQL: upd, Args: args("7", "2")},
			{SQL: short, Args: args("4", "4")}, {SQL: short, Args: args("5", "5")},
		}}
		s2 := Session{ID: newSessionID(t), Queue: "j/3", Seq: 2, Statements: []Statement{
			{SQL: short, Args: args("6", "6")}, {SQL: ins, Args: args("7", "7")}, {SQL: ins, Args: args("8", "8")},
		}}
		t.Cleanup(func() { _, _ = ss.CompactAppliedSessions(context.Background(), []string{s1.ID, s2.ID}) })
		apply := func() {
			applied, err := ss.ApplySessions(t.Context(), []Session{s1, s2})
			require.NoError(t, err)
			require.Equal(t, []bool{true, true}, applied)
		}
		switch st := h.s.(type) {
		case *pgStore:
			counter := h.table(t, map[string]string{"postgres": "CREATE TABLE %s (n int)"})
			fn := counter + "_count"
			h.exec(t, "CREATE FUNCTION "+fn+"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO "+counter+" VALUES (1); RETURN NULL; END $$")
			t.Cleanup(func() { _, _ = st.pool.Exec(context.Background(), "DROP FUNCTION IF EXISTS "+fn+"() CASCADE") })
			h.exec(t, "CREATE TRIGGER "+fn+" AFTER INSERT ON "+tbl+" FOR EACH STATEMENT EXECUTE FUNCTION "+fn+"()")
			apply()
			var n int
			require.NoError(t, st.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+counter).Scan(&n))
			require.Equal(t, 3, n, "INSERT statements on the table: want one per run of a text (3), not one per row (8)")
		case *myStore:
			st.applyDB.SetMaxOpenConns(1) // the status below is the apply connection's
			inserts := func() int {
				var name string
				var n int
				require.NoError(t, st.applyDB.QueryRowContext(t.Context(), "SHOW SESSION STATUS LIKE 'Com_insert'").Scan(&name, &n))
				return n
			}
			before := inserts()
			apply()
			require.Equal(t, 4, inserts()-before, "INSERT statements: want the applied records' and one per run of a text (1 + 3), not one per row (1 + 8)")
		default:
			t.Fatalf("no INSERT count for %T", h.s)
		}
	})
}

// A batch whose sessions update and delete rows by key one statement each
// — runs with a repeated key, keys written differently ("06", " 7"), a
// run across two sessions, two key columns — leaves exactly the rows those
// statements leave run one by one; the runs are joined (PostgreSQL: a
// statement-level trigger counts the UPDATEs, one per group of distinct
// keys; MariaDB, which joins only integer arguments: the apply
// connection's statement counters); and a joined UPDATE that fails names
// the session and statement at fault, as unjoined statements do, with
// nothing applied.
func TestApplySessionsJoinedKeyed(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		ss := sessionStore(t, h)
		ts := castTimestamp(h, 1)
		seed := func(tbl string) {
			for id := 1; id <= 8; id++ {
				h.exec(t, fmt.Sprintf("INSERT INTO %s (id, n, s, k) VALUES (%d, %d.5, 'row %d', %d)", tbl, id, id, id, id%2))
			}
		}
		statements := func(tbl string) ([]Statement, []Statement) {
			upd := "UPDATE " + tbl + " SET n = n + " + h.ph(1) + ", k = coalesce(k, 0) + 10, s = " + h.ph(2) + " WHERE id = " + h.ph(3)
			del := "DELETE FROM " + tbl + " WHERE id = " + h.ph(1)
			two := "UPDATE " + tbl + " SET t = " + ts + ", j = " + h.ph(2) + " WHERE id = " + h.ph(3) + " AND k = " + h.ph(4)
			inc := "UPDATE " + tbl + " SET k = coalesce(k, 0) + " + h.ph(1) + " WHERE id = " + h.ph(2)
			return []Statement{
					{SQL: upd, Args: args("1.25", `"one"`, "1")},
					{SQL: upd, Args: args("2", `"two"`, "2")},
					{SQL: upd, Args: args("-1", `"one again"`, "1")}, // a repeated key: a new group
					{SQL: upd, Args: args("3", "null", "3")},
					{SQL: del, Args: args("4")},
					{SQL: del, Args: args("5")},
					{SQL: two, Args: args(`"2026-11-30 10:00:00.5"`, `{"a":1}`, "6", "0")},
				}, []Statement{
					{SQL: two, Args: args(`"2026-11-30 10:00:01"`, `[1,2]`, "7", "1")},
					{SQL: two, Args: args(`"2026-11-30 10:00:02"`, `null`, "8", "1")}, // k is 0: no row
					{SQL: upd, Args: args("6", `"six"`, `"06"`)},
					{SQL: upd, Args: args("7", `"seven"`, `" 7"`)},
					{SQL: inc, Args: args("1", "1")}, // integers only: joined on MySQL too
					{SQL: inc, Args: args("2", "2")},
					{SQL: inc, Args: args("3", "1")},
					{SQL: inc, Args: args("4", "3")},
				}
		}
		rows := func(tbl string) []json.RawMessage {
			out, err := ss.QueryJSON(t.Context(), "SELECT id, n, s, t, j, k FROM "+tbl+" ORDER BY id")
			require.NoError(t, err)
			return out
		}

		// The reference: every statement alone, in order.
		ref := h.table(t, joinDDL)
		seed(ref)
		a, b := statements(ref)
		var ids []string
		for i, st := range append(a, b...) {
			s := Session{ID: newSessionID(t), Queue: "k/1", Seq: int64(i + 1), Statements: []Statement{st}}
			_, err := ss.ApplySessions(t.Context(), []Session{s})
			require.NoError(t, err)
			ids = append(ids, s.ID)
		}

		tbl := h.table(t, joinDDL)
		seed(tbl)
		var updates func() int
		switch st := h.s.(type) {
		case *myStore:
			// the apply connection's statements: joined ones are multi-table
			st.applyDB.SetMaxOpenConns(1)
			updates = func() int {
				n := 0
				for _, v := range []string{"Com_update", "Com_update_multi", "Com_delete", "Com_delete_multi"} {
					var name string
					var c int
					require.NoError(t, st.applyDB.QueryRowContext(t.Context(), "SHOW SESSION STATUS LIKE '"+v+"'").Scan(&name, &c))
					n = n*100 + c%100
				}
				return n
			}
		case *pgStore:
			counter := h.table(t, map[string]string{"postgres": "CREATE TABLE %s (n int)"})
			fn := counter + "_count"
			h.exec(t, "CREATE FUNCTION "+fn+"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO "+counter+" VALUES (1); RETURN NULL; END $$")
			t.Cleanup(func() { _, _ = st.pool.Exec(context.Background(), "DROP FUNCTION IF EXISTS "+fn+"() CASCADE") })
			h.exec(t, "CREATE TRIGGER "+fn+" AFTER UPDATE ON "+tbl+" FOR EACH STATEMENT EXECUTE FUNCTION "+fn+"()")
			updates = func() int {
				var n int
				require.NoError(t, st.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+counter).Scan(&n))
				return n
			}
		}
		before := updates()
		a, b = statements(tbl)
		s1 := Session{ID: newSessionID(t), Queue: "k/1", Seq: 1, Statements: a}
		s2 := Session{ID: newSessionID(t), Queue: "k/1", Seq: 2, Statements: b}
		ids = append(ids, s1.ID, s2.ID)
		t.Cleanup(func() { _, _ = ss.CompactAppliedSessions(context.Background(), ids) })
		applied, err := ss.ApplySessions(t.Context(), []Session{s1, s2})
		require.NoError(t, err)
		require.Equal(t, []bool{true, true}, applied)
		require.Equal(t, rows(ref), rows(tbl))
		if h.driver == "postgres" {
			// upd (1, 2), (1, 3); two (6, 7, 8); upd (06, 7); inc (1, 2),
			// (1, 3): six, not thirteen.
			require.Equal(t, 6, updates()-before, "UPDATE statements: want one per group of distinct keys")
		} else {
			// Joined only where every argument is an integer: upd and two
			// one by one (9), inc (1, 2), (1, 3) joined (2 multi-table);
			// the DELETEs (4, 5) joined (1 multi-table).
			require.Equal(t, 9_02_00_01, updates()-before, "Com_update, Com_update_multi, Com_delete, Com_delete_multi (two digits each)")
		}

		// A value too long in the second execution of a joined run: the
		// error names session 1 (of 0, 1), statement 3, nothing applied.
		bad := h.table(t, joinDDL)
		seed(bad)
		was := rows(bad)
		a, b = statements(bad)
		b[3].Args[1] = json.RawMessage(`"` + strings.Repeat("x", 41) + `"`)
		s3 := Session{ID: newSessionID(t), Queue: "k/2", Seq: 1, Statements: a}
		s4 := Session{ID: newSessionID(t), Queue: "k/2", Seq: 2, Statements: b}
		_, err = ss.ApplySessions(t.Context(), []Session{s3, s4})
		requireStatementError(t, err, 1, 3)
		require.Equal(t, was, rows(bad))
	})
}

// requireStatementError checks that err is a permanent failure of the
// batch's session i, statement j: the data's fault, as the statement run
// alone would report it.
func requireStatementError(t *testing.T, err error, i, j int) {
	t.Helper()
	require.Error(t, err)
	require.True(t, IsPermanent(err), "permanent: %v", err)
	var se *SessionError
	require.ErrorAs(t, err, &se)
	require.Equal(t, i, se.Index)
	require.Equal(t, j, se.Statement)
}

// castTimestamp is placeholder i cast to the store's timestamp type.
func castTimestamp(h *harness, i int) string {
	if h.driver == "mysql" {
		return "CAST(" + h.ph(i) + " AS datetime(6))"
	}
	return "CAST(" + h.ph(i) + " AS timestamp)"
}
