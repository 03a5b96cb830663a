package resp_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
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
)

// world is an in-process sidecar serving a PostgreSQL table
// "<table>(id bigint primary key, s text, n bigint, f double precision,
// b boolean, j jsonb)" as collection <table>, and "<table>_nn", the same
// with "req text NOT NULL", as collection <table>_nn.
type world struct {
	addr   string // the Redis-protocol front door
	table  string
	reg    *prometheus.Registry
	db     *sql.DB
	stop   func()
	stopMu sync.Mutex // guards stop
}

// startWorld starts a sidecar; edit, if set, adjusts its configuration.
func startWorld(t testing.TB, edit func(*config.Config)) *world {
	t.Helper()
	w := &world{table: testenv.UniqueName(t, "resp")}
	prefix := testenv.UniqueName(t, "respwb")
	redisAddr, dsn := testenv.RedisAddr(t), testenv.PostgresDSN(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	w.db = db
	for _, tbl := range []string{w.table, w.table + "_nn"} {
		req := ""
		if strings.HasSuffix(tbl, "_nn") {
			req = ", req text NOT NULL"
		}
		if _, err := db.Exec(fmt.Sprintf("CREATE TABLE %s (id bigint PRIMARY KEY, s text, n bigint, f double precision, b boolean, j jsonb%s)", tbl, req)); err != nil {
			t.Fatal(err)
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() {
		w.shutdown()
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		rdb.Close()
		for _, tbl := range []string{w.table, w.table + "_nn"} {
			_, _ = db.Exec("DROP TABLE IF EXISTS " + tbl)
			_, _ = db.Exec("DELETE FROM writeback_applied_docs WHERE collection = $1", tbl)
		}
		db.Close()
	})
	cfg, err := config.Parse("test", []byte(fmt.Sprintf(`listen: 127.0.0.1:0
listenResp: 127.0.0.1:0
redis: {addrs: [%q], keyPrefix: %q}
stores:
  pg: {driver: postgres, dsn: %q}
collections:
  %s: {store: pg, key: id}
  %s_nn: {store: pg, key: id}
writeback: {partitions: 8, pollInterval: 10ms}
`, redisAddr, prefix, dsn, w.table, w.table)))
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	w.reg = prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := server.New(context.Background(), cfg, w.reg, log)
	if err != nil {
		t.Fatal(err)
	}
	w.addr = srv.RespAddr()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	w.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	}
	return w
}

// shutdown stops the sidecar gracefully, once.
func (w *world) shutdown() {
	w.stopMu.Lock()
	defer w.stopMu.Unlock()
	if w.stop != nil {
		w.stop()
		w.stop = nil
	}
}

func (w *world) client(t testing.TB, proto int) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: w.addr, Protocol: proto, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// key names document id of the test collection.
func (w *world) key(id int) string { return fmt.Sprintf("%s/%d", w.table, id) }

// rawConn is a client speaking raw bytes.
type rawConn struct {
	t  testing.TB
	nc net.Conn
	rd *bufio.Reader
}

func (w *world) raw(t testing.TB) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", w.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, rd: bufio.NewReader(nc)}
}

func (c *rawConn) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.nc, s); err != nil {
		c.t.Fatal(err)
	}
}

// expect reads exactly len(want) bytes and compares them.
func (c *rawConn) expect(want string) {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c.rd, got); err != nil {
		c.t.Fatalf("reading %q: got %q, %v", want, got, err)
	}
	if string(got) != want {
		c.t.Fatalf("got %q; want %q", got, want)
	}
}

// expectClosed checks that the server closes the connection.
func (c *rawConn) expectClosed() {
	c.t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := c.rd.ReadByte()
	if err != io.EOF {
		c.t.Fatalf("read %q, %v; want the connection closed", b, err)
	}
}

// frontDoorGoroutines counts the goroutines running the front door's code
// (connection handlers and what they start): the others come and go on
// their own — the appliers' database pool grows a connection, with its
// reader goroutine, whenever they need one.
func frontDoorGoroutines() (int, []byte) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("writeback/internal/resp.")) || bytes.Contains(g, []byte("tidwall/redcon")) {
			count++
		}
	}
	return count, buf
}

// settle waits up to within until the front door runs at most base
// goroutines again (see frontDoorGoroutines).
func settle(t testing.TB, base int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		n, stacks := frontDoorGoroutines()
		if n <= base {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the front door runs %d goroutines, %d before:\n%s", n, base, stacks)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func metric(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}
