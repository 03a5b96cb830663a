// Package testenv locates the real services that integration tests talk to
// (Redis, PostgreSQL, MariaDB/MySQL, a MongoDB-wire server) and fails a test,
// with a message that says how to start them, when one does not answer. It
// never skips.
//
// The addresses come from environment variables with defaults matching
// scripts/services.sh:
//
//	WRITEBACK_TEST_PG_DSN     postgres://postgres@127.0.0.1:5432/writeback?sslmode=disable
//	WRITEBACK_TEST_MYSQL_DSN  root@tcp(127.0.0.1:3306)/writeback
//	WRITEBACK_TEST_REDIS      127.0.0.1:6379
//	WRITEBACK_TEST_MONGO_URI  mongodb://127.0.0.1:27017
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Defaults of the environment variables.
const (
	DefaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/writeback?sslmode=disable"
	DefaultMySQLDSN    = "root@tcp(127.0.0.1:3306)/writeback"
	DefaultRedisAddr   = "127.0.0.1:6379"
	DefaultMongoURI    = "mongodb://127.0.0.1:27017"
)

// checkTimeout bounds how long a service may take to answer.
const checkTimeout = 3 * time.Second

const startHint = "start it with `make services` (scripts/services.sh up)"

// checks remembers, per service and address, the outcome of the first
// check, so that a test binary checks each service once.
var checks sync.Map // string → *check

type check struct {
	once sync.Once
	err  error
}

func checkOnce(key string, f func(context.Context) error) error {
	v, _ := checks.LoadOrStore(key, &check{})
	c := v.(*check)
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
		defer cancel()
		c.err = f(ctx)
	})
	return c.err
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// PostgresDSN returns the DSN of the test PostgreSQL database, after
// checking that it answers.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	dsn := env("WRITEBACK_TEST_PG_DSN", DefaultPostgresDSN)
	addr := dsn
	if cfg, err := pgx.ParseConfig(dsn); err == nil {
		addr = fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
	}
	err := checkOnce("postgres "+dsn, func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		return conn.Ping(ctx)
	})
	if err != nil {
		t.Fatalf("testenv: PostgreSQL is unreachable at %s (%v); %s.", addr, err, startHint)
	}
	return dsn
}

// MySQLDSN returns the DSN (go-sql-driver form) of the test MariaDB/MySQL
// database, after checking that it answers.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	dsn := env("WRITEBACK_TEST_MYSQL_DSN", DefaultMySQLDSN)
	addr := dsn
	cfg, err := mysql.ParseDSN(dsn)
	if err == nil {
		addr = cfg.Addr + "/" + cfg.DBName
		err = checkOnce("mysql "+dsn, func(ctx context.Context) error {
			cfg := cfg.Clone()
			cfg.Timeout = checkTimeout
			connector, err := mysql.NewConnector(cfg)
			if err != nil {
				return err
			}
			db := sql.OpenDB(connector)
			defer db.Close()
			return db.PingContext(ctx)
		})
	}
	if err != nil {
		t.Fatalf("testenv: MariaDB/MySQL is unreachable at %s (%v); %s.", addr, err, startHint)
	}
	return dsn
}

// RedisAddr returns the host:port of the test Redis, after checking that it
// accepts TCP connections.
func RedisAddr(t testing.TB) string {
	t.Helper()
	addr := env("WRITEBACK_TEST_REDIS", DefaultRedisAddr)
	err := checkOnce("redis "+addr, func(ctx context.Context) error {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return conn.Close()
	})
	if err != nil {
		t.Fatalf("testenv: Redis is unreachable at %s (%v); %s.", addr, err, startHint)
	}
	return addr
}

// PrivateRedis runs a redis-server of the test's own (no persistence, its
// files in a temporary directory) on a free loopback port until the test
// ends, and returns its address once it accepts connections: for tests that
// change a server's configuration (maxmemory, replicas). args are more of
// the server's options ("--maxmemory-policy", "allkeys-lru").
func PrivateRedis(t testing.TB, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("testenv: redis-server is not on PATH (%v); %s.", err, startHint)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	dir := t.TempDir()
	log := filepath.Join(dir, "redis.log")
	cmd := exec.Command(bin, append([]string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--repl-diskless-sync", "no", "--dir", dir, "--logfile", log}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: starting redis-server: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return addr
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(log)
			t.Fatalf("testenv: the private redis-server at %s did not answer in 10 s (%v); its log: %s", addr, err, out)
		}
	}
}

// MongoURI returns the URI of the test MongoDB-wire server (FerretDB in
// dev/CI, started by scripts/ferretdb.sh), after checking that it answers a
// ping.
func MongoURI(t testing.TB) string {
	t.Helper()
	uri := env("WRITEBACK_TEST_MONGO_URI", DefaultMongoURI)
	err := checkOnce("mongo "+uri, func(ctx context.Context) error {
		opts := options.Client().ApplyURI(uri).
			SetConnectTimeout(checkTimeout).
			SetServerSelectionTimeout(checkTimeout)
		client, err := mongo.Connect(opts)
		if err != nil {
			return err
		}
		defer client.Disconnect(context.Background())
		return client.Ping(ctx, nil)
	})
	if err != nil {
		t.Fatalf("testenv: the MongoDB-wire server is unreachable at %s (%v); %s.", uri, err, startHint)
	}
	return uri
}

// Store names a test database: the driver name store.Open takes and its
// DSN.
type Store = struct{ Driver, DSN string }

// Stores returns the test databases by driver name ("postgres", "mysql"),
// for tests that run against each of them.
func Stores(t testing.TB) map[string]Store {
	t.Helper()
	return map[string]Store{
		"postgres": {Driver: "postgres", DSN: PostgresDSN(t)},
		"mysql":    {Driver: "mysql", DSN: MySQLDSN(t)},
	}
}

// UniqueName returns prefix (lowercased, anything but [a-z0-9_] made '_')
// followed by '_' and 8 random hex digits: a name for a table, collection
// or key that no other test, run or package uses.
func UniqueName(t testing.TB, prefix string) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("testenv: random name: %v", err)
	}
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '_':
			return r
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		}
		return '_'
	}, prefix)
	return clean + "_" + hex.EncodeToString(b[:])
}
