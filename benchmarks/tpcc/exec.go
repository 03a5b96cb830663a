package tpcc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/writeback/writeback/pkg/client"
	"github.com/writeback/writeback/pkg/writeback"
)

// DBExecutor runs each transaction as a PostgreSQL transaction through
// pgx: the database alone.
type DBExecutor struct{ Pool *pgxpool.Pool }

// Begin starts a database transaction.
func (e *DBExecutor) Begin(ctx context.Context) (Tx, error) {
	tx, err := e.Pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("tpcc: begin: %w", err)
	}
	return &dbTx{tx: tx}, nil
}

// Retryable: serialization failures and deadlocks.
func (e *DBExecutor) Retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// Close does nothing: the pool is the caller's.
func (e *DBExecutor) Close() error { return nil }

type dbTx struct{ tx pgx.Tx }

func (t *dbTx) query(ctx context.Context, m *Mapping, l Lease, params []any) ([]Row, error) {
	q := m.dbQuery()
	if l == ForUpdate {
		q += " FOR UPDATE"
	}
	rows, err := t.tx.Query(ctx, q, params...)
	if err != nil {
		return nil, fmt.Errorf("tpcc: %s: %w", m.Name, err)
	}
	defer rows.Close()
	fds := rows.FieldDescriptions()
	var out []Row
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		r := make(Row, len(vals))
		for i, v := range vals {
			r[fds[i].Name] = v
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("tpcc: %s: %w", m.Name, err)
	}
	return out, nil
}

func (t *dbTx) Get(ctx context.Context, m *Mapping, l Lease, params ...any) (Row, bool, error) {
	rows, err := t.query(ctx, m, l, params)
	if err != nil || len(rows) == 0 {
		return nil, false, err
	}
	return rows[0], true, nil
}

// GetMany and ListMany send the reads' queries in one pgx batch: one
// round trip, as the sidecar's multi-read is one request.
func (t *dbTx) GetMany(ctx context.Context, l Lease, reads []Read) ([]Row, error) {
	lists, err := t.queryMany(ctx, reads, leases(l, len(reads)))
	if err != nil {
		return nil, err
	}
	return firstRows(lists), nil
}

// GetWith sends the peeks' queries and then the leased ones in one batch.
func (t *dbTx) GetWith(ctx context.Context, l Lease, leased, peek []Read) ([]Row, []Row, error) {
	return getWith(func(reads []Read, ls []Lease) ([][]Row, error) { return t.queryMany(ctx, reads, ls) }, l, leased, peek)
}

func (t *dbTx) ListMany(ctx context.Context, l Lease, reads []Read) ([][]Row, error) {
	return t.queryMany(ctx, reads, leases(l, len(reads)))
}

// queryMany runs reads[i] under ls[i].
func (t *dbTx) queryMany(ctx context.Context, reads []Read, ls []Lease) ([][]Row, error) {
	b := &pgx.Batch{}
	for i, r := range reads {
		q := r.M.dbQuery()
		if ls[i] == ForUpdate {
			q += " FOR UPDATE"
		}
		b.Queue(q, r.Params...)
	}
	br := t.tx.SendBatch(ctx, b)
	defer br.Close()
	out := make([][]Row, len(reads))
	for i, r := range reads {
		rows, err := br.Query()
		if err != nil {
			return nil, fmt.Errorf("tpcc: %s: %w", r.M.Name, err)
		}
		fds := rows.FieldDescriptions()
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				rows.Close()
				return nil, err
			}
			row := make(Row, len(vals))
			for j, v := range vals {
				row[fds[j].Name] = v
			}
			out[i] = append(out[i], row)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("tpcc: %s: %w", r.M.Name, err)
		}
	}
	return out, br.Close()
}

// firstRows is each list's first row, nil for an empty one.
func firstRows(lists [][]Row) []Row {
	out := make([]Row, len(lists))
	for i, l := range lists {
		if len(l) > 0 {
			out[i] = l[0]
		}
	}
	return out
}

func (t *dbTx) List(ctx context.Context, m *Mapping, l Lease, params ...any) ([]Row, error) {
	return t.query(ctx, m, l, params)
}

func (t *dbTx) Exec(ctx context.Context, sql string, args ...any) error {
	if _, err := t.tx.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("tpcc: %s: %w", strings.Fields(sql)[0], err)
	}
	return nil
}

func (t *dbTx) Patch(string, map[string]any) {}
func (t *dbTx) Affect(string)                {}
func (t *dbTx) Set(string, json.RawMessage)  {}

func (t *dbTx) Commit(ctx context.Context, _ string) error {
	if err := t.tx.Commit(ctx); err != nil {
		return fmt.Errorf("tpcc: commit: %w", err)
	}
	return nil
}

func (t *dbTx) Rollback(ctx context.Context) { _ = t.tx.Rollback(context.WithoutCancel(ctx)) }

// SessionExecutor runs each transaction as a session: reads of mapped
// cache entries (GET /v1/cache), the statements and cache changes in the
// commit, into the warehouse's queue. The sessions go to a sidecar over
// HTTP (a *client.Client) or to an embedded member in-process (a
// *writeback.DB): both answer the same. On a MySQL store the statements are
// translated to its dialect (MyStatement) before they are committed.
type SessionExecutor struct {
	Client writeback.Sessions
	Store  string // Postgres (default) or MySQL: the dialect of the statements
}

// Begin starts an attempt; the session itself begins at the first leased
// read.
func (e *SessionExecutor) Begin(context.Context) (Tx, error) {
	return &sessionTx{c: e.Client, mysql: e.Store == MySQL}, nil
}

// Retryable: a 409, the session was aborted by a lease conflict.
func (e *SessionExecutor) Retryable(err error) bool { return client.IsAborted(err) }

// Close does nothing.
func (e *SessionExecutor) Close() error { return nil }

type sessionTx struct {
	c      writeback.Sessions
	mysql  bool // statements in MySQL's dialect
	sid    string
	commit client.Commit
}

// fetch reads keys in one request (GET /v1/cache?key=…): unleased outside
// any session, leased in the attempt's session, which the first leased
// read begins (session=new: no request of its own). vals[i] is nil when
// keys[i] has no value.
func (t *sessionTx) fetch(ctx context.Context, l Lease, keys []string) ([]json.RawMessage, error) {
	switch {
	case l == Unleased:
		return t.c.CacheMany(ctx, keys, "", false)
	case t.sid == "":
		sid, vals, err := t.c.BeginCacheMany(ctx, keys, l == ForUpdate)
		t.sid = sid
		return vals, err
	}
	return t.c.CacheMany(ctx, keys, t.sid, l == ForUpdate)
}

func (t *sessionTx) Get(ctx context.Context, m *Mapping, l Lease, params ...any) (Row, bool, error) {
	rows, err := t.GetMany(ctx, l, []Read{{m, params}})
	if err != nil {
		return nil, false, err
	}
	return rows[0], rows[0] != nil, nil
}

// GetMany reads single-row entries in one request.
func (t *sessionTx) GetMany(ctx context.Context, l Lease, reads []Read) ([]Row, error) {
	out := make([]Row, len(reads))
	err := t.fetchInto(ctx, l, reads, func(i int) any { return &out[i] })
	return out, err
}

// GetWith reads the leased entries and peeks at the others in one request
// (ReadCache): the session begins there if it has not yet.
func (t *sessionTx) GetWith(ctx context.Context, l Lease, leased, peek []Read) ([]Row, []Row, error) {
	if l == Unleased {
		rows, err := t.GetMany(ctx, l, append(append([]Read(nil), leased...), peek...))
		if err != nil {
			return nil, nil, err
		}
		return rows[:len(leased)], rows[len(leased):], nil
	}
	r := client.Reads{Keys: keysOf(leased), Peek: keysOf(peek), ForUpdate: l == ForUpdate}
	sid := t.sid
	if sid == "" {
		sid = "new"
	}
	res, err := t.c.ReadCache(ctx, sid, r)
	if err != nil {
		return nil, nil, err
	}
	if t.sid == "" {
		t.sid = res.Session
	}
	rows, peeked := make([]Row, len(leased)), make([]Row, len(peek))
	if err := decodeInto(r.Keys, res.Values, func(i int) any { return &rows[i] }); err != nil {
		return nil, nil, err
	}
	if err := decodeInto(r.Peek, res.Peeked, func(i int) any { return &peeked[i] }); err != nil {
		return nil, nil, err
	}
	return rows, peeked, nil
}

func keysOf(reads []Read) []string {
	keys := make([]string, len(reads))
	for i, r := range reads {
		keys[i] = r.M.Key(r.Params...)
	}
	return keys
}

// decodeInto decodes each of vals that exists (keys' values) into
// into(i).
func decodeInto(keys []string, vals []json.RawMessage, into func(i int) any) error {
	for i, raw := range vals {
		if raw == nil {
			continue
		}
		if err := decodeJSON(raw, into(i)); err != nil {
			return fmt.Errorf("tpcc: %s reads %s: %v", keys[i], raw, err)
		}
	}
	return nil
}

func (t *sessionTx) List(ctx context.Context, m *Mapping, l Lease, params ...any) ([]Row, error) {
	lists, err := t.ListMany(ctx, l, []Read{{m, params}})
	if err != nil {
		return nil, err
	}
	return lists[0], nil
}

// ListMany reads many-row entries in one request.
func (t *sessionTx) ListMany(ctx context.Context, l Lease, reads []Read) ([][]Row, error) {
	out := make([][]Row, len(reads))
	err := t.fetchInto(ctx, l, reads, func(i int) any { return &out[i] })
	return out, err
}

// fetchInto reads the entries in one request and decodes each value that
// exists into into(i).
func (t *sessionTx) fetchInto(ctx context.Context, l Lease, reads []Read, into func(i int) any) error {
	keys := keysOf(reads)
	vals, err := t.fetch(ctx, l, keys)
	if err != nil {
		return err
	}
	return decodeInto(keys, vals, into)
}

func (t *sessionTx) Exec(_ context.Context, sql string, args ...any) error {
	if t.mysql {
		var err error
		if sql, args, err = MyStatement(sql, args); err != nil {
			return err
		}
	}
	t.commit.Statements = append(t.commit.Statements, client.Statement{SQL: sql, Args: args})
	return nil
}

func (t *sessionTx) Patch(key string, patch map[string]any) {
	t.commit.Cache = append(t.commit.Cache, client.CacheChange{Key: key, Patch: patch})
}

func (t *sessionTx) Affect(key string) { t.commit.Affects = append(t.commit.Affects, key) }

func (t *sessionTx) Set(key string, value json.RawMessage) {
	t.commit.Cache = append(t.commit.Cache, client.CacheChange{Key: key, Set: value})
}

func (t *sessionTx) Commit(ctx context.Context, queue string) error {
	if queue == "" {
		if t.sid == "" {
			return nil // read nothing under a lease: nothing to validate
		}
		_, err := t.c.CommitSession(ctx, t.sid, client.Commit{})
		t.sid = ""
		return err
	}
	if t.sid == "" {
		id, err := t.c.BeginSession(ctx)
		if err != nil {
			return err
		}
		t.sid = id
	}
	t.commit.Queue = queue
	_, err := t.c.CommitSession(ctx, t.sid, t.commit)
	t.sid = ""
	return err
}

func (t *sessionTx) Rollback(ctx context.Context) {
	if t.sid != "" {
		_ = t.c.AbortSession(context.WithoutCancel(ctx), t.sid)
		t.sid = ""
	}
}

// IsNotApplied reports whether err is a write-through commit's 500
// buffered that says the session is committed in its queue but not yet
// applied: it counts as committed (the appliers apply it), and must not be
// retried.
func IsNotApplied(err error) bool {
	var e *client.Error
	return errors.As(err, &e) && e.Code == client.CodeBuffered && strings.Contains(e.Message, "is committed in queue")
}
