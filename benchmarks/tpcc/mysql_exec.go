package tpcc

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// MyExecutor runs each transaction as a MySQL (MariaDB) transaction
// through database/sql: the database alone. Its statements and queries are
// translated from PostgreSQL's dialect (MyStatement); its pool is
// openMySQL's (READ COMMITTED, interpolated arguments, multi-statements).
type MyExecutor struct{ DB *sql.DB }

// Begin starts a database transaction.
func (e *MyExecutor) Begin(ctx context.Context) (Tx, error) {
	tx, err := e.DB.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("tpcc: begin: %w", err)
	}
	return &myTx{tx: tx}, nil
}

// Retryable: a deadlock (1213, InnoDB rolled the transaction back) or a
// lock wait timeout (1205, which rolls back only the statement; the
// attempt is rolled back whole and run again).
func (e *MyExecutor) Retryable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// Close does nothing: the pool is the caller's.
func (e *MyExecutor) Close() error { return nil }

type myTx struct{ tx *sql.Tx }

// stmt translates the query the database policy runs for a mapping, FOR
// UPDATE under a ForUpdate lease.
func stmt(m *Mapping, l Lease, params []any) (string, []any, error) {
	q := m.dbQuery()
	if l == ForUpdate {
		q += " FOR UPDATE"
	}
	return MyStatement(q, params)
}

func (t *myTx) query(ctx context.Context, m *Mapping, l Lease, params []any) ([]Row, error) {
	q, args, err := stmt(m, l, params)
	if err != nil {
		return nil, err
	}
	rows, err := t.tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("tpcc: %s: %w", m.Name, err)
	}
	defer rows.Close()
	var out []Row
	if err := myScan(rows, func(names []string, vals []any) { out = append(out, newRow(names, vals)) }); err != nil {
		return nil, fmt.Errorf("tpcc: %s: %w", m.Name, err)
	}
	return out, nil
}

func newRow(names []string, vals []any) Row {
	r := make(Row, len(vals))
	for i, v := range vals {
		r[names[i]] = v
	}
	return r
}

func (t *myTx) Get(ctx context.Context, m *Mapping, l Lease, params ...any) (Row, bool, error) {
	rows, err := t.query(ctx, m, l, params)
	if err != nil || len(rows) == 0 {
		return nil, false, err
	}
	return rows[0], true, nil
}

// GetMany and ListMany send the reads' queries as one multi-statement,
// "SELECT …; SELECT …; …", and read one result set per query: one round
// trip, as PostgreSQL's pgx batch and the sidecar's multi-read. (A UNION
// ALL would need one column list for rows of different tables.)
func (t *myTx) GetMany(ctx context.Context, l Lease, reads []Read) ([]Row, error) {
	lists, err := t.queryMany(ctx, reads, leases(l, len(reads)))
	if err != nil {
		return nil, err
	}
	return firstRows(lists), nil
}

// GetWith sends the peeks' queries and then the leased ones as one
// multi-statement.
func (t *myTx) GetWith(ctx context.Context, l Lease, leased, peek []Read) ([]Row, []Row, error) {
	return getWith(func(reads []Read, ls []Lease) ([][]Row, error) { return t.queryMany(ctx, reads, ls) }, l, leased, peek)
}

func (t *myTx) ListMany(ctx context.Context, l Lease, reads []Read) ([][]Row, error) {
	return t.queryMany(ctx, reads, leases(l, len(reads)))
}

// queryMany runs reads[i] under ls[i].
func (t *myTx) queryMany(ctx context.Context, reads []Read, ls []Lease) ([][]Row, error) {
	var b strings.Builder
	var args []any
	for i, r := range reads {
		q, a, err := stmt(r.M, ls[i], r.Params)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(q)
		args = append(args, a...)
	}
	rows, err := t.tx.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, fmt.Errorf("tpcc: %d reads: %w", len(reads), err)
	}
	defer rows.Close()
	out := make([][]Row, len(reads))
	for i, r := range reads {
		if i > 0 && !rows.NextResultSet() {
			if err := rows.Err(); err != nil {
				return nil, fmt.Errorf("tpcc: %s: %w", r.M.Name, err)
			}
			return nil, fmt.Errorf("tpcc: %d reads answered %d result sets", len(reads), i)
		}
		err := myScan(rows, func(names []string, vals []any) { out[i] = append(out[i], newRow(names, vals)) })
		if err != nil {
			return nil, fmt.Errorf("tpcc: %s: %w", r.M.Name, err)
		}
	}
	return out, rows.Close()
}

func (t *myTx) List(ctx context.Context, m *Mapping, l Lease, params ...any) ([]Row, error) {
	return t.query(ctx, m, l, params)
}

func (t *myTx) Exec(ctx context.Context, pg string, args ...any) error {
	q, a, err := MyStatement(pg, args)
	if err != nil {
		return err
	}
	if _, err := t.tx.ExecContext(ctx, q, a...); err != nil {
		return fmt.Errorf("tpcc: %s: %w", strings.Fields(q)[0], err)
	}
	return nil
}

func (t *myTx) Patch(string, map[string]any) {}
func (t *myTx) Affect(string)                {}
func (t *myTx) Set(string, json.RawMessage)  {}

func (t *myTx) Commit(context.Context, string) error {
	if err := t.tx.Commit(); err != nil {
		return fmt.Errorf("tpcc: commit: %w", err)
	}
	return nil
}

func (t *myTx) Rollback(context.Context) { _ = t.tx.Rollback() }
