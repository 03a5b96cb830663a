package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/writeback/writeback/internal/sqlcheck"
)

var _ SessionStore = (*pgStore)(nil)

// pgAppliedSessionsDDL: COLLATE "C" keeps the id order bytewise, the page
// order of ListAppliedSessions.
const pgAppliedSessionsDDL = `CREATE TABLE IF NOT EXISTS ` + AppliedSessionsTable + ` (
	id varchar(64) COLLATE "C" PRIMARY KEY,
	queue varchar(255) COLLATE "C" NOT NULL,
	seq bigint NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now())`

// Dialect is "postgres": statements use $1, $2 … placeholders.
func (s *pgStore) Dialect() string { return "postgres" }

// PrepareSessions creates writeback_applied_sessions if it is missing,
// under the same advisory lock as the applied documents' table.
func (s *pgStore) PrepareSessions(ctx context.Context) error {
	var exists bool
	if err := s.pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", AppliedSessionsTable).Scan(&exists); err != nil {
		return wrapErr("postgres: look for "+AppliedSessionsTable, err, pgPermanent)
	}
	if exists {
		return nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(pgCreateLock)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, pgAppliedSessionsDDL)
		return err
	})
	return wrapErr("postgres: create "+AppliedSessionsTable, err, pgPermanent)
}

// ApplySessions applies sessions exactly once in one transaction and two
// round trips:
//
//	batch 1: BEGIN; the batch's lock, if it names one (Session.Lock);
//	         SELECT the ids already applied
//	batch 2: INSERT the other ids; their statements in order; COMMIT
//
// The insert comes first in batch 2, so a racing applier of the same
// sessions waits on it before running any statement. Consecutive
// executions of one text go as one statement where they may (joinRuns);
// when a joined statement fails, the transaction runs again unjoined. A
// deadlock or serialization failure reruns the whole transaction.
func (s *pgStore) ApplySessions(ctx context.Context, sessions []Session) ([]bool, error) {
	if err := checkSessions(sessions); err != nil {
		return nil, err
	}
	if len(sessions) == 0 {
		return nil, nil
	}
	return retryTx(pgRetryable, func() ([]bool, error) {
		applied, err := s.applySessionsOnce(ctx, sessions, true)
		if errors.Is(err, errJoinedFailed) {
			s.keyed.reset() // a changed table may have made a cached type wrong
			return s.applySessionsOnce(ctx, sessions, false)
		}
		return applied, err
	})
}

// applySessionsOnce is one attempt of ApplySessions; join joins the
// batch's runs of one text (joinRuns). A joined statement the database
// refuses is errJoinedFailed, nothing applied.
func (s *pgStore) applySessionsOnce(ctx context.Context, sessions []Session, join bool) (_ []bool, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, wrapErr("apply sessions", err, pgPermanent)
	}
	defer conn.Release()
	defer func() {
		if err != nil {
			pgRollback(conn.Conn())
		}
	}()
	ids := make([]string, len(sessions))
	for i, ss := range sessions {
		ids[i] = ss.ID
	}
	var types paramTypes
	if join {
		types = s.keyedTypes(ctx, conn.Conn(), sessions)
	}
	done, err := pgAppliedIDs(ctx, conn.Conn(), ids, sessions[0].Lock)
	if err != nil {
		return nil, wrapErr("apply sessions: read applied records", err, pgPermanent)
	}
	applied := make([]bool, len(sessions))
	var newIDs, queues []string
	var seqs []int64
	for i, ss := range sessions {
		if done[ss.ID] {
			continue
		}
		applied[i] = true
		newIDs, queues, seqs = append(newIDs, ss.ID), append(queues, ss.Queue), append(seqs, ss.Seq)
	}
	if len(newIDs) == 0 {
		_, _ = conn.Exec(ctx, "ROLLBACK")
		return applied, nil
	}
	var stmts []batchStmt
	for i, ss := range sessions {
		if !applied[i] {
			continue
		}
		if ss.Role != "" {
			stmts = append(stmts, batchStmt{sql: "SET LOCAL ROLE " + pgx.Identifier{ss.Role}.Sanitize(), ref: stmtRef{i, roleStmt}, rows: 1})
		}
		for j, st := range ss.Statements {
			args, err := statementArgs("postgres", st)
			if err != nil {
				return nil, sessionStmtError(sessions, i, j, err, func(error) bool { return true })
			}
			stmts = append(stmts, batchStmt{sql: st.SQL, args: args, ref: stmtRef{i, j}, rows: 1})
		}
		if ss.Role != "" {
			stmts = append(stmts, batchStmt{sql: "SET LOCAL ROLE NONE", ref: stmtRef{i, roleStmt}, rows: 1})
		}
	}
	if join {
		stmts = joinRuns(sqlcheck.Postgres, stmts, types)
	}
	batch := &pgx.Batch{}
	batch.Queue(`INSERT INTO `+AppliedSessionsTable+` (id, queue, seq)
SELECT * FROM unnest($1::text[], $2::text[], $3::int8[])`, newIDs, queues, seqs)
	for _, st := range stmts {
		batch.Queue(st.sql, st.args...)
	}
	batch.Queue("COMMIT")
	br := conn.SendBatch(ctx, batch)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" {
			return nil, &Error{Err: ErrConcurrentApply}
		}
		return nil, wrapErr("apply sessions: record applied sessions", err, pgPermanent)
	}
	for _, st := range stmts {
		r := st.ref
		if _, err := br.Exec(); err != nil {
			if pgRetryable(err) || !isPgServerError(err) {
				return nil, wrapErr("apply sessions", err, pgPermanent)
			}
			if st.rows > 1 {
				return nil, errJoinedFailed
			}
			if r.stmt == roleStmt { // the configuration's fault, not the session's: retry
				return nil, &Error{Err: fmt.Errorf("store: apply sessions: set role %s: %w", sessions[r.session].Role, err)}
			}
			permanent := pgPermanent
			if sessions[r.session].Role != "" {
				permanent = pgPermanentUnderRole
			}
			return nil, sessionStmtError(sessions, r.session, r.stmt, err, permanent)
		}
	}
	tag, err := br.Exec()
	if err != nil {
		return nil, wrapErr("apply sessions: commit", err, pgPermanent)
	}
	if tag.String() != "COMMIT" {
		return nil, &Error{Err: errors.New("store: apply sessions: the transaction was rolled back at commit")}
	}
	if err := br.Close(); err != nil {
		return nil, wrapErr("apply sessions: commit", err, pgPermanent)
	}
	return applied, nil
}

// keyedTypes returns the placeholder types of the keyed writes that
// sessions run twice or more in a row (see joinRuns), as the store
// describes their statements: from s.keyed, or described on conn here,
// before the transaction, as an unnamed statement (one that does not
// prepare is not joined; running it tells what is wrong with it).
func (s *pgStore) keyedTypes(ctx context.Context, conn *pgx.Conn, sessions []Session) paramTypes {
	var types map[string][]string // texts looked at; nil until one is: most batches have no run
	prev := ""
	for _, ss := range sessions {
		for _, st := range ss.Statements {
			sql := st.SQL
			if sql != prev {
				prev = sql
				continue
			}
			if _, seen := types[sql]; seen || !shapeOf(sqlcheck.Postgres, sql).keyedOK {
				continue
			}
			if types == nil {
				types = map[string][]string{}
			}
			names, ok := s.keyed.get(sql)
			if !ok {
				sd, err := conn.PgConn().Prepare(ctx, "", sql, nil)
				if err != nil {
					types[sql] = nil
					continue
				}
				names = make([]string, len(sd.ParamOIDs))
				for i, oid := range sd.ParamOIDs {
					t, ok := conn.TypeMap().TypeForOID(oid)
					if !ok || !castable(t.Name) {
						names = nil
						break
					}
					names[i] = t.Name
				}
				s.keyed.put(sql, names)
			}
			types[sql] = names
		}
	}
	return func(sql string) ([]string, bool) {
		ts := types[sql]
		return ts, ts != nil
	}
}

// paramCache holds statement texts' placeholder types (nil: not castable).
// Bounded: full, it starts over.
type paramCache struct {
	mu sync.Mutex
	m  map[string][]string
}

const maxParamCache = 1024

func (c *paramCache) get(sql string) ([]string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts, ok := c.m[sql]
	return ts, ok
}

func (c *paramCache) put(sql string, types []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxParamCache {
		c.m = map[string][]string{}
	}
	c.m[sql] = types
}

func (c *paramCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m = nil
}

// castable reports whether a type name can follow :: as it is: a plain
// lower-case name (pgx's names of the built-in types).
func castable(name string) bool {
	if name == "" || name == "unknown" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// roleStmt marks the SET LOCAL ROLE entries among a batch's statements.
const roleStmt = -1

// pgPermanentUnderRole is pgPermanent for a session run under an
// operator's role: insufficient privilege is the role's boundary working,
// the session's fault, and dead-letters it like a constraint would.
func pgPermanentUnderRole(err error) bool {
	var pe *pgconn.PgError
	return pgPermanent(err) || (errors.As(err, &pe) && pe.Code == "42501")
}

// CheckRole fails unless the store's user may SET ROLE role: it tries,
// in a transaction it rolls back.
func (s *pgStore) CheckRole(ctx context.Context, role string) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+pgx.Identifier{role}.Sanitize()); err != nil {
			return err
		}
		return errRollback
	})
	if errors.Is(err, errRollback) {
		return nil
	}
	return fmt.Errorf("postgres: SET ROLE %s: %w", role, err)
}

var errRollback = errors.New("rollback")

// isPgServerError reports whether err is the server's answer to a
// statement (not a broken connection or a cancelled context).
func isPgServerError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe)
}

// pgSessionLockTimeout bounds a session batch's wait for a row lock.
// Batches of different queues can change the same rows (TPC-C's remote
// stock and customers) in different orders, and two such batches applied
// at once (two appliers, or an applier and a miss) deadlock; PostgreSQL
// looks for deadlocks only after deadlock_timeout (1 s by default, and
// only a superuser may lower it), a second during which every request
// that needs either queue waits. A batch that waits longer than this for
// a lock gives up instead (55P03, retried like a deadlock), so a deadlock
// costs at most this; a batch that merely waits for a long one retries.
const pgSessionLockTimeout = "SET LOCAL lock_timeout = '250ms'"

// pgAppliedIDs begins the transaction, takes lock when there is one (see
// Session.Lock), and returns which of ids are applied.
//
// The lock is a transaction-level advisory lock (pgSessionLockKeys), taken
// before lock_timeout is set: a batch waits for the one ahead of it as
// long as that one takes (its own deadline bounds the wait), and the ids
// it then reads include what that one applied.
func pgAppliedIDs(ctx context.Context, conn *pgx.Conn, ids []string, lock string) (map[string]bool, error) {
	batch := &pgx.Batch{}
	batch.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
	if lock != "" {
		class, obj := pgSessionLockKeys(lock)
		batch.Queue("SELECT pg_advisory_xact_lock($1::int4, $2::int4)", class, obj)
	}
	batch.Queue(pgSessionLockTimeout)
	batch.Queue("SELECT id FROM "+AppliedSessionsTable+" WHERE id = ANY($1::text[])", ids)
	br := conn.SendBatch(ctx, batch)
	defer br.Close()
	for range batch.Len() - 1 {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	done := map[string]bool{}
	var id string
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error {
		done[id] = true
		return nil
	}); err != nil {
		return nil, err
	}
	return done, br.Close()
}

// pgSessionLockClass is the first key of the session locks' advisory
// locks ("wbSL"); the second is a hash of the lock's name. Two-key advisory
// locks never collide with one-key ones (pgCreateLock), and two names with
// one hash only serialize each other's batches.
const pgSessionLockClass = 0x7762534c

// pgSessionLockKeys returns the two keys of lock's advisory lock.
func pgSessionLockKeys(lock string) (class, obj int32) {
	h := fnv.New32a()
	h.Write([]byte(lock))
	return pgSessionLockClass, int32(h.Sum32())
}

// pgJSONKind maps a column's type OID to how its text becomes JSON.
func pgJSONKind(oid uint32) jsonKind {
	switch oid {
	case 20, 21, 23, 26, 700, 701, 1700: // int8 int2 int4 oid float4 float8 numeric
		return jsonNumber
	case 16:
		return jsonBool
	case 114, 3802: // json jsonb
		return jsonRaw
	}
	return jsonString
}

// QueryJSON runs query with the results in text format, so that every
// value reads as PostgreSQL prints it, and converts each row to a JSON
// object by column type.
func (s *pgStore) QueryJSON(ctx context.Context, query string, args ...any) ([]json.RawMessage, error) {
	rows, err := s.pool.Query(ctx, query, append([]any{pgx.QueryResultFormats{pgx.TextFormatCode}}, args...)...)
	if err != nil {
		return nil, wrapErr("query", err, pgPermanent)
	}
	defer rows.Close()
	fds := rows.FieldDescriptions()
	cols := make([]string, len(fds))
	kinds := make([]jsonKind, len(fds))
	for i, fd := range fds {
		cols[i], kinds[i] = fd.Name, pgJSONKind(fd.DataTypeOID)
	}
	rj := newRowJSON(cols, kinds)
	var out []json.RawMessage
	for rows.Next() {
		out = append(out, row(rj, rows.RawValues()))
	}
	if err := rows.Err(); err != nil {
		return nil, wrapErr("query", err, pgPermanent)
	}
	return out, nil
}

// ListAppliedSessions pages through the applied records after afterID.
func (s *pgStore) ListAppliedSessions(ctx context.Context, afterID string, limit int) ([]AppliedSession, error) {
	rows, err := s.pool.Query(ctx, "SELECT id, queue, seq FROM "+AppliedSessionsTable+" WHERE id > $1 ORDER BY id LIMIT $2", afterID, limit)
	if err != nil {
		return nil, wrapErr("list applied sessions", err, pgPermanent)
	}
	var out []AppliedSession
	var a AppliedSession
	if _, err := pgx.ForEachRow(rows, []any{&a.ID, &a.Queue, &a.Seq}, func() error {
		out = append(out, a)
		return nil
	}); err != nil {
		return nil, wrapErr("list applied sessions", err, pgPermanent)
	}
	return out, nil
}

// CompactAppliedSessions deletes the records of ids.
func (s *pgStore) CompactAppliedSessions(ctx context.Context, ids []string) (int, error) {
	deleted := 0
	for len(ids) > 0 {
		chunk := ids[:min(sessionCompactChunk, len(ids))]
		ids = ids[len(chunk):]
		tag, err := s.pool.Exec(ctx, "DELETE FROM "+AppliedSessionsTable+" WHERE id = ANY($1::text[])", chunk)
		if err != nil {
			return deleted, wrapErr("compact applied sessions", err, pgPermanent)
		}
		deleted += int(tag.RowsAffected())
	}
	return deleted, nil
}

// CountAppliedSessions returns the number of applied records.
func (s *pgStore) CountAppliedSessions(ctx context.Context) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM "+AppliedSessionsTable).Scan(&n); err != nil {
		return 0, wrapErr("count applied sessions", err, pgPermanent)
	}
	return n, nil
}
