package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/writeback/writeback/internal/sqlcheck"
)

var _ SessionStore = (*myStore)(nil)

// myAppliedSessionsDDL: VARBINARY compares ids bytewise.
const myAppliedSessionsDDL = `CREATE TABLE IF NOT EXISTS ` + AppliedSessionsTable + ` (
	id VARBINARY(64) NOT NULL PRIMARY KEY,
	queue VARBINARY(255) NOT NULL,
	seq BIGINT NOT NULL,
	applied_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`

// SessionLocksTable (MySQL and MariaDB) holds a row per session lock
// (Session.Lock): a batch takes its lock by upserting the row, which locks
// it until the transaction ends. PostgreSQL uses advisory locks instead.
const SessionLocksTable = "writeback_session_locks"

const mySessionLocksDDL = `CREATE TABLE IF NOT EXISTS ` + SessionLocksTable + ` (
	name VARBINARY(255) NOT NULL PRIMARY KEY
) ENGINE=InnoDB`

// myTakeSessionLock is the statement that takes a session lock: the
// upsert locks the row exclusively, whether it inserts it or finds it.
const myTakeSessionLock = "INSERT INTO " + SessionLocksTable + " (name) VALUES (?) ON DUPLICATE KEY UPDATE name = name"

// Dialect is "mysql": statements use ? placeholders.
func (s *myStore) Dialect() string { return "mysql" }

// PrepareSessions creates writeback_applied_sessions if it is missing.
func (s *myStore) PrepareSessions(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, myAppliedSessionsDDL)
	return wrapErr("mysql: create "+AppliedSessionsTable, err, myPermanent)
}

// PrepareSessionLocks creates writeback_session_locks if it is missing:
// only a store with a serial family needs it (and its user the privilege
// to create it).
func (s *myStore) PrepareSessionLocks(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, mySessionLocksDDL)
	return wrapErr("mysql: create "+SessionLocksTable, err, myPermanent)
}

// notPermanent classifies a failure to take a session lock: never the
// sessions' fault (a dropped lock table, a lock wait past
// innodb_lock_wait_timeout), so never a reason to dead-letter one.
func notPermanent(error) bool { return false }

// ApplySessions applies sessions exactly once in one transaction. Usually
// none of them was applied before (replays follow only crashes and
// takeovers), and then it is one round trip, one multi-statement packet
// on Apply's pool (the statements interpolated by the driver, as on the
// other pool): START TRANSACTION; take the batch's lock, if it names one
// (Session.Lock); INSERT the sessions' applied records;
// their statements in order, consecutive single-row INSERTs of one text as
// one (joinRuns); COMMIT. If anything in it fails — a record
// that exists (the session was applied, or a racing applier holds it), a
// statement the store refuses, a deadlock — the packet's transaction is
// rolled back and the batch goes the stepwise way, a round trip per
// statement (none joined), which tells which session or statement it was: START
// TRANSACTION; the lock; SELECT the ids already applied; INSERT the others (a
// racing applier of the same sessions waits here); their statements in
// order; COMMIT. A deadlock reruns the whole transaction, packet first:
// batches of different queues that change the same rows (TPC-C's remote
// stock) deadlock now and then, and the stepwise way costs a round trip
// per statement — seconds for a batch with the store a millisecond away.
func (s *myStore) ApplySessions(ctx context.Context, sessions []Session) ([]bool, error) {
	if err := checkSessions(sessions); err != nil {
		return nil, err
	}
	if len(sessions) == 0 {
		return nil, nil
	}
	return retryTx(myRetryable, func() ([]bool, error) {
		applied, err := s.applySessionsPacket(ctx, sessions, true)
		if err != nil {
			return nil, wrapErr("apply sessions", err, myPermanent)
		}
		if applied != nil {
			return applied, nil
		}
		s.stepwise.Add(1)
		return s.applySessionsStepwise(ctx, sessions)
	})
}

// maxSessionPacket bounds the multi-statement packet of
// applySessionsPacket, well under MariaDB's and MySQL's default
// max_allowed_packet (16 MiB and 64 MiB); a bigger batch goes stepwise.
const maxSessionPacket = 4 << 20

// applySessionsPacket applies sessions in one multi-statement packet when
// none of them was applied before and the store takes every statement; it
// returns applied (nil: it did not apply them), and the error when the
// packet deadlocked (to be run again as it is). When it did not apply
// them, nothing of it is left: its transaction was rolled back (or never
// committed).
//
// A batch that names a lock (Session.Lock) takes it first, in a round trip
// of its own, and then reads which sessions are applied: the batch ahead
// of it, which it waited for, may have applied some (a miss and the
// queue's applier race for the same head), and those are left out of the
// packet rather than sending the batch the stepwise way, a round trip per
// statement with the family's lock held. join joins the batch's runs of
// single-row INSERTs (joinRuns).
func (s *myStore) applySessionsPacket(ctx context.Context, sessions []Session, join bool) ([]bool, error) {
	for _, ss := range sessions {
		if ss.Role != "" {
			return nil, nil // refused stepwise, with the reason
		}
	}
	conn, err := s.applyDB.Conn(ctx)
	if err != nil {
		return nil, nil
	}
	defer conn.Close()
	applied := slices.Repeat([]bool{true}, len(sessions))
	q := newQuery(myDialect{}).add("START TRANSACTION; ")
	if lock := sessions[0].Lock; lock != "" {
		if _, err := conn.ExecContext(ctx, "START TRANSACTION; "+myTakeSessionLock, lock); err != nil {
			myRollback(conn)
			// Not the stepwise way: it would wait for the lock again.
			return nil, wrapErr("take lock "+lock, err, notPermanent)
		}
		done, err := myAppliedIDs(ctx, conn, sessions)
		if err != nil {
			myRollback(conn)
			return nil, nil
		}
		n := 0
		for i, ss := range sessions {
			applied[i] = !done[ss.ID]
			if applied[i] {
				n++
			}
		}
		if n == 0 {
			myRollback(conn)
			return applied, nil
		}
		q = newQuery(myDialect{})
	}
	q.add("INSERT INTO ", AppliedSessionsTable, " (id, queue, seq) VALUES ")
	n := 0
	for i, ss := range sessions {
		if !applied[i] {
			continue
		}
		if n > 0 {
			q.add(", ")
		}
		q.add("(", q.arg(ss.ID), ", ", q.arg(ss.Queue), ", ", q.arg(ss.Seq), ")")
		n++
	}
	var stmts []batchStmt
	for i, ss := range sessions {
		if !applied[i] {
			continue
		}
		for j, st := range ss.Statements {
			args, err := statementArgs("mysql", st)
			if err != nil {
				myRollback(conn)
				return nil, nil
			}
			stmts = append(stmts, batchStmt{sql: st.SQL, args: args, ref: stmtRef{i, j}, rows: 1})
		}
	}
	if join {
		stmts = joinRuns(sqlcheck.MySQL, stmts, nil)
	}
	for _, st := range stmts {
		q.add("; ", st.sql)
		q.args = append(q.args, st.args...)
		if q.sb.Len() > maxSessionPacket {
			myRollback(conn)
			return nil, nil
		}
	}
	q.add("; COMMIT")
	if _, err := conn.ExecContext(ctx, q.String(), q.args...); err != nil {
		myRollback(conn)
		if myRetryable(err) {
			return nil, err
		}
		return nil, nil
	}
	return applied, nil
}

// myAppliedIDs returns which of the sessions' ids are in
// writeback_applied_sessions, read on conn (in its transaction, if any).
func myAppliedIDs(ctx context.Context, conn interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, sessions []Session) (map[string]bool, error) {
	sel := newQuery(myDialect{}).add("SELECT id FROM ", AppliedSessionsTable, " WHERE id IN (")
	for i, ss := range sessions {
		if i > 0 {
			sel.add(", ")
		}
		sel.add(sel.arg(ss.ID))
	}
	sel.add(")")
	rows, err := conn.QueryContext(ctx, sel.String(), sel.args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	done := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		done[id] = true
	}
	return done, rows.Err()
}

func (s *myStore) applySessionsStepwise(ctx context.Context, sessions []Session) ([]bool, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, wrapErr("apply sessions: begin", err, myPermanent)
	}
	defer tx.Rollback() // after Commit, a no-op
	if lock := sessions[0].Lock; lock != "" {
		if _, err := tx.ExecContext(ctx, myTakeSessionLock, lock); err != nil {
			return nil, wrapErr("apply sessions: take lock "+lock, err, notPermanent)
		}
	}
	done, err := myAppliedIDs(ctx, tx, sessions)
	if err != nil {
		return nil, wrapErr("apply sessions: read applied records", err, myPermanent)
	}
	applied := make([]bool, len(sessions))
	ins := newQuery(myDialect{}).add("INSERT INTO ", AppliedSessionsTable, " (id, queue, seq) VALUES ")
	n := 0
	for i, ss := range sessions {
		if done[ss.ID] {
			continue
		}
		applied[i] = true
		if n > 0 {
			ins.add(", ")
		}
		ins.add("(", ins.arg(ss.ID), ", ", ins.arg(ss.Queue), ", ", ins.arg(ss.Seq), ")")
		n++
	}
	if n == 0 {
		return applied, nil
	}
	if _, err := tx.ExecContext(ctx, ins.String(), ins.args...); err != nil {
		var me *mysql.MySQLError
		if errors.As(err, &me) && me.Number == 1062 {
			return nil, &Error{Err: ErrConcurrentApply}
		}
		return nil, wrapErr("apply sessions: record applied sessions", err, myPermanent)
	}
	for i, ss := range sessions {
		if !applied[i] {
			continue
		}
		if ss.Role != "" {
			return nil, &Error{Err: fmt.Errorf("store: session %s: roles are not supported on MySQL", ss.ID)}
		}
		for j, st := range ss.Statements {
			args, err := statementArgs("mysql", st)
			if err != nil {
				return nil, sessionStmtError(sessions, i, j, err, func(error) bool { return true })
			}
			if _, err := tx.ExecContext(ctx, st.SQL, args...); err != nil {
				var me *mysql.MySQLError
				if myRetryable(err) || !errors.As(err, &me) {
					return nil, wrapErr("apply sessions", err, myPermanent)
				}
				return nil, sessionStmtError(sessions, i, j, err, myPermanent)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, wrapErr("apply sessions: commit", err, myPermanent)
	}
	return applied, nil
}

// CheckRole refuses: a MySQL or MariaDB role adds privileges to the
// user's rather than restricting them, so it cannot bound sessions; give
// their queue a store whose user holds only the privileges they need.
func (s *myStore) CheckRole(context.Context, string) error {
	return errors.New("mysql: a role cannot restrict sessions on MySQL or MariaDB (a role's privileges add to the user's); give the queue a store of its own whose user may change only its tables and " + AppliedSessionsTable)
}

// myJSONKind maps a column's database type name to how its text becomes
// JSON. MariaDB reports JSON columns as LONGTEXT: their values read as
// strings.
func myJSONKind(typ string) jsonKind {
	typ = strings.TrimPrefix(strings.ToUpper(typ), "UNSIGNED ")
	switch typ {
	case "TINYINT", "SMALLINT", "MEDIUMINT", "INT", "INTEGER", "BIGINT", "DECIMAL", "FLOAT", "DOUBLE", "YEAR":
		return jsonNumber
	case "JSON":
		return jsonRaw
	}
	return jsonString
}

// QueryJSON runs query and converts each row to a JSON object by column
// type.
func (s *myStore) QueryJSON(ctx context.Context, query string, args ...any) ([]json.RawMessage, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, wrapErr("query", err, myPermanent)
	}
	defer rows.Close()
	cts, err := rows.ColumnTypes()
	if err != nil {
		return nil, wrapErr("query", err, myPermanent)
	}
	cols := make([]string, len(cts))
	kinds := make([]jsonKind, len(cts))
	for i, ct := range cts {
		cols[i], kinds[i] = ct.Name(), myJSONKind(ct.DatabaseTypeName())
	}
	rj := newRowJSON(cols, kinds)
	var out []json.RawMessage
	raw := make([]sql.RawBytes, len(cts))
	dest := make([]any, len(cts))
	for i := range raw {
		dest[i] = &raw[i]
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, wrapErr("query", err, myPermanent)
		}
		out = append(out, row(rj, raw))
	}
	if err := rows.Err(); err != nil {
		return nil, wrapErr("query", err, myPermanent)
	}
	return out, nil
}

// ListAppliedSessions pages through the applied records after afterID.
func (s *myStore) ListAppliedSessions(ctx context.Context, afterID string, limit int) ([]AppliedSession, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT id, queue, seq FROM "+AppliedSessionsTable+" WHERE id > ? ORDER BY id LIMIT ?", afterID, limit)
	if err != nil {
		return nil, wrapErr("list applied sessions", err, myPermanent)
	}
	defer rows.Close()
	var out []AppliedSession
	for rows.Next() {
		var a AppliedSession
		if err := rows.Scan(&a.ID, &a.Queue, &a.Seq); err != nil {
			return nil, wrapErr("list applied sessions", err, myPermanent)
		}
		out = append(out, a)
	}
	return out, wrapErr("list applied sessions", rows.Err(), myPermanent)
}

// CompactAppliedSessions deletes the records of ids.
func (s *myStore) CompactAppliedSessions(ctx context.Context, ids []string) (int, error) {
	deleted := 0
	for len(ids) > 0 {
		chunk := ids[:min(sessionCompactChunk, len(ids))]
		ids = ids[len(chunk):]
		q := newQuery(myDialect{}).add("DELETE FROM ", AppliedSessionsTable, " WHERE id IN (")
		for i, id := range chunk {
			if i > 0 {
				q.add(", ")
			}
			q.add(q.arg(id))
		}
		q.add(")")
		res, err := s.db.ExecContext(ctx, q.String(), q.args...)
		if err != nil {
			return deleted, wrapErr("compact applied sessions", err, myPermanent)
		}
		n, _ := res.RowsAffected()
		deleted += int(n)
	}
	return deleted, nil
}

// CountAppliedSessions returns the number of applied records.
func (s *myStore) CountAppliedSessions(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM "+AppliedSessionsTable).Scan(&n); err != nil {
		return 0, wrapErr("count applied sessions", err, myPermanent)
	}
	return n, nil
}
