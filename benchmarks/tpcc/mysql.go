package tpcc

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
)

// openMySQL creates the database named in dsn if it is missing and opens a
// pool of up to conns connections to it. Connections interpolate their
// arguments (one round trip per statement, as the sidecar's MySQL store
// does), may send several statements at once (GetMany's; every statement
// is this package's own) and run at READ COMMITTED, PostgreSQL's default
// and the sidecar's: REPEATABLE READ's gap locks would deadlock concurrent
// New-Orders' inserts for no consistency TPC-C asks of the database.
func openMySQL(ctx context.Context, dsn string, conns int) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("tpcc: the MySQL DSN %q is not valid: %v", dsn, err)
	}
	if cfg.DBName == "" {
		return nil, fmt.Errorf("tpcc: the MySQL DSN %q names no database (user@tcp(host:port)/tpcc)", dsn)
	}
	admin := cfg.Clone()
	admin.DBName = ""
	conn, err := mysql.NewConnector(admin)
	if err != nil {
		return nil, err
	}
	adb := sql.OpenDB(conn)
	_, err = adb.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS `"+strings.ReplaceAll(cfg.DBName, "`", "``")+"`")
	adb.Close()
	if err != nil {
		return nil, fmt.Errorf("tpcc: cannot create the database %s on MySQL at %s (%v); start the services with `make services`", cfg.DBName, cfg.Addr, err)
	}
	cfg.InterpolateParams = true
	cfg.MultiStatements = true
	cfg.ParseTime = false
	// READ COMMITTED on every connection (the driver sets each parameter
	// when it connects), as PostgreSQL's default and the sidecar's store.
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["tx_isolation"] = "'READ-COMMITTED'"
	base, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(base)
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("tpcc: connecting to MySQL at %s: %w", cfg.Addr, err)
	}
	return db, nil
}

// missingTable reports whether err says a table does not exist.
func missingTable(err error) bool {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == 1146
	}
	return strings.Contains(err.Error(), "does not exist")
}

var pgTimestamp = regexp.MustCompile(`\btimestamp\b`)

// myDDL is a CREATE of ddl in MariaDB's types: datetime(6) for PostgreSQL's
// timestamp (MariaDB's timestamp would update itself on every UPDATE of
// the row), the rest as it is.
func myDDL(q string) string { return pgTimestamp.ReplaceAllString(q, "datetime(6)") }

// loads numbers the reader handlers of myLoadRows.
var loads atomic.Int64

// myLoadRows loads n rows into table with one LOAD DATA LOCAL INFILE,
// streaming them from row (called in order, on another goroutine, and
// finished before it returns) through the driver's reader handler.
func myLoadRows(ctx context.Context, db *sql.DB, table string, cols []string, n int, row func(i int) []any) error {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		w := bufio.NewWriterSize(pw, 1<<16)
		var err error
		for i := 0; i < n && err == nil; i++ {
			err = writeTSV(w, row(i))
		}
		if err == nil {
			err = w.Flush()
		}
		pw.CloseWithError(err)
	}()
	name := fmt.Sprintf("tpcc-%s-%d", table, loads.Add(1))
	mysql.RegisterReaderHandler(name, func() io.Reader { return pr })
	_, err := db.ExecContext(ctx, "LOAD DATA LOCAL INFILE 'Reader::"+name+"' INTO TABLE "+table+" CHARACTER SET utf8mb4 ("+strings.Join(cols, ", ")+")")
	mysql.DeregisterReaderHandler(name)
	pr.CloseWithError(errors.New("tpcc: the load ended")) // a writer still writing stops
	<-done
	if err != nil {
		return fmt.Errorf("tpcc: loading %s: %w", table, err)
	}
	return nil
}

// tsvEscaper escapes what LOAD DATA's default format (fields separated by
// tabs, lines by newlines, escaped by backslash) would misread.
var tsvEscaper = strings.NewReplacer("\\", "\\\\", "\t", "\\t", "\n", "\\n")

// writeTSV writes one row as a line of LOAD DATA's default format: \N for
// NULL.
func writeTSV(w *bufio.Writer, vals []any) error {
	for i, v := range vals {
		if i > 0 {
			w.WriteByte('\t')
		}
		switch x := v.(type) {
		case nil:
			w.WriteString(`\N`)
		case int:
			w.WriteString(strconv.Itoa(x))
		case float64:
			w.WriteString(strconv.FormatFloat(x, 'f', -1, 64))
		case string:
			tsvEscaper.WriteString(w, x)
		case time.Time:
			w.WriteString(x.UTC().Format("2006-01-02 15:04:05.000000"))
		default:
			return fmt.Errorf("tpcc: cannot load a %T", v)
		}
	}
	return w.WriteByte('\n')
}

// myValue is a column's text as a Go value by its database type: int64,
// float64 (DECIMAL, FLOAT, DOUBLE), nil for NULL, a string otherwise
// (dates included, as the server writes them).
func myValue(typ string, b sql.RawBytes) (any, error) {
	if b == nil {
		return nil, nil
	}
	switch strings.TrimPrefix(typ, "UNSIGNED ") {
	case "TINYINT", "SMALLINT", "MEDIUMINT", "INT", "BIGINT", "YEAR":
		return strconv.ParseInt(string(b), 10, 64)
	case "DECIMAL", "FLOAT", "DOUBLE":
		return strconv.ParseFloat(string(b), 64)
	}
	return string(b), nil
}

// myScan reads the rows of the current result set of rows, each column
// converted by myValue, and calls add with each.
func myScan(rows *sql.Rows, add func(names []string, vals []any)) error {
	cts, err := rows.ColumnTypes()
	if err != nil {
		return err
	}
	names := make([]string, len(cts))
	for i, ct := range cts {
		names[i] = ct.Name()
	}
	raw := make([]sql.RawBytes, len(cts))
	dest := make([]any, len(cts))
	for i := range raw {
		dest[i] = &raw[i]
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		vals := make([]any, len(cts))
		for i, r := range raw {
			if vals[i], err = myValue(cts[i].DatabaseTypeName(), r); err != nil {
				return fmt.Errorf("column %s: %w", names[i], err)
			}
		}
		add(names, vals)
	}
	return rows.Err()
}

// myRows runs a query of the checks (DB.rows).
func myRows(ctx context.Context, db *sql.DB, query string) ([][]any, error) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]any
	err = myScan(rows, func(_ []string, vals []any) { out = append(out, vals) })
	return out, err
}
