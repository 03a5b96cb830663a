package store

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/writeback/writeback/internal/sqlcheck"
)

// joinInserts joins runs of one single-row INSERT text, whoever's
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
	got := joinInserts(sqlcheck.Postgres, in)
	want := []batchStmt{
		{sql: "INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4), ($5, $6)", args: []any{1, 2, 3, 4, 5, 6}, ref: stmtRef{0, 0}, rows: 3},
		in[3], in[4], in[5], in[6], in[7], in[8], in[9], in[10],
	}
	require.Equal(t, want, got)

	var long []batchStmt
	for i := range maxJoinedRows + 3 {
		long = append(long, st(ins, i, 0, i, i))
	}
	got = joinInserts(sqlcheck.Postgres, long)
	require.Len(t, got, 2)
	require.Equal(t, maxJoinedRows, got[0].rows)
	require.Equal(t, 3, got[1].rows)
	require.Equal(t, stmtRef{maxJoinedRows, 0}, got[1].ref)
	require.Equal(t, "INSERT INTO t (a, b) VALUES ($1, $2), ($3, $4), ($5, $6)", got[1].sql)
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
		ts := "CAST(" + h.ph(4) + " AS timestamp)"
		if h.driver == "mysql" {
			ts = "CAST(" + h.ph(4) + " AS datetime(6))"
		}
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
		require.Error(t, err)
		require.True(t, IsPermanent(err), "a duplicate key is permanent: %v", err)
		var se *SessionError
		require.ErrorAs(t, err, &se)
		require.Equal(t, 1, se.Index)
		require.Equal(t, 2, se.Statement)
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
