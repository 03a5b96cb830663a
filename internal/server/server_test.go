package server_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/config"
	"github.com/writeback/writeback/internal/server"
	"github.com/writeback/writeback/internal/testenv"
	"github.com/writeback/writeback/pkg/client"
)

// fixture is one test's data: two PostgreSQL tables <table> and
// <table>_wt (id bigint PRIMARY KEY, n bigint, s text), each holding the
// row (1, 1, 'one'), served as the write-back collection <table> and the
// write-through collection <table>_wt; and a Redis key prefix. It removes
// them when the test ends.
type fixture struct {
	table  string
	prefix string
	dsn    string
	pg     *sql.DB
	rdb    *redis.Client
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{table: testenv.UniqueName(t, "srv"), prefix: testenv.UniqueName(t, "srvwb"), dsn: testenv.PostgresDSN(t)}
	f.rdb = redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	var err error
	if f.pg, err = sql.Open("pgx", f.dsn); err != nil {
		t.Fatal(err)
	}
	for _, tbl := range []string{f.table, f.table + "_wt"} {
		if _, err := f.pg.Exec(fmt.Sprintf("CREATE TABLE %s (id bigint PRIMARY KEY, n bigint, s text); INSERT INTO %s VALUES (1, 1, 'one')", tbl, tbl)); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if keys, _ := f.rdb.Keys(ctx, f.prefix+":*").Result(); len(keys) > 0 {
			f.rdb.Del(ctx, keys...)
		}
		f.rdb.Close()
		_, _ = f.pg.Exec(fmt.Sprintf("DROP TABLE IF EXISTS %s, %s_wt", f.table, f.table))
		_, _ = f.pg.Exec("DELETE FROM writeback_applied_docs WHERE collection IN ($1, $2)", f.table, f.table+"_wt")
		f.pg.Close()
	})
	return f
}

// config is a valid configuration serving the fixture, with the
// Redis-protocol front door on a free port; the appliers poll once an hour
// so that nothing is applied unless a test asks.
func (f *fixture) config(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test", fmt.Appendf(nil, `listen: 127.0.0.1:0
listenResp: 127.0.0.1:0
redis: {addrs: [%q], keyPrefix: %q}
stores: {pg: {driver: postgres, dsn: %q, maxConns: 4}}
collections:
  %s: {store: pg, key: id}
  %s_wt: {store: pg, key: id, policy: write-through}
writeback: {partitions: 4, workers: 2, pollInterval: 1h, ownerLease: 3h, instanceID: %s}
`, testenv.RedisAddr(t), f.prefix, f.dsn, f.table, f.table, f.prefix))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// running is a server whose Run is in progress.
type running struct {
	srv    *server.Server
	url    string
	cancel context.CancelFunc
	done   chan error // Run's result
}

// run validates cfg, builds the server and runs it until the test ends
// (or the test calls stop).
func run(t *testing.T, cfg *config.Config) *running {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(context.Background(), cfg, prometheus.NewRegistry(), quietLog())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{srv: srv, url: "http://" + srv.Addr(), cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- srv.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop ends Run and returns once it has returned; idempotent.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok && err != nil {
			t.Errorf("Run: %v", err)
		}
		if ok {
			close(r.done)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return within 20s of its context's end")
	}
}

func quietLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// call sends a request and decodes a JSON answer into out (if not nil);
// it returns the status code.
func (r *running) call(t *testing.T, method, path, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, r.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode
}

// exposition reads /metrics.
func (r *running) exposition(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(r.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// metric returns the value of one series of /metrics, written as the
// exposition writes it (labels in name order); -1 when absent.
func (r *running) metric(t *testing.T, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(r.exposition(t), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return -1
}

func (r *running) status(t *testing.T) client.Status {
	t.Helper()
	var st client.Status
	if code := r.call(t, "GET", "/v1/status", "", &st); code != http.StatusOK {
		t.Fatalf("status: %d", code)
	}
	return st
}

// poll waits for cond, checking it every 10 ms, for at most within.
func poll(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
	}
}

// closedAddr is a local address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A valid configuration gives a server that serves the API and the
// Redis-protocol front door over one document service, and reports itself
// in /v1/status and writeback_build_info.
func TestServes(t *testing.T) {
	f := newFixture(t)
	cfg := f.config(t)
	r := run(t, cfg)
	st := r.status(t)
	if st.Sidecar != cfg.Writeback.InstanceID || st.Version != server.Version || st.Partitions != 4 || len(st.Collections) != 2 {
		t.Errorf("status: sidecar %q version %q, %d partitions, %d collections; want %q %q 4 2",
			st.Sidecar, st.Version, st.Partitions, len(st.Collections), cfg.Writeback.InstanceID, server.Version)
	}
	if r.srv.RespAddr() == "" {
		t.Fatal("RespAddr is empty with listenResp set")
	}
	rc := redis.NewClient(&redis.Options{Addr: r.srv.RespAddr(), MaxRetries: -1})
	defer rc.Close()
	ctx := context.Background()
	if err := rc.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING over the Redis protocol: %v", err)
	}
	if err := rc.HSet(ctx, f.table+"/1", "s", "via-resp").Err(); err != nil {
		t.Fatalf("HSET over the Redis protocol: %v", err)
	}
	var doc map[string]any
	if code := r.call(t, "GET", "/v1/docs/"+f.table+"/1", "", &doc); code != http.StatusOK || doc["s"] != "via-resp" {
		t.Errorf("HTTP read after a RESP write: %d %v; want s = via-resp", code, doc)
	}
	if got, err := rc.HGet(ctx, f.table+"/1", "n").Result(); err != nil || got != "1" {
		t.Errorf("HGET n over the Redis protocol: %q %v; want 1", got, err)
	}
	build := `writeback_build_info{commit="` + server.Commit + `",goversion="`
	if m := r.exposition(t); !strings.Contains(m, build) || !strings.Contains(m, `version="`+server.Version+`"} 1`) {
		t.Errorf("/metrics lacks writeback_build_info with commit %q and version %q", server.Commit, server.Version)
	}

	t.Run("without the Redis-protocol front door", func(t *testing.T) {
		cfg := f.config(t)
		cfg.ListenResp = ""
		cfg.Writeback.InstanceID += "-b"
		r := run(t, cfg)
		if got := r.srv.RespAddr(); got != "" {
			t.Errorf("RespAddr = %q with listenResp empty", got)
		}
		poll(t, 5*time.Second, "the second sidecar to count both", func() bool { return r.status(t).Sidecars == 2 })
	})
}

// The Redis-protocol front door on a Unix socket (listenResp:
// unix:<path>, with resp.socketMode's permissions): it replaces a socket
// file no process listens on, refuses one a running sidecar listens on and
// a file that is not a socket (or a path in no directory), serves the
// documents as over TCP, and removes its socket when it stops.
func TestServesOnUnixSocket(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "resp.sock")
	// A socket file left by a process that died: nothing listens on it.
	stale, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the stale socket file is gone before the test: %v", err)
	}

	cfg := f.config(t)
	cfg.ListenResp, cfg.Resp.SocketMode = "unix:"+path, "0660"
	r := run(t, cfg)
	if got := r.srv.RespAddr(); got != cfg.ListenResp {
		t.Errorf("RespAddr = %q; want %q", got, cfg.ListenResp)
	}
	if fi, err := os.Lstat(path); err != nil {
		t.Errorf("the socket file: %v", err)
	} else if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o660 {
		t.Errorf("the socket file's mode %v; want a socket with permissions 0660 (resp.socketMode)", fi.Mode())
	}
	rc := redis.NewClient(&redis.Options{Network: "unix", Addr: path, MaxRetries: -1})
	defer rc.Close()
	ctx := context.Background()
	if err := rc.HSet(ctx, f.table+"/1", "s", "via-socket").Err(); err != nil {
		t.Fatalf("HSET over the Unix socket: %v", err)
	}
	if got, err := rc.HGet(ctx, f.table+"/1", "s").Result(); err != nil || got != "via-socket" {
		t.Errorf("HGET over the Unix socket: %q %v; want via-socket", got, err)
	}
	var doc map[string]any
	if code := r.call(t, "GET", "/v1/docs/"+f.table+"/1", "", &doc); code != http.StatusOK || doc["s"] != "via-socket" {
		t.Errorf("HTTP read after a write over the socket: %d %v; want s = via-socket", code, doc)
	}
	if info, err := rc.ClientInfo(ctx).Result(); err != nil || info.Addr != path+":0" || info.LAddr != path+":0" {
		t.Errorf("CLIENT INFO: %+v %v; want addr and laddr %s:0, as Redis shows a Unix socket's client", info, err, path)
	}

	refused := func(name string, c *config.Config, want string) {
		t.Helper()
		srv, err := server.New(context.Background(), c, prometheus.NewRegistry(), quietLog())
		if err == nil {
			_ = srv.Run(canceled())
			t.Fatalf("%s: New accepted the configuration", name)
		}
		if msg := err.Error(); !strings.Contains(msg, want) || !strings.Contains(msg, "--listen-resp") {
			t.Errorf("%s: New: %q; want it to say %q and how to fix it", name, msg, want)
		}
	}
	second := f.config(t)
	second.Listen, second.ListenResp = closedAddr(t), cfg.ListenResp
	second.Writeback.InstanceID += "-b"
	refused("a running sidecar's socket", second, "another process listens on "+path)
	if err := rc.Ping(ctx).Err(); err != nil {
		t.Errorf("the first sidecar's socket after the second was refused: %v", err)
	}

	r.stop(t)
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the socket file after the sidecar stopped: %v; want it removed", err)
	}

	file := filepath.Join(dir, "not-a-socket")
	if err := os.WriteFile(file, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	third := f.config(t)
	third.Listen, third.ListenResp = closedAddr(t), "unix:"+file
	refused("a regular file", third, file+" exists and is not a socket")
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep me" {
		t.Errorf("the file New refused to replace: %q %v; want it untouched", b, err)
	}
	third.ListenResp = "unix:" + filepath.Join(dir, "missing", "resp.sock")
	refused("a directory that does not exist", third, "its directory must exist")
}

// New refuses what it cannot serve with one sentence naming what to fix,
// and releases what it had opened (here: the API's address).
func TestNewRefuses(t *testing.T) {
	f := newFixture(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cases := []struct {
		name string
		edit func(*config.Config)
		want []string
	}{
		{"Redis unreachable", func(c *config.Config) { c.Redis.Addrs = []string{closedAddr(t)} },
			[]string{"cannot reach Redis", "start it or fix redis.addrs"}},
		{"store unreachable", func(c *config.Config) {
			c.Stores["pg"] = config.Store{Driver: "postgres", DSN: "postgres://postgres@" + closedAddr(t) + "/writeback?sslmode=disable&connect_timeout=2", MaxConns: 1}
		}, []string{"store pg: "}},
		{"missing table", func(c *config.Config) {
			c.Collections["ghost"] = config.Collection{Store: "pg", Table: f.table + "_ghost", Key: "id", Policy: "write-back", CacheTTL: config.Duration{Duration: time.Hour}}
		}, []string{"collections.ghost: ", "does not exist"}},
		{"key not the primary key", func(c *config.Config) {
			cc := c.Collections[f.table]
			cc.Key = "n"
			c.Collections[f.table] = cc
		}, []string{"collections." + f.table + ": "}},
		{"bad mapping", func(c *config.Config) {
			c.Mappings = []map[string]any{{"plugin": "sql", "store": "pg", "query": "SELECT 1"}}
		}, []string{"mappings[0] (sql): key: "}},
		{"listen address in use", func(c *config.Config) { c.Listen = busy.Addr().String() },
			[]string{"listen " + busy.Addr().String(), "choose a free address with --listen"}},
		{"listenResp address in use", func(c *config.Config) { c.ListenResp = busy.Addr().String() },
			[]string{"listenResp " + busy.Addr().String(), "--listen-resp"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := f.config(t)
			cfg.Listen = closedAddr(t)
			tc.edit(cfg)
			if err := cfg.Validate(); err != nil {
				t.Fatalf("the configuration is invalid before New sees it: %v", err)
			}
			srv, err := server.New(context.Background(), cfg, prometheus.NewRegistry(), quietLog())
			if err == nil {
				_ = srv.Run(canceled()) // only to release it
				t.Fatal("New accepted the configuration")
			}
			msg := err.Error()
			t.Log(msg)
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("New: %q; want it to contain %q", msg, w)
				}
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("New: %q is more than one line", msg)
			}
			if cfg.Listen != busy.Addr().String() {
				ln, err := net.Listen("tcp", cfg.Listen)
				if err != nil {
					t.Errorf("the API's address %s is still taken after New failed: %v", cfg.Listen, err)
				} else {
					ln.Close()
				}
			}
		})
	}
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
