package bench

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// The policies a benchmark compares. Database and DatabaseAsync talk to the
// database directly; the others go through a sidecar with that collection
// policy, over HTTP, except WriteBackRESP, which is write-back through the
// Redis-protocol front door, and WriteBackEmbedded, which is write-back in
// the benchmark's own process (pkg/writeback, the sidecar running the
// appliers).
const (
	Database      = "database"       // the database alone, its default durability
	DatabaseAsync = "database-async" // the database alone with its own asynchronous commit
	WriteAround   = "write-around"
	WriteThrough  = "write-through"
	WriteBack     = "write-back"
	WriteBackRESP = "write-back-resp"
	// WriteBackEmbedded is the embedded mode: the clients call
	// pkg/writeback in-process, one more member beside the sidecar.
	WriteBackEmbedded = "write-back-embedded"
)

// Policies are every policy, in the order tables and plots show them.
var Policies = []string{Database, DatabaseAsync, WriteAround, WriteThrough, WriteBack, WriteBackRESP, WriteBackEmbedded}

// Sidecar reports whether policy p runs through a sidecar, and which
// collection policy that sidecar serves.
func Sidecar(p string) (collectionPolicy string, ok bool) {
	switch p {
	case WriteAround, WriteThrough, WriteBack:
		return p, true
	case WriteBackRESP, WriteBackEmbedded:
		return WriteBack, true
	}
	return "", false
}

// ParsePolicies parses a comma-separated list of policies ("all" is every
// one) into the order of Policies. An unknown name is an error that lists
// the known ones.
func ParsePolicies(s string) ([]string, error) {
	if strings.TrimSpace(s) == "all" {
		return slices.Clone(Policies), nil
	}
	want := map[string]bool{}
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !slices.Contains(Policies, p) {
			return nil, fmt.Errorf("unknown policy %q; use all or some of %s", p, strings.Join(Policies, ","))
		}
		want[p] = true
	}
	var out []string
	for _, p := range Policies {
		if want[p] {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no policy given; use all or some of %s", strings.Join(Policies, ","))
	}
	return out, nil
}

// AsyncDSN returns dsn changed so that connections made with it commit
// asynchronously, the way a user would first try to make the database
// faster:
//   - postgres: synchronous_commit=off as a run-time parameter of the
//     connection (a commit returns before its WAL record is flushed);
//   - mongodb: the write concern w=1, journal=false (acknowledged once the
//     primary has it in memory).
//
// MySQL/MariaDB's equivalent, innodb_flush_log_at_trx_commit=2, is a
// global setting: see MySQLAsync. For mysql the DSN is returned unchanged.
func AsyncDSN(driver, dsn string) (string, error) {
	switch driver {
	case "postgres":
		return withQuery(dsn, "synchronous_commit", "off")
	case "mongodb":
		d, err := withQuery(dsn, "w", "1")
		if err != nil {
			return "", err
		}
		return withQuery(d, "journal", "false")
	case "mysql":
		return dsn, nil
	}
	return "", fmt.Errorf("no asynchronous commit for store %q; use postgres, mysql or mongodb", driver)
}

func withQuery(dsn, k, v string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return "", fmt.Errorf("the DSN %q is not a URL; write it as scheme://user@host:port/db", dsn)
	}
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	if u.Path == "" {
		u.Path = "/" // mongodb://host:port?… is refused: options follow a "/"
	}
	return u.String(), nil
}

// MySQLAsync sets MariaDB/MySQL's innodb_flush_log_at_trx_commit to 2 (the
// redo log is written at every commit but flushed to disk about once a
// second) and returns a function that restores the previous value. It
// needs a user with SUPER or SYSTEM_VARIABLES_ADMIN (root on the project's
// services).
func MySQLAsync(ctx context.Context, dsn string) (restore func(context.Context) error, err error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("MySQL DSN %q: %v", dsn, err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(conn)
	var old int
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.innodb_flush_log_at_trx_commit").Scan(&old); err != nil {
		db.Close()
		return nil, fmt.Errorf("cannot read innodb_flush_log_at_trx_commit at %s (%v); start the services with `make services`", cfg.Addr, err)
	}
	if _, err := db.ExecContext(ctx, "SET GLOBAL innodb_flush_log_at_trx_commit = 2"); err != nil {
		db.Close()
		return nil, fmt.Errorf("setting innodb_flush_log_at_trx_commit = 2 needs SUPER: %v", err)
	}
	return func(ctx context.Context) error {
		defer db.Close()
		_, err := db.ExecContext(ctx, fmt.Sprintf("SET GLOBAL innodb_flush_log_at_trx_commit = %d", old))
		return err
	}, nil
}
