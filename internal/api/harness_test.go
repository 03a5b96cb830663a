// Tests of the HTTP API: each test runs an in-process sidecar built by
// server.New (as `writeback serve` builds it) against the real Redis and
// PostgreSQL, and talks HTTP to it. The appliers poll once an hour, so
// nothing is applied behind a test's back: changes stay pending until the
// test flushes them, and counts in status are exact.
package api_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
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

// world is one test's sidecar and the data it serves, in PostgreSQL:
//
//	<coll>(id bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0 CHECK (n <= 100), s text)  write-back
//	<coll>_wt, the same table                                                           write-through
//
// and, with sessions, a queue family <family> over <coll>_acct(id, balance)
// with the mapping "<family>:acct:{id}" → {"id":…,"balance":…} in queue
// "<family>/{id}".
type world struct {
	t      *testing.T
	url    string
	token  string // sent with every request unless the test sets Authorization
	coll   string // the write-back collection (and its table)
	wt     string // the write-through collection (and its table)
	family string // the queue family, with sessions
	prefix string // the Redis key prefix
	pg     *sql.DB
	rdb    *redis.Client
	px     *proxy // PostgreSQL as the sidecar reaches it, with opts.proxy
	rpx    *proxy // Redis as the sidecar reaches it, with opts.redisPx
	hc     *http.Client
}

// opts shape a world.
type opts struct {
	token    string
	sessions bool // configure a queue family and a mapping
	proxy    bool // reach PostgreSQL through a proxy the test can cut
	redisPx  bool // reach Redis through a proxy the test can cut (world.rpx)
	edit     func(*config.Config)
	before   func(*world) // runs once the tables exist, before the sidecar starts
}

// newWorld creates the tables and starts the sidecar; everything is removed
// when the test ends.
func newWorld(t *testing.T, o opts) *world {
	t.Helper()
	w := &world{t: t, token: o.token, coll: testenv.UniqueName(t, "api"), prefix: testenv.UniqueName(t, "apiwb"),
		hc: &http.Client{Timeout: 30 * time.Second}}
	w.wt = w.coll + "_wt"
	redisAddr, dsn := testenv.RedisAddr(t), testenv.PostgresDSN(t)
	pg, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	w.pg = pg
	w.rdb = redis.NewClient(&redis.Options{Addr: redisAddr})
	tables := []string{w.coll, w.wt}
	for _, tbl := range tables {
		w.exec(fmt.Sprintf("CREATE TABLE %s (id bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0 CHECK (n <= 100), s text)", tbl))
	}
	var queues, maps string
	if o.sessions {
		w.family = testenv.UniqueName(t, "fam")
		acct := w.coll + "_acct"
		tables = append(tables, acct)
		w.exec(fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, balance bigint NOT NULL CHECK (balance >= 0))", acct))
		w.exec(fmt.Sprintf("INSERT INTO %s (id, balance) VALUES (1, 100), (2, 100)", acct))
		queues = fmt.Sprintf("queues:\n  %s: {store: pg, tables: [%s]}\n", w.family, acct)
		maps = fmt.Sprintf("mappings:\n  - {plugin: sql, store: pg, key: %q, query: %q, queue: %q}\n",
			w.family+":acct:{id}", "SELECT id, balance FROM "+acct+" WHERE id = $1", w.family+"/{id}")
	}
	t.Cleanup(func() {
		ctx := context.Background()
		iter := w.rdb.Scan(ctx, 0, w.prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			w.rdb.Del(ctx, iter.Val())
		}
		w.rdb.Close()
		for _, tbl := range tables {
			_, _ = pg.Exec("DROP TABLE IF EXISTS " + tbl)
		}
		_, _ = pg.Exec("DELETE FROM writeback_applied_docs WHERE collection IN ($1, $2)", w.coll, w.wt)
		if w.family != "" {
			_, _ = pg.Exec("DELETE FROM writeback_applied_sessions WHERE queue LIKE $1", w.family+"/%")
		}
		pg.Close()
	})
	if o.proxy {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		w.px = newProxy(t, u.Host)
		u.Host = w.px.addr
		dsn = u.String()
	}
	sidecarRedis := redisAddr
	if o.redisPx {
		w.rpx = newProxy(t, redisAddr)
		sidecarRedis = w.rpx.addr
	}
	cfg, err := config.Parse("test", []byte(fmt.Sprintf(`listen: 127.0.0.1:0
listenResp: ""
auth: {token: %q}
redis: {addrs: [%q], keyPrefix: %q}
stores:
  pg: {driver: postgres, dsn: %q, maxConns: 8}
collections:
  %s: {store: pg, key: id, policy: write-back}
  %s: {store: pg, key: id, policy: write-through}
%s%swriteback: {partitions: 4, workers: 2, pollInterval: 1h, ownerLease: 3h}
log: {level: error}
`, o.token, sidecarRedis, w.prefix, dsn, w.coll, w.wt, queues, maps)))
	if err != nil {
		t.Fatal(err)
	}
	if o.edit != nil {
		o.edit(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.before != nil {
		o.before(w)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	srv, err := server.New(context.Background(), cfg, prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	w.url = "http://" + srv.Addr()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	}) // runs before the cleanup above: the sidecar stops before its data goes
	return w
}

func (w *world) exec(q string, args ...any) {
	w.t.Helper()
	if _, err := w.pg.Exec(q, args...); err != nil {
		w.t.Fatalf("%s: %v", q, err)
	}
}

// reply is an HTTP answer, read in full.
type reply struct {
	code   int
	header http.Header
	body   []byte
}

// do sends a request; body may be "" (no body), else it is sent as
// application/json. hdr are header name/value pairs; an Authorization or
// Content-Type among them replaces the default.
func (w *world) do(t *testing.T, method, path, body string, hdr ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, w.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if w.token != "" {
		req.Header.Set("Authorization", "Bearer "+w.token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := w.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return reply{code: resp.StatusCode, header: resp.Header, body: b}
}

// ok fails unless the reply is a 200 (or want, if given), and decodes its
// JSON body into out when out is not nil.
func (r reply) ok(t *testing.T, what string, out any, want ...int) {
	t.Helper()
	code := http.StatusOK
	if len(want) > 0 {
		code = want[0]
	}
	if r.code != code {
		t.Fatalf("%s: %d %s; want %d", what, r.code, r.body, code)
	}
	if out != nil {
		if err := json.Unmarshal(r.body, out); err != nil {
			t.Fatalf("%s: %v in %s", what, err, r.body)
		}
	}
}

// isError checks that the reply follows the error model: the status, a
// JSON body {"error":{"code","message"}} with the code, and a message of
// one line containing msg.
func (r reply) isError(t *testing.T, what string, status int, code, msg string) {
	t.Helper()
	if r.code != status {
		t.Errorf("%s: %d %s; want %d", what, r.code, r.body, status)
		return
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q; want application/json", what, ct)
	}
	var eb client.ErrorBody
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&eb); err != nil {
		t.Errorf("%s: the body %s is not the error model: %v", what, r.body, err)
		return
	}
	if eb.Error.Code != code || !strings.Contains(eb.Error.Message, msg) || strings.Contains(eb.Error.Message, "\n") {
		t.Errorf("%s: error %q %q; want code %q and one line containing %q", what, eb.Error.Code, eb.Error.Message, code, msg)
	}
}

// retries checks that an error answer says whether retrying is safe, in
// its body ("retry") and its header (Retry-After, only when it is).
func (r reply) retries(t *testing.T, what string, want bool) {
	t.Helper()
	var eb client.ErrorBody
	if err := json.Unmarshal(r.body, &eb); err != nil {
		t.Errorf("%s: %v in %s", what, err, r.body)
		return
	}
	if eb.Error.Retry != want || (r.header.Get("Retry-After") != "") != want {
		t.Errorf("%s: retry %v, Retry-After %q; want retry %v, with Retry-After exactly when true", what, eb.Error.Retry, r.header.Get("Retry-After"), want)
	}
}

// status reads /v1/status.
func (w *world) status(t *testing.T) client.Status {
	t.Helper()
	var st client.Status
	w.do(t, "GET", "/v1/status", "").ok(t, "status", &st)
	return st
}

// flush applies everything pending and returns the result.
func (w *world) flush(t *testing.T) client.FlushResult {
	t.Helper()
	var res client.FlushResult
	w.do(t, "POST", "/v1/flush", `{"timeout":"20s"}`).ok(t, "flush", &res)
	return res
}

// metric returns the value of the sample whose name and labels are series
// (as the exposition writes it: labels in name order), or -1 if absent.
func (w *world) metric(t *testing.T, series string) float64 {
	t.Helper()
	r := w.do(t, "GET", "/metrics", "")
	r.ok(t, "metrics", nil)
	for _, line := range strings.Split(string(r.body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %v", line, err)
			}
			return f
		}
	}
	return -1
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// proxy forwards TCP connections to a target until cut, which closes its
// listener and every connection, so that the target looks down; restore
// listens again on the same address.
type proxy struct {
	t      *testing.T
	target string
	addr   string
	mu     sync.Mutex // guards ln and conns
	ln     net.Listener
	conns  []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	p := &proxy{t: t, target: target}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.cut)
	return p
}

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
}

// cut makes the target unreachable: connecting is refused, open
// connections are closed.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// restore makes the target reachable again, on the same address.
func (p *proxy) restore() {
	p.t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		p.t.Fatalf("proxy: listening again on %s: %v", p.addr, err)
	}
	p.serve(ln)
}
