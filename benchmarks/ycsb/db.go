package ycsb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Drivers of DB.
const (
	Postgres = "postgres"
	MySQL    = "mysql"
	MongoDB  = "mongodb"
)

// DB is a PostgreSQL, MySQL/MariaDB or MongoDB database holding YCSB tables
// (MongoDB: collections). Its methods are for one goroutine at a time;
// clients for concurrent load come from NewClient, each with its own
// connection (MongoDB: sharing the driver's pool).
type DB struct {
	driver string
	pgCfg  *pgx.ConnConfig
	pg     *pgx.Conn // postgres: the administrative connection
	myCfg  *mysql.Config
	my     *sql.DB         // mysql: a pool; NewClient takes a dedicated connection from it
	mg     *mongo.Database // mongodb (see OpenMongo)
}

// Open connects to the database. A connection failure says how to start
// the project's services.
func Open(ctx context.Context, driver, dsn string) (*DB, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d := &DB{driver: driver}
	switch driver {
	case Postgres:
		cfg, err := pgx.ParseConfig(withoutPoolParams(dsn))
		if err != nil {
			return nil, fmt.Errorf("ycsb: PostgreSQL DSN %q: %v", dsn, err)
		}
		d.pgCfg = cfg
		if d.pg, err = pgx.ConnectConfig(ctx, cfg); err != nil {
			return nil, fmt.Errorf("cannot connect to PostgreSQL at %s:%d/%s (%v); start the services with `make services`", cfg.Host, cfg.Port, cfg.Database, err)
		}
	case MySQL:
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return nil, fmt.Errorf("ycsb: MySQL DSN %q: %v", dsn, err)
		}
		// Found rows, not changed rows: an UPDATE of an existing record
		// then always reports one row, which is how a client tells that
		// the record exists.
		cfg.ClientFoundRows = true
		d.myCfg = cfg
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, fmt.Errorf("ycsb: MySQL DSN %q: %v", dsn, err)
		}
		d.my = sql.OpenDB(conn)
		d.my.SetMaxIdleConns(256)
		if err := d.my.PingContext(ctx); err != nil {
			d.my.Close()
			return nil, fmt.Errorf("cannot connect to MySQL/MariaDB at %s/%s (%v); start the services with `make services`", cfg.Addr, cfg.DBName, err)
		}
	default:
		return nil, fmt.Errorf("ycsb: unknown store %q; use postgres or mysql (MongoDB: OpenMongo)", driver)
	}
	return d, nil
}

// withoutPoolParams removes pgxpool's settings (pool_max_conns …) from a
// URL DSN: the sidecar's store honours them, and a plain pgx connection
// would send them to the server as unknown run-time parameters.
func withoutPoolParams(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return dsn
	}
	q := u.Query()
	for k := range q {
		if strings.HasPrefix(k, "pool_") {
			q.Del(k)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Driver is "postgres", "mysql" or "mongodb".
func (d *DB) Driver() string { return d.driver }

// Close closes every connection of the DB (clients close their own).
func (d *DB) Close() error {
	switch {
	case d.pg != nil:
		return d.pg.Close(context.Background())
	case d.mg != nil:
		return d.mg.Client().Disconnect(context.Background())
	}
	return d.my.Close()
}

// Placeholder is the n-th (1-based) statement parameter in the driver's
// style.
func (d *DB) Placeholder(n int) string {
	if d.driver == Postgres {
		return fmt.Sprintf("$%d", n)
	}
	return "?"
}

// Exec runs one statement on the administrative connection of a SQL
// database.
func (d *DB) Exec(ctx context.Context, query string, args ...any) error {
	if d.mg != nil {
		return errors.New("ycsb: MongoDB runs no SQL statements")
	}
	if d.pg != nil {
		_, err := d.pg.Exec(ctx, query, args...)
		return err
	}
	_, err := d.my.ExecContext(ctx, query, args...)
	return err
}

// TableExists reports whether the current database/schema has the table.
func (d *DB) TableExists(ctx context.Context, table string) (bool, error) {
	var ok bool
	var err error
	if d.mg != nil {
		return d.mongoHas(ctx, table)
	}
	if d.pg != nil {
		err = d.pg.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&ok)
	} else {
		err = d.my.QueryRowContext(ctx, "SELECT COUNT(*) > 0 FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?", table).Scan(&ok)
	}
	return ok, err
}

var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func (s Spec) check() error {
	if err := s.Validate(); err != nil {
		return err
	}
	if !tableName.MatchString(s.Table) {
		return fmt.Errorf("ycsb: table name %q: use lower-case letters, digits and '_'", s.Table)
	}
	return nil
}

// createSQL is YCSB's JDBC schema: a varchar key (bytewise ordered, as the
// sidecar's scans expect) and one text column per field. MySQL gets
// varchar fields when the row fits InnoDB's 64 KiB row limit.
func (d *DB) createSQL(s Spec) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE %s (", s.Table)
	if d.driver == Postgres {
		fmt.Fprintf(&b, `%s varchar(64) COLLATE "C" PRIMARY KEY`, KeyColumn)
	} else {
		fmt.Fprintf(&b, "%s varchar(64) CHARACTER SET ascii COLLATE ascii_nopad_bin PRIMARY KEY", KeyColumn)
	}
	field := "text"
	if d.driver == MySQL && s.Fields*s.FieldSize < 12000 {
		field = fmt.Sprintf("varchar(%d)", s.FieldSize)
	}
	for i := range s.Fields {
		fmt.Fprintf(&b, ", %s %s", FieldName(i), field)
	}
	b.WriteString(")")
	if d.driver == MySQL {
		b.WriteString(" ENGINE=InnoDB DEFAULT CHARSET=utf8mb4")
	}
	return b.String()
}

// Drop drops the table if it exists.
func (d *DB) Drop(ctx context.Context, table string) error {
	if !tableName.MatchString(table) {
		return fmt.Errorf("ycsb: table name %q: use lower-case letters, digits and '_'", table)
	}
	if d.mg != nil {
		return d.mg.Collection(table).Drop(ctx)
	}
	return d.Exec(ctx, "DROP TABLE IF EXISTS "+table)
}

// Load (re)creates the table and fills it with s.Records rows of random
// values drawn from seed, with the fastest bulk path of the driver:
// COPY (pgx CopyFrom) for PostgreSQL, multi-row INSERTs in transactions
// for MySQL. progress, if not nil, is called about once a second with the
// number of rows sent so far, and once at the end with done set.
func (d *DB) Load(ctx context.Context, s Spec, seed uint64, progress func(rows int64, done bool)) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := d.Drop(ctx, s.Table); err != nil {
		return fmt.Errorf("ycsb: dropping %s: %w", s.Table, err)
	}
	if d.mg == nil {
		if err := d.Exec(ctx, d.createSQL(s)); err != nil {
			return fmt.Errorf("ycsb: creating %s: %w", s.Table, err)
		}
	}
	var done atomic.Int64
	stop := make(chan struct{})
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if progress != nil {
					progress(done.Load(), false)
				}
			}
		}
	}()
	src := &rowSource{s: s, r: rand.New(rand.NewPCG(seed, 0x5ca1ab1e)), done: &done}
	var err error
	switch d.driver {
	case Postgres:
		err = d.copyPostgres(ctx, src)
	case MongoDB:
		err = d.insertMongo(ctx, src)
	default:
		err = d.insertMySQL(ctx, src)
	}
	close(stop)
	<-ticked
	if err != nil {
		return fmt.Errorf("ycsb: loading %s: %w", s.Table, err)
	}
	if progress != nil {
		progress(done.Load(), true)
	}
	return nil
}

// rowSource generates the rows of a table in key order; it is a
// pgx.CopyFromSource.
type rowSource struct {
	s    Spec
	r    *rand.Rand
	next int64
	vals []any
	done *atomic.Int64
}

func (rs *rowSource) Next() bool {
	if rs.next >= rs.s.Records {
		return false
	}
	if rs.vals == nil {
		rs.vals = make([]any, 1+rs.s.Fields)
	}
	rs.vals[0] = Key(rs.next)
	for i := range rs.s.Fields {
		rs.vals[1+i] = RandomValue(rs.r, rs.s.FieldSize)
	}
	rs.next++
	rs.done.Store(rs.next)
	return true
}

func (rs *rowSource) Values() ([]any, error) { return rs.vals, nil }
func (rs *rowSource) Err() error             { return nil }

func columns(s Spec) []string {
	cols := []string{KeyColumn}
	for i := range s.Fields {
		cols = append(cols, FieldName(i))
	}
	return cols
}

func (d *DB) copyPostgres(ctx context.Context, src *rowSource) error {
	if _, err := d.pg.CopyFrom(ctx, pgx.Identifier{src.s.Table}, columns(src.s), src); err != nil {
		return err
	}
	// Fresh statistics, so the planner knows the table's size at once.
	_, err := d.pg.Exec(ctx, "ANALYZE "+src.s.Table)
	return err
}

// insertMySQL inserts batches of rows per statement, many statements per
// transaction. A batch stays far below max_allowed_packet and the
// 65,535-placeholder limit.
func (d *DB) insertMySQL(ctx context.Context, src *rowSource) error {
	s := src.s
	perRow := 1 + s.Fields
	batch := max(1, min(1000, (512<<10)/(s.Fields*s.FieldSize+64), 60000/perRow))
	const batchesPerTx = 10
	stmtFor := func(rows int) string {
		row := "(" + strings.TrimSuffix(strings.Repeat("?,", perRow), ",") + ")"
		return fmt.Sprintf("INSERT INTO %s (%s) VALUES %s", s.Table, strings.Join(columns(s), ","),
			strings.TrimSuffix(strings.Repeat(row+",", rows), ","))
	}
	conn, err := d.my.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	full, err := conn.PrepareContext(ctx, stmtFor(batch))
	if err != nil {
		return err
	}
	defer full.Close()
	args := make([]any, 0, batch*perRow)
	for {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		more := true
		for b := 0; b < batchesPerTx && more; b++ {
			args = args[:0]
			for len(args) < batch*perRow {
				if more = src.Next(); !more {
					break
				}
				args = append(args, src.vals...)
			}
			switch n := len(args) / perRow; {
			case n == batch:
				_, err = tx.StmtContext(ctx, full).ExecContext(ctx, args...)
			case n > 0:
				_, err = tx.ExecContext(ctx, stmtFor(n), args...)
			}
			if err != nil {
				_ = tx.Rollback()
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		if !more {
			return nil
		}
	}
}

// ReadRows reads the given records' fields, by key; missing records are
// absent from the map.
func (d *DB) ReadRows(ctx context.Context, s Spec, keys []string) (map[string]Row, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	out := make(map[string]Row, len(keys))
	cols := strings.Join(columns(s), ", ")
	const batch = 500
	for lo := 0; lo < len(keys); lo += batch {
		part := keys[lo:min(lo+batch, len(keys))]
		var err error
		switch {
		case d.mg != nil:
			err = d.readRowsMongo(ctx, s, part, out)
		case d.pg != nil:
			err = d.readRowsPostgres(ctx, s, cols, part, out)
		default:
			err = d.readRowsMySQL(ctx, s, cols, part, out)
		}
		if err != nil {
			return nil, fmt.Errorf("ycsb: reading %s: %w", s.Table, err)
		}
	}
	return out, nil
}

func (d *DB) readRowsPostgres(ctx context.Context, s Spec, cols string, keys []string, out map[string]Row) error {
	rows, err := d.pg.Query(ctx, fmt.Sprintf("SELECT %s FROM %s WHERE %s = ANY($1)", cols, s.Table, KeyColumn), keys)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		key, row, err := scanRecord(rows.Scan, s.Fields)
		if err != nil {
			return err
		}
		out[key] = row
	}
	return rows.Err()
}

func (d *DB) readRowsMySQL(ctx context.Context, s Spec, cols string, keys []string, out map[string]Row) error {
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = k
	}
	q := fmt.Sprintf("SELECT %s FROM %s WHERE %s IN (%s)", cols, s.Table, KeyColumn, strings.TrimSuffix(strings.Repeat("?,", len(keys)), ","))
	rows, err := d.my.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		key, row, err := scanRecord(rows.Scan, s.Fields)
		if err != nil {
			return err
		}
		out[key] = row
	}
	return rows.Err()
}

// scanRecord scans (key, field0, …) with a driver's Scan; NULL fields read
// as "".
func scanRecord(scan func(...any) error, fields int) (string, Row, error) {
	var key string
	vals := make([]sql.NullString, fields)
	dest := make([]any, 1+fields)
	dest[0] = &key
	for i := range vals {
		dest[1+i] = &vals[i]
	}
	if err := scan(dest...); err != nil {
		return "", nil, err
	}
	row := make(Row, fields)
	for i, v := range vals {
		row[i] = v.String
	}
	return key, row, nil
}

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

// scanRecords collects the records of a scan's result rows.
func scanRecords(next func() bool, scan func(...any) error, rowsErr func() error, fields, n int) ([]Record, error) {
	out := make([]Record, 0, n)
	for next() {
		key, row, err := scanRecord(scan, fields)
		if err != nil {
			return nil, err
		}
		out = append(out, Record{Key: key, Row: row})
	}
	return out, rowsErr()
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
