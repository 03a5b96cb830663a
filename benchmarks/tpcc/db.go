package tpcc

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The stores TPC-C runs on.
const (
	Postgres = "postgres" // PostgreSQL, through pgx
	MySQL    = "mysql"    // MariaDB (or MySQL), through database/sql and go-sql-driver/mysql
)

// Stores are the stores TPC-C runs on, for flags.
var Stores = []string{Postgres, MySQL}

// DB is the TPC-C database on one of the Stores, through one DSN: the
// loader, the checks and the database-alone executor use it.
type DB struct {
	Store string
	DSN   string
	pg    *pgxpool.Pool
	my    *sql.DB
}

// Open creates the database named in dsn if it is missing and connects to
// it with up to conns connections.
func Open(ctx context.Context, store, dsn string, conns int) (*DB, error) {
	switch store {
	case Postgres:
		if err := EnsureDatabase(ctx, dsn); err != nil {
			return nil, err
		}
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			return nil, fmt.Errorf("tpcc: the DSN %q is not valid: %v", dsn, err)
		}
		cfg.MaxConns = int32(conns)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("tpcc: connecting to %s: %w", dsn, err)
		}
		return &DB{Store: store, DSN: dsn, pg: pool}, nil
	case MySQL:
		db, err := openMySQL(ctx, dsn, conns)
		if err != nil {
			return nil, err
		}
		return &DB{Store: store, DSN: dsn, my: db}, nil
	}
	return nil, fmt.Errorf("tpcc: %q is not a store; use postgres or mysql", store)
}

// Close closes the connections.
func (d *DB) Close() {
	if d.pg != nil {
		d.pg.Close()
	}
	if d.my != nil {
		_ = d.my.Close()
	}
}

// Executor is the database alone: each transaction a database transaction.
func (d *DB) Executor() Executor {
	if d.my != nil {
		return &MyExecutor{DB: d.my}
	}
	return &DBExecutor{Pool: d.pg}
}

// Exec runs one statement outside any transaction (in MariaDB's dialect
// on MySQL: placeholders "?").
func (d *DB) Exec(ctx context.Context, query string, args ...any) error {
	if d.my != nil {
		_, err := d.my.ExecContext(ctx, query, args...)
		return err
	}
	_, err := d.pg.Exec(ctx, query, args...)
	return err
}

// rows runs a query of the checks and returns its rows: integers as int64,
// other numbers as float64, NULL as nil.
func (d *DB) rows(ctx context.Context, query string) ([][]any, error) {
	if d.my != nil {
		return myRows(ctx, d.my, query)
	}
	rows, err := d.pg.Query(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]any
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		for i, v := range vals {
			switch x := v.(type) {
			case int32:
				vals[i] = int64(x)
			case int16:
				vals[i] = int64(x)
			case float32:
				vals[i] = float64(x)
			}
		}
		out = append(out, vals)
	}
	return out, rows.Err()
}
