package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/writeback/writeback/internal/testenv"
)

// ph returns the i-th (1-based) placeholder of the harness's dialect.
func (h *harness) ph(i int) string {
	if h.driver == "postgres" {
		return fmt.Sprintf("$%d", i)
	}
	return "?"
}

func sessionStore(t *testing.T, h *harness) SessionStore {
	t.Helper()
	ss, ok := Sessions(h.s)
	require.True(t, ok, "%T has no SessionStore", h.s)
	require.NoError(t, ss.PrepareSessions(t.Context()))
	require.NoError(t, ss.PrepareSessions(t.Context()), "PrepareSessions must be idempotent")
	return ss
}

// lockingStore is sessionStore with the session locks' table prepared.
func lockingStore(t *testing.T, h *harness) SessionStore {
	t.Helper()
	ss := sessionStore(t, h)
	if lp, ok := ss.(SessionLockPreparer); ok {
		require.NoError(t, lp.PrepareSessionLocks(t.Context()))
	}
	return ss
}

func args(vs ...string) []json.RawMessage {
	out := make([]json.RawMessage, len(vs))
	for i, v := range vs {
		out[i] = json.RawMessage(v)
	}
	return out
}

func newSessionID(t *testing.T) string {
	return strings.ReplaceAll(testenv.UniqueName(t, "s"), "_", "")
}

func (h *harness) balances(t *testing.T, table string) map[int64]string {
	t.Helper()
	ss, _ := Sessions(h.s)
	rows, err := ss.QueryJSON(t.Context(), "SELECT id, bal FROM "+table+" ORDER BY id")
	require.NoError(t, err)
	out := map[int64]string{}
	for _, r := range rows {
		var v struct {
			ID  int64           `json:"id"`
			Bal json.RawMessage `json:"bal"`
		}
		require.NoError(t, json.Unmarshal(r, &v))
		out[v.ID] = string(v.Bal)
	}
	return out
}

var accountDDL = map[string]string{
	"postgres": "CREATE TABLE %s (id bigint PRIMARY KEY, bal numeric(12,2) NOT NULL CHECK (bal >= 0))",
	"mysql":    "CREATE TABLE %s (id bigint PRIMARY KEY, bal decimal(12,2) NOT NULL CHECK (bal >= 0))",
}

func TestApplySessionsExactlyOnceInOrder(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		ss := sessionStore(t, h)
		tbl := h.table(t, accountDDL)
		h.exec(t, "INSERT INTO "+tbl+" (id, bal) VALUES (1, 100), (2, 0)")
		upd := "UPDATE " + tbl + " SET bal = bal + " + h.ph(1) + " WHERE id = " + h.ph(2)
		set := "UPDATE " + tbl + " SET bal = " + h.ph(1) + " WHERE id = " + h.ph(2)
		s1 := Session{ID: newSessionID(t), Queue: "bank/1", Seq: 1, Statements: []Statement{
			{SQL: upd, Args: args("-10.25", "1")}, {SQL: upd, Args: args("10.25", `"2"`)},
		}}
		// Not commutative with s1: applied out of order, 2 would end at 10.25.
		s2 := Session{ID: newSessionID(t), Queue: "bank/1", Seq: 2, Statements: []Statement{{SQL: set, Args: args("7", "2")}}}
		applied, err := ss.ApplySessions(t.Context(), []Session{s1, s2})
		require.NoError(t, err)
		require.Equal(t, []bool{true, true}, applied)
		require.Equal(t, map[int64]string{1: "89.75", 2: "7.00"}, h.balances(t, tbl))

		// A replay (the applier died before popping) skips both.
		s3 := Session{ID: newSessionID(t), Queue: "bank/1", Seq: 3, Statements: []Statement{{SQL: upd, Args: args("1", "1")}}}
		applied, err = ss.ApplySessions(t.Context(), []Session{s1, s2, s3})
		require.NoError(t, err)
		require.Equal(t, []bool{false, false, true}, applied)
		require.Equal(t, map[int64]string{1: "90.75", 2: "7.00"}, h.balances(t, tbl))

		ids := []string{s1.ID, s2.ID, s3.ID}
		t.Cleanup(func() { _, _ = ss.CompactAppliedSessions(context.Background(), ids) })
		n, err := ss.CompactAppliedSessions(t.Context(), ids[:2])
		require.NoError(t, err)
		require.Equal(t, 2, n)
	})
}

func TestApplySessionsRejectionNamesTheSession(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		ss := sessionStore(t, h)
		tbl := h.table(t, accountDDL)
		h.exec(t, "INSERT INTO "+tbl+" (id, bal) VALUES (1, 5)")
		upd := "UPDATE " + tbl + " SET bal = bal + " + h.ph(1) + " WHERE id = " + h.ph(2)
		good := Session{ID: newSessionID(t), Queue: "q/1", Seq: 1, Statements: []Statement{{SQL: upd, Args: args("1", "1")}}}
		bad := Session{ID: newSessionID(t), Queue: "q/1", Seq: 2, Statements: []Statement{
			{SQL: upd, Args: args("1", "1")}, {SQL: upd, Args: args("-100", "1")}, // violates the check
		}}
		_, err := ss.ApplySessions(t.Context(), []Session{good, bad})
		require.Error(t, err)
		require.True(t, IsPermanent(err), "a check violation is permanent: %v", err)
		i, ok := FailedSession(err)
		require.True(t, ok, "the error names no session: %v", err)
		require.Equal(t, 1, i)
		var se *SessionError
		require.ErrorAs(t, err, &se)
		require.Equal(t, 1, se.Statement)
		// Nothing was committed, not even the good session.
		require.Equal(t, map[int64]string{1: "5.00"}, h.balances(t, tbl))
		applied, err := ss.ApplySessions(t.Context(), []Session{good})
		require.NoError(t, err)
		require.Equal(t, []bool{true}, applied)
		t.Cleanup(func() { _, _ = ss.CompactAppliedSessions(context.Background(), []string{good.ID}) })
	})
}

// Many appliers racing over the same sessions apply each exactly once.
func TestApplySessionsConcurrent(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		ss := sessionStore(t, h)
		tbl := h.table(t, accountDDL)
		h.exec(t, "INSERT INTO "+tbl+" (id, bal) VALUES (1, 0)")
		upd := "UPDATE " + tbl + " SET bal = bal + " + h.ph(1) + " WHERE id = " + h.ph(2)
		var sessions []Session
		for i := range 20 {
			sessions = append(sessions, Session{ID: newSessionID(t), Queue: "q/1", Seq: int64(i + 1), Statements: []Statement{{SQL: upd, Args: args("1", "1")}}})
		}
		t.Cleanup(func() {
			var ids []string
			for _, s := range sessions {
				ids = append(ids, s.ID)
			}
			_, _ = ss.CompactAppliedSessions(context.Background(), ids)
		})
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Each applier takes growing prefixes, as appliers and
				// missing readers do.
				for end := 1 + w; end <= len(sessions); end += 3 {
					for {
						_, err := ss.ApplySessions(context.Background(), sessions[:end])
						if err == nil {
							break
						}
						if IsPermanent(err) {
							t.Error(err)
							return
						}
					}
				}
				for {
					if _, err := ss.ApplySessions(context.Background(), sessions); err == nil || IsPermanent(err) {
						return
					}
				}
			}()
		}
		wg.Wait()
		require.Equal(t, map[int64]string{1: "20.00"}, h.balances(t, tbl))
	})
}

func TestQueryJSON(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		ss := sessionStore(t, h)
		tbl := h.table(t, map[string]string{
			"postgres": "CREATE TABLE %s (id bigint PRIMARY KEY, name text, bal numeric(10,2), f float8, ok boolean, j jsonb)",
			"mysql":    "CREATE TABLE %s (id bigint PRIMARY KEY, name varchar(20), bal decimal(10,2), f double, ok boolean, j json)",
		})
		h.exec(t, "INSERT INTO "+tbl+` (id, name, bal, f, ok, j) VALUES (7, 'a"b', 1.50, 0.25, true, '{"x": [1]}'), (8, NULL, NULL, NULL, NULL, NULL)`)
		rows, err := ss.QueryJSON(t.Context(), "SELECT id, name, bal, f, ok, j FROM "+tbl+" WHERE id >= "+h.ph(1)+" ORDER BY id", "7")
		require.NoError(t, err)
		require.Len(t, rows, 2)
		j := `{"x": [1]}`
		if h.driver == "mysql" {
			j = `"{\"x\": [1]}"` // MariaDB's JSON is LONGTEXT: a string
		}
		okv := "true"
		if h.driver == "mysql" {
			okv = "1" // MySQL's boolean is tinyint(1)
		}
		require.Equal(t, `{"id":7,"name":"a\"b","bal":1.50,"f":0.25,"ok":`+okv+`,"j":`+j+`}`, string(rows[0]))
		require.Equal(t, `{"id":8,"name":null,"bal":null,"f":null,"ok":null,"j":null}`, string(rows[1]))
		n, err := ss.CountAppliedSessions(t.Context())
		require.NoError(t, err)
		require.GreaterOrEqual(t, n, int64(0))
	})
}

// On MySQL a batch none of whose sessions was applied goes in one
// multi-statement packet; one that holds an applied session, or a
// statement the store refuses, leaves nothing behind and is left to the
// stepwise path, which tells which.
func TestApplySessionsOnePacketOnMySQL(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		my, ok := h.s.(*myStore)
		if !ok {
			return
		}
		ss := lockingStore(t, h)
		tbl := h.table(t, accountDDL)
		h.exec(t, "INSERT INTO "+tbl+" (id, bal) VALUES (1, 10), (2, 0)")
		upd := "UPDATE " + tbl + " SET bal = bal + ? WHERE id = ?"
		move := func(seq int64, amt string) Session {
			return Session{ID: newSessionID(t), Queue: "q/1", Seq: seq, Statements: []Statement{
				{SQL: upd, Args: args("-"+amt, "1")}, {SQL: upd, Args: args(amt, "2")},
			}}
		}
		s1, s2 := move(1, "3"), move(2, "4")
		t.Cleanup(func() { _, _ = ss.CompactAppliedSessions(context.Background(), []string{s1.ID, s2.ID}) })
		applied, err := my.applySessionsPacket(t.Context(), []Session{s1, s2}, true)
		require.True(t, applied != nil && err == nil, "a fresh batch goes in one packet (%v)", err)
		require.Equal(t, []bool{true, true}, applied)
		require.Equal(t, map[int64]string{1: "3.00", 2: "7.00"}, h.balances(t, tbl))

		s3 := move(3, "1")
		t.Cleanup(func() { _, _ = ss.CompactAppliedSessions(context.Background(), []string{s3.ID}) })
		applied, err = my.applySessionsPacket(t.Context(), []Session{s2, s3}, true)
		require.False(t, applied != nil || err != nil, "a batch with an applied session (%v)", err)
		applied, err = my.applySessionsPacket(t.Context(), []Session{s3, move(4, "5")}, true)
		require.False(t, applied != nil || err != nil, "a batch the CHECK refuses (%v)", err)
		require.Equal(t, map[int64]string{1: "3.00", 2: "7.00"}, h.balances(t, tbl), "a refused packet left something behind")
		applied, err = ss.ApplySessions(t.Context(), []Session{s2, s3})
		require.NoError(t, err)
		require.Equal(t, []bool{false, true}, applied)
		require.Equal(t, map[int64]string{1: "2.00", 2: "8.00"}, h.balances(t, tbl))

		// A batch under a lock reads what is applied once it holds the
		// lock and leaves that out of its packet.
		s5 := move(5, "1")
		t.Cleanup(func() { _, _ = ss.CompactAppliedSessions(context.Background(), []string{s5.ID}) })
		locked := []Session{s3, s5}
		for i := range locked {
			locked[i].Lock = "fam"
		}
		applied, err = my.applySessionsPacket(t.Context(), locked, true)
		require.NoError(t, err)
		require.Equal(t, []bool{false, true}, applied, "a locked batch with an applied session goes in a packet without it")
		require.Equal(t, map[int64]string{1: "1.00", 2: "9.00"}, h.balances(t, tbl))
		applied, err = my.applySessionsPacket(t.Context(), locked, true)
		require.NoError(t, err)
		require.Equal(t, []bool{false, false}, applied, "a locked batch applied before")
		require.Equal(t, map[int64]string{1: "1.00", 2: "9.00"}, h.balances(t, tbl))
	})
}

// On MySQL two batches that change the same rows in opposite orders
// deadlock; the one InnoDB picks is run again as a packet, not statement
// by statement (a round trip each), and both apply exactly once.
func TestApplySessionsDeadlockRerunsPacketOnMySQL(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		my, ok := h.s.(*myStore)
		if !ok {
			return
		}
		ss := sessionStore(t, h)
		tbl := h.table(t, accountDDL)
		h.exec(t, "INSERT INTO "+tbl+" (id, bal) VALUES (1, 10), (2, 10)")
		upd := "UPDATE " + tbl + " SET bal = bal + ? WHERE id = ?"
		// Each takes its first row, waits for the other to take its own,
		// then asks for the other's.
		cross := func(seq int64, first, second string) Session {
			return Session{ID: newSessionID(t), Queue: "q/" + first, Seq: seq, Statements: []Statement{
				{SQL: upd, Args: args("1", first)}, {SQL: "DO SLEEP(0.3)"}, {SQL: upd, Args: args("1", second)},
			}}
		}
		a, b := cross(1, "1", "2"), cross(1, "2", "1")
		t.Cleanup(func() { _, _ = ss.CompactAppliedSessions(context.Background(), []string{a.ID, b.ID}) })
		before := my.stepwise.Load()
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, batch := range []Session{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = ss.ApplySessions(t.Context(), []Session{batch})
			}()
		}
		wg.Wait()
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
		require.Equal(t, map[int64]string{1: "12.00", 2: "12.00"}, h.balances(t, tbl), "each batch applied exactly once")
		require.Equal(t, before, my.stepwise.Load(), "a deadlocked batch went the stepwise way")
	})
}

// On PostgreSQL a session batch waits at most pgSessionLockTimeout for a
// row lock: the batch's own transaction says so (a statement of the batch
// records the setting it runs under), and a batch that waits past it
// fails with an error retried like a deadlock.
func TestApplySessionsLockTimeoutOnPostgres(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		if h.driver != "postgres" {
			return
		}
		ss := sessionStore(t, h)
		tbl := h.table(t, map[string]string{"postgres": "CREATE TABLE %s (id int PRIMARY KEY, v text)"})
		h.exec(t, "INSERT INTO "+tbl+" (id, v) VALUES (1, '')")
		s1 := Session{ID: newSessionID(t), Queue: "q/1", Seq: 1, Statements: []Statement{
			{SQL: "UPDATE " + tbl + " SET v = current_setting('lock_timeout') WHERE id = $1", Args: args("1")},
		}}
		t.Cleanup(func() { _, _ = ss.CompactAppliedSessions(context.Background(), []string{s1.ID}) })
		_, err := ss.ApplySessions(t.Context(), []Session{s1})
		require.NoError(t, err)
		rows, err := ss.QueryJSON(t.Context(), "SELECT v FROM "+tbl+" WHERE id = 1")
		require.NoError(t, err)
		require.JSONEq(t, `{"v":"250ms"}`, string(rows[0]))

		// Another transaction holds the row: the batch gives up (55P03,
		// retryable), it does not wait for deadlock_timeout or forever.
		hold, err := h.s.(*pgStore).pool.Begin(t.Context())
		require.NoError(t, err)
		defer hold.Rollback(context.Background())
		_, err = hold.Exec(t.Context(), "UPDATE "+tbl+" SET v = 'held' WHERE id = 1")
		require.NoError(t, err)
		s2 := Session{ID: newSessionID(t), Queue: "q/1", Seq: 2, Statements: []Statement{
			{SQL: "UPDATE " + tbl + " SET v = 'late' WHERE id = $1", Args: args("1")},
		}}
		_, err = ss.ApplySessions(t.Context(), []Session{s2})
		require.Error(t, err)
		require.True(t, pgRetryable(err), "a lock wait past lock_timeout must be retryable: %v", err)
		require.False(t, IsPermanent(err), "a lock wait is not the session's fault: %v", err)
	})
}

// Batches naming the same Session.Lock are applied one at a time: two
// batches of different queues, each sleeping between its first and its
// last statement, never overlap under one lock (the second waits before
// its first statement), and do overlap under two locks (which shows that
// the check sees overlap at all). A batch whose sessions name different
// locks is refused.
func TestApplySessionsLockOneAtATime(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		ss := lockingStore(t, h)
		ddl := map[string]string{
			"postgres": "CREATE TABLE %s (who text, phase text, at timestamptz)",
			"mysql":    "CREATE TABLE %s (who varchar(8), phase varchar(8), at datetime(6))",
		}
		tbl := h.table(t, ddl)
		now, sleep := "clock_timestamp()", "SELECT pg_sleep(0.5)"
		if h.driver == "mysql" {
			now, sleep = "SYSDATE(6)", "DO SLEEP(0.5)"
		}
		mark := "INSERT INTO " + tbl + " (who, phase, at) VALUES (" + h.ph(1) + ", " + h.ph(2) + ", " + now + ")"
		var ids []string
		t.Cleanup(func() { _, _ = ss.CompactAppliedSessions(context.Background(), ids) })
		batch := func(who, lock string) []Session {
			s := Session{ID: newSessionID(t), Queue: "q/" + who, Seq: 1, Lock: lock, Statements: []Statement{
				{SQL: mark, Args: args(`"`+who+`"`, `"start"`)}, {SQL: sleep}, {SQL: mark, Args: args(`"`+who+`"`, `"end"`)},
			}}
			ids = append(ids, s.ID)
			return []Session{s}
		}
		// overlap applies batchA and, 100 ms later, batchB (batches of who
		// a and b) and reports whether their first-to-last statement
		// intervals overlapped.
		apply := func(sessions []Session) error { _, err := ss.ApplySessions(t.Context(), sessions); return err }
		overlap := func(a, b string, batchA, batchB []Session) bool {
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i, sessions := range [][]Session{batchA, batchB} {
				wg.Go(func() { errs[i] = apply(sessions) })
				time.Sleep(100 * time.Millisecond) // a first, b while a sleeps
			}
			wg.Wait()
			require.NoError(t, errs[0])
			require.NoError(t, errs[1])
			q := "SELECT count(*) AS n FROM " + tbl + " s1 JOIN " + tbl + " e1 ON e1.who = s1.who AND e1.phase = 'end' " +
				"JOIN " + tbl + " s2 ON s2.who = " + h.ph(2) + " AND s2.phase = 'start' JOIN " + tbl + " e2 ON e2.who = s2.who AND e2.phase = 'end' " +
				"WHERE s1.who = " + h.ph(1) + " AND s1.phase = 'start' AND s1.at < e2.at AND s2.at < e1.at"
			rows, err := ss.QueryJSON(t.Context(), q, a, b)
			require.NoError(t, err)
			require.Len(t, rows, 1)
			var n struct{ N int }
			require.NoError(t, json.Unmarshal(rows[0], &n))
			return n.N > 0
		}
		require.False(t, overlap("a", "b", batch("a", "fam"), batch("b", "fam")), "two batches under one lock ran at the same time")
		require.True(t, overlap("c", "d", batch("c", "fam1"), batch("d", "fam2")), "two batches under different locks waited for each other")
		// A batch holding a session applied before (a replay: MySQL's
		// stepwise way) takes the lock too.
		replayed := batch("g", "fam")
		_, err := ss.ApplySessions(t.Context(), replayed)
		require.NoError(t, err)
		h.exec(t, "DELETE FROM "+tbl+" WHERE who = 'g'")
		replay := append(replayed, batch("g", "fam")...)
		replay[1].Seq = 2
		require.False(t, overlap("g", "h", replay, batch("h", "fam")), "a replayed batch and another under one lock ran at the same time")
		if my, ok := h.s.(*myStore); ok { // MySQL's stepwise way takes the lock too
			apply = func(sessions []Session) error {
				if sessions[0].Queue == "q/i" {
					_, err := my.applySessionsStepwise(t.Context(), sessions)
					return err
				}
				_, err := ss.ApplySessions(t.Context(), sessions)
				return err
			}
			require.False(t, overlap("i", "j", batch("i", "fam"), batch("j", "fam")), "a stepwise batch and another under one lock ran at the same time")
		}

		mixed := append(batch("e", "fam"), batch("f", "other")...)
		mixed[1].Queue = "q/e"
		_, err = ss.ApplySessions(t.Context(), mixed)
		require.ErrorContains(t, err, "a batch takes one lock")
	})
}

// A batch that cannot take its lock (another transaction holds it past the
// batch's deadline) fails with a transient error, applies nothing, and
// applies once the lock is free: a lock is never the sessions' fault.
func TestApplySessionsLockHeldElsewhere(t *testing.T) {
	eachStore(t, func(t *testing.T, h *harness) {
		ss := lockingStore(t, h)
		tbl := h.table(t, accountDDL)
		h.exec(t, "INSERT INTO "+tbl+" (id, bal) VALUES (1, 0)")
		s1 := Session{ID: newSessionID(t), Queue: "q/1", Seq: 1, Lock: "held", Statements: []Statement{
			{SQL: "UPDATE " + tbl + " SET bal = bal + 1 WHERE id = " + h.ph(1), Args: args("1")}}}
		t.Cleanup(func() { _, _ = ss.CompactAppliedSessions(context.Background(), []string{s1.ID}) })
		var release func()
		switch st := h.s.(type) {
		case *pgStore:
			tx, err := st.pool.Begin(t.Context())
			require.NoError(t, err)
			class, obj := pgSessionLockKeys("held")
			_, err = tx.Exec(t.Context(), "SELECT pg_advisory_xact_lock($1::int4, $2::int4)", class, obj)
			require.NoError(t, err)
			release = func() { _ = tx.Rollback(context.Background()) }
		case *myStore:
			tx, err := st.db.BeginTx(t.Context(), nil)
			require.NoError(t, err)
			_, err = tx.ExecContext(t.Context(), myTakeSessionLock, "held")
			require.NoError(t, err)
			release = func() { _ = tx.Rollback() }
		}
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		_, err := ss.ApplySessions(ctx, []Session{s1})
		cancel()
		require.Error(t, err)
		require.False(t, IsPermanent(err), "waiting for a lock is not the session's fault: %v", err)
		release()
		require.Equal(t, map[int64]string{1: "0.00"}, h.balances(t, tbl), "a batch that did not get its lock applied something")
		applied, err := ss.ApplySessions(t.Context(), []Session{s1})
		require.NoError(t, err)
		require.Equal(t, []bool{true}, applied)
		require.Equal(t, map[int64]string{1: "1.00"}, h.balances(t, tbl))
	})
}

// QueryJSON renders every kind of column as encoding/json would render
// the value: numbers as they are, booleans as the store has them (MariaDB's
// are tinyint), JSON columns as JSON (MariaDB's JSON is text: a string),
// text (quotes, <>&, non-ASCII, control characters) as a JSON string, NULL
// as null; and a session's string arguments (plain and escaped) arrive
// as the strings they encode.
func TestQueryJSONKinds(t *testing.T) {
	ddl := map[string]string{
		"postgres": "CREATE TABLE %s (id bigint PRIMARY KEY, n numeric(8,2), f double precision, b boolean, j jsonb, s text, z text)",
		"mysql":    "CREATE TABLE %s (id bigint PRIMARY KEY, n decimal(8,2), f double, b boolean, j json, s text, z text)",
	}
	text := "q\"uote <b>&amp; é \u2028 tab\t back\\slash"
	eachStore(t, func(t *testing.T, h *harness) {
		ss := sessionStore(t, h)
		tbl := h.table(t, ddl)
		ins := fmt.Sprintf("INSERT INTO %s (id, n, f, b, j, s, z) VALUES (%s, %s, %s, %s, %s, %s, %s)", tbl,
			h.ph(1), h.ph(2), h.ph(3), h.ph(4), h.ph(5), h.ph(6), h.ph(7))
		quoted, err := json.Marshal(text)
		require.NoError(t, err)
		s := Session{ID: newSessionID(t), Queue: "kinds/1", Seq: 1, Statements: []Statement{
			{SQL: ins, Args: args("1", "12.50", "-1.5e-3", "true", `"{\"a\":[1,2]}"`, string(quoted), "null")},
			{SQL: ins, Args: args("2", "0", "2", "false", `"[]"`, `"plain"`, `"z"`)},
		}}
		t.Cleanup(func() { _, _ = ss.CompactAppliedSessions(context.Background(), []string{s.ID}) })
		applied, err := ss.ApplySessions(t.Context(), []Session{s})
		require.NoError(t, err)
		require.Equal(t, []bool{true}, applied)

		rows, err := ss.QueryJSON(t.Context(), "SELECT id, n, f, b, j, s, z FROM "+tbl+" ORDER BY id")
		require.NoError(t, err)
		require.Len(t, rows, 2)
		type row struct {
			ID int64           `json:"id"`
			N  json.Number     `json:"n"`
			F  float64         `json:"f"`
			B  json.RawMessage `json:"b"`
			J  any             `json:"j"`
			S  string          `json:"s"`
			Z  *string         `json:"z"`
		}
		var got [2]row
		for i, r := range rows {
			require.True(t, json.Valid(r), "row %d is not JSON: %s", i, r)
			dec := json.NewDecoder(strings.NewReader(string(r)))
			dec.DisallowUnknownFields()
			require.NoError(t, dec.Decode(&got[i]), "row %s", r)
		}
		yes, no := "true", "false"
		var j1, j2 any = map[string]any{"a": []any{1.0, 2.0}}, []any{}
		if h.driver == "mysql" {
			yes, no, j1, j2 = "1", "0", `{"a":[1,2]}`, "[]"
		}
		z := "z"
		require.Equal(t, row{ID: 1, N: "12.50", F: -1.5e-3, B: json.RawMessage(yes), J: j1, S: text}, got[0])
		require.Equal(t, row{ID: 2, N: "0.00", F: 2, B: json.RawMessage(no), J: j2, S: "plain", Z: &z}, got[1])
		// Columns in the query's order.
		require.True(t, strings.HasPrefix(string(rows[0]), `{"id":1,"n":12.50,`), "row %s", rows[0])
	})
}
