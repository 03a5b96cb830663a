package ycsb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// NewClient returns a client issuing YCSB's statements directly to the
// database on a connection of its own: read = SELECT * … WHERE key = $1,
// update = UPDATE … SET field<n> = $1 WHERE key = $2. PostgreSQL statements
// are prepared once per connection by pgx's statement cache; MySQL ones
// explicitly.
func (d *DB) NewClient(ctx context.Context, s Spec) (Client, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if d.mg != nil {
		return d.newMongoClient(s), nil
	}
	read := fmt.Sprintf("SELECT * FROM %s WHERE %s = %s", s.Table, KeyColumn, d.Placeholder(1))
	updates := make([]string, s.Fields)
	for i := range updates {
		updates[i] = fmt.Sprintf("UPDATE %s SET %s = %s WHERE %s = %s", s.Table, FieldName(i), d.Placeholder(1), KeyColumn, d.Placeholder(2))
	}
	scan := fmt.Sprintf("SELECT * FROM %s WHERE %s >= %s ORDER BY %s LIMIT %s", s.Table, KeyColumn, d.Placeholder(1), KeyColumn, d.Placeholder(2))
	sets := make([]string, s.Fields)
	for i := range sets {
		sets[i] = fmt.Sprintf("%s = %s", FieldName(i), d.Placeholder(i+1))
	}
	updateAll := fmt.Sprintf("UPDATE %s SET %s WHERE %s = %s", s.Table, strings.Join(sets, ", "), KeyColumn, d.Placeholder(s.Fields+1))
	if d.pg != nil {
		conn, err := pgx.ConnectConfig(ctx, d.pgCfg.Copy())
		if err != nil {
			return nil, fmt.Errorf("cannot connect to PostgreSQL (%v); start the services with `make services`", err)
		}
		return &pgClient{conn: conn, read: read, updates: updates, scan: scan, updateAll: updateAll, fields: s.Fields}, nil
	}
	conn, err := d.my.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to MySQL/MariaDB (%v); start the services with `make services`", err)
	}
	c := &myClient{conn: conn, fields: s.Fields}
	prepare := func(q string) *sql.Stmt {
		st, perr := conn.PrepareContext(ctx, q)
		if perr != nil && err == nil {
			err = perr
		}
		return st
	}
	c.read, c.scan, c.updateAll = prepare(read), prepare(scan), prepare(updateAll)
	for _, u := range updates {
		c.updates = append(c.updates, prepare(u))
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// errNoRecord is an update or read of a key the table does not have.
var errNoRecord = errors.New("ycsb: no such record")

type pgClient struct {
	conn      *pgx.Conn
	read      string
	updates   []string
	scan      string
	updateAll string
	fields    int
}

func (c *pgClient) Read(ctx context.Context, key string, decode bool) (Row, error) {
	_, row, err := scanRecord(c.conn.QueryRow(ctx, c.read, key).Scan, c.fields)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", errNoRecord, key)
	}
	return row, err
}

func (c *pgClient) Update(ctx context.Context, key string, field int, value string) error {
	tag, err := c.conn.Exec(ctx, c.updates[field], value, key)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("%w: %s", errNoRecord, key)
	}
	return nil
}

func (c *pgClient) Scan(ctx context.Context, from string, n int) ([]Record, error) {
	rows, err := c.conn.Query(ctx, c.scan, from, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanRecords(rows.Next, rows.Scan, rows.Err, c.fields, n)
}

func (c *pgClient) UpdateRecord(ctx context.Context, key string, row Row) error {
	tag, err := c.conn.Exec(ctx, c.updateAll, rowArgs(key, row)...)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("%w: %s", errNoRecord, key)
	}
	return nil
}

func (c *pgClient) Close() error { return c.conn.Close(context.Background()) }

// rowArgs are the arguments of an update of every field: the values, then
// the key.
func rowArgs(key string, row Row) []any {
	args := make([]any, 0, len(row)+1)
	for _, v := range row {
		args = append(args, v)
	}
	return append(args, key)
}

type myClient struct {
	conn      *sql.Conn
	read      *sql.Stmt
	updates   []*sql.Stmt
	scan      *sql.Stmt
	updateAll *sql.Stmt
	fields    int
}

func (c *myClient) Read(ctx context.Context, key string, decode bool) (Row, error) {
	_, row, err := scanRecord(c.read.QueryRowContext(ctx, key).Scan, c.fields)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", errNoRecord, key)
	}
	return row, err
}

func (c *myClient) Update(ctx context.Context, key string, field int, value string) error {
	res, err := c.updates[field].ExecContext(ctx, value, key)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("%w: %s", errNoRecord, key)
	}
	return nil
}

func (c *myClient) Scan(ctx context.Context, from string, n int) ([]Record, error) {
	rows, err := c.scan.QueryContext(ctx, from, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanRecords(rows.Next, rows.Scan, rows.Err, c.fields, n)
}

func (c *myClient) UpdateRecord(ctx context.Context, key string, row Row) error {
	res, err := c.updateAll.ExecContext(ctx, rowArgs(key, row)...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("%w: %s", errNoRecord, key)
	}
	return nil
}

func (c *myClient) Close() error {
	for _, st := range append(c.updates, c.read, c.scan, c.updateAll) {
		if st != nil {
			st.Close()
		}
	}
	return c.conn.Close()
}

var (
	_ Scanner       = (*pgClient)(nil)
	_ RecordUpdater = (*pgClient)(nil)
	_ Scanner       = (*myClient)(nil)
	_ RecordUpdater = (*myClient)(nil)
)
