package ycsb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
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
		var recs []Record
		var err error
		switch {
		case d.mg != nil:
			recs, err = d.readRowsMongo(ctx, s, part)
		case d.pg != nil:
			recs, err = d.readRowsPostgres(ctx, s, cols, part)
		default:
			recs, err = d.readRowsMySQL(ctx, s, cols, part)
		}
		if err != nil {
			return nil, fmt.Errorf("ycsb: reading %s: %w", s.Table, err)
		}
		for _, r := range recs {
			out[r.Key] = r.Row
		}
	}
	return out, nil
}

func (d *DB) readRowsPostgres(ctx context.Context, s Spec, cols string, keys []string) ([]Record, error) {
	rows, err := d.pg.Query(ctx, fmt.Sprintf("SELECT %s FROM %s WHERE %s = ANY($1)", cols, s.Table, KeyColumn), keys)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanRecords(rows.Next, rows.Scan, rows.Err, s.Fields, len(keys))
}

func (d *DB) readRowsMySQL(ctx context.Context, s Spec, cols string, keys []string) ([]Record, error) {
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = k
	}
	q := fmt.Sprintf("SELECT %s FROM %s WHERE %s IN (%s)", cols, s.Table, KeyColumn, strings.TrimSuffix(strings.Repeat("?,", len(keys)), ","))
	rows, err := d.my.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanRecords(rows.Next, rows.Scan, rows.Err, s.Fields, len(keys))
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
