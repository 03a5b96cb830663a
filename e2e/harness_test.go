// Package e2e runs real sidecar processes (the writeback binary built from
// this tree) against real Redis, PostgreSQL and MariaDB, and checks the
// invariants of DESIGN.md from the outside: nothing acknowledged is lost,
// every change is applied exactly once and in order, reads see the latest
// acknowledged write. Start the services with `make services`.
package e2e

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/testenv"
	"github.com/writeback/writeback/pkg/client"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "writeback-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "writeback")
	cmd := exec.Command("go", "build", "-race", "-o", binary, "../cmd/writeback")
	if os.Getenv("WRITEBACK_E2E_NORACE") != "" {
		cmd = exec.Command("go", "build", "-o", binary, "../cmd/writeback")
	}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building the writeback binary:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// env is one test's world: a key prefix in Redis and a table per database.
type env struct {
	t      *testing.T
	prefix string
	table  string
	redis  *redis.Client
	dbs    map[string]*sql.DB // "pg", "maria"
	dsns   map[string]string
}

// newEnv creates a table `<table>(id bigint primary key, n bigint, s text, j json)`
// in PostgreSQL and MariaDB with rows 1..docs (n = 0), and a Redis prefix.
func newEnv(t *testing.T, docs int) *env {
	t.Helper()
	e := &env{t: t, prefix: testenv.UniqueName(t, "e2e"), table: testenv.UniqueName(t, "t"), dbs: map[string]*sql.DB{}, dsns: map[string]string{}}
	e.redis = redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { e.cleanRedis(); e.redis.Close() })
	e.dsns["pg"] = testenv.PostgresDSN(t)
	e.dsns["maria"] = testenv.MySQLDSN(t)
	for name, driver := range map[string]string{"pg": "pgx", "maria": "mysql"} {
		db, err := sql.Open(driver, e.dsns[name])
		if err != nil {
			t.Fatal(err)
		}
		textType := "text"
		if name == "maria" {
			textType = "varchar(255)"
		}
		jsonType := map[string]string{"pg": "jsonb", "maria": "JSON"}[name]
		e.exec(db, fmt.Sprintf("CREATE TABLE %s (id bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0, s %s, j %s)", e.table, textType, jsonType))
		for lo := 1; lo <= docs; lo += 500 {
			var vals []string
			for i := lo; i < lo+500 && i <= docs; i++ {
				vals = append(vals, fmt.Sprintf("(%d, 0, 'init')", i))
			}
			e.exec(db, fmt.Sprintf("INSERT INTO %s (id, n, s) VALUES %s", e.table, strings.Join(vals, ",")))
		}
		e.dbs[name] = db
		t.Cleanup(func() {
			_, _ = db.Exec("DROP TABLE IF EXISTS " + e.table)
			_, _ = db.Exec("DELETE FROM writeback_applied_docs WHERE collection IN ('pg_" + e.table + "', 'maria_" + e.table + "')")
			db.Close()
		})
	}
	return e
}

func (e *env) exec(db *sql.DB, q string) {
	e.t.Helper()
	if _, err := db.Exec(q); err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
}

func (e *env) cleanRedis() {
	ctx := context.Background()
	iter := e.redis.Scan(ctx, 0, e.prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		e.redis.Del(ctx, iter.Val())
	}
}

// redisKeys counts this test's keys in Redis that hold documents or their
// buffered state — not the partition ownership leases and the sidecar
// registry, which the appliers maintain on their own schedule.
func (e *env) redisKeys() int {
	ctx := context.Background()
	n := 0
	iter := e.redis.Scan(ctx, 0, e.prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		if k := iter.Val(); !strings.HasSuffix(k, ":owner") && !strings.HasSuffix(k, ":sidecars") {
			n++
		}
	}
	return n
}

// coll names the collection of this env's table in a database.
func (e *env) coll(db string) string { return db + "_" + e.table }

// config writes a sidecar config for both collections with the given policy.
// The Redis-protocol front door is off unless extra sets listenResp (its
// default port would clash between the sidecars of one test).
func (e *env) config(listen, policy string, extra string) string {
	e.t.Helper()
	if !strings.Contains(extra, "listenResp:") {
		extra = "listenResp: \"\"\n" + extra
	}
	cfg := fmt.Sprintf(`listen: %s
redis:
  addrs: [%s]
  keyPrefix: %s
stores:
  pg: {driver: postgres, dsn: %q}
  maria: {driver: mysql, dsn: %q}
collections:
  %s: {store: pg, table: %s, key: id, policy: %s}
  %s: {store: maria, table: %s, key: id, policy: %s}
writeback:
  partitions: 16
  workers: 4
  batchSize: 64
  ownerLease: 1500ms
  pollInterval: 10ms
log: {level: warn}
%s`, listen, testenv.RedisAddr(e.t), e.prefix, e.dsns["pg"], e.dsns["maria"], e.coll("pg"), e.table, policy, e.coll("maria"), e.table, policy, extra)
	p := filepath.Join(e.t.TempDir(), "writeback.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// sidecar is a running `writeback serve` process.
type sidecar struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string
	c      *client.Client
	done   chan struct{}
	mu     sync.Mutex // guards output
	output strings.Builder
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// start runs a sidecar with config file cfg listening on addr and waits
// until it answers /readyz. envs are extra environment variables.
func start(t *testing.T, cfg, addr string, envs ...string) *sidecar {
	t.Helper()
	return launch(t, cfg, addr, false, envs...)
}

// startArmed is start for a sidecar armed with fault points: it may die
// before it is ready, which is not an error.
func startArmed(t *testing.T, cfg, addr string, envs ...string) *sidecar {
	t.Helper()
	return launch(t, cfg, addr, true, envs...)
}

func launch(t *testing.T, cfg, addr string, mayDie bool, envs ...string) *sidecar {
	t.Helper()
	return launchCmd(t, addr, mayDie, []string{binary, "serve", "--config", cfg}, envs...)
}

// launchCmd runs the program args (a sidecar, or an embedded member, which
// answers the same client) serving addr and waits until it answers
// /readyz; mayDie as in startArmed.
func launchCmd(t *testing.T, addr string, mayDie bool, args []string, envs ...string) *sidecar {
	t.Helper()
	s := &sidecar{t: t, addr: addr, done: make(chan struct{})}
	s.cmd = exec.Command(args[0], args[1:]...)
	s.cmd.Env = append(os.Environ(), envs...)
	out, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stdout = s.cmd.Stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			s.mu.Lock()
			s.output.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
		}
		_ = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() { s.kill() })
	s.c = client.New("http://"+addr, client.WithHTTPClient(&http.Client{Timeout: 30 * time.Second}))
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := s.c.Readyz(ctx)
		cancel()
		if err == nil {
			return s
		}
		select {
		case <-s.done:
			if mayDie {
				return s
			}
			t.Fatalf("%s exited during start-up:\n%s", args[0], s.out())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 30s: %v\n%s", args[0], err, s.out())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *sidecar) out() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.output.String()
}

// kill sends SIGKILL and waits for the process to be gone.
func (s *sidecar) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// stop sends SIGTERM and waits for a graceful exit.
func (s *sidecar) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(20 * time.Second):
		s.t.Errorf("sidecar did not stop within 20s of SIGTERM:\n%s", s.out())
		s.kill()
	}
}

// exited reports whether the process is gone.
func (s *sidecar) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// flush drains everything pending.
func (s *sidecar) flush(t *testing.T) client.FlushResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := s.c.Flush(ctx, 90*time.Second)
	if err != nil {
		t.Fatalf("flush: %v\n%s", err, s.out())
	}
	if !res.Drained {
		t.Fatalf("flush did not drain: %+v", res)
	}
	return res
}

// rows reads id -> (n, s) from one database.
func (e *env) rows(db string) map[int64]row {
	e.t.Helper()
	rs, err := e.dbs[db].Query(fmt.Sprintf("SELECT id, n, s FROM %s", e.table))
	if err != nil {
		e.t.Fatal(err)
	}
	defer rs.Close()
	out := map[int64]row{}
	for rs.Next() {
		var r row
		var id int64
		if err := rs.Scan(&id, &r.N, &r.S); err != nil {
			e.t.Fatal(err)
		}
		out[id] = r
	}
	return out
}

type row struct {
	N int64
	S sql.NullString
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// evict deletes a document's cache entry behind the sidecar's back, as
// Redis eviction would.
func evict(e *env, coll, id string) error {
	return buffer.New(e.redis, e.prefix, 16, time.Second).Evict(context.Background(), coll, id)
}

// crashing is the sidecar of a crash test: killed and restarted (possibly
// armed with a fault point) while clients use whichever instance is
// current.
type crashing struct {
	t *testing.T
	// run starts an instance armed with envs; mayDie as in startArmed.
	run func(mayDie bool, envs ...string) *sidecar
	// drain is where crashWorkload flushes at the end: nil, the final
	// instance itself.
	drain *sidecar
	mu    sync.Mutex // guards sc
	sc    *sidecar
}

func newCrashing(t *testing.T, cfg, addr string) *crashing {
	t.Helper()
	return newCrashingWith(t, func(mayDie bool, envs ...string) *sidecar {
		return launch(t, cfg, addr, mayDie, envs...)
	})
}

// newCrashingWith is newCrashing for a process that run starts.
func newCrashingWith(t *testing.T, run func(mayDie bool, envs ...string) *sidecar) *crashing {
	t.Helper()
	return &crashing{t: t, run: run, sc: run(false)}
}

func (c *crashing) current() *sidecar {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sc
}

// restart SIGKILLs the current sidecar and starts one armed with fault
// ("" for none, else WRITEBACK_FAULTS syntax). selfKilled reports that the
// old one had already died at its armed fault point.
func (c *crashing) restart(fault string) (selfKilled bool) {
	c.t.Helper()
	old := c.current()
	if selfKilled = old.exited(); !selfKilled {
		old.kill()
	}
	var envs []string
	if fault != "" {
		envs = append(envs, "WRITEBACK_FAULTS="+fault)
	}
	next := c.run(true, envs...)
	c.mu.Lock()
	c.sc = next
	c.mu.Unlock()
	return selfKilled
}

// final kills the last sidecar and starts an unarmed one.
func (c *crashing) final() *sidecar {
	c.t.Helper()
	if last := c.current(); !last.exited() {
		last.kill()
	}
	return c.run(false)
}

// pause SIGSTOPs the process and returns once every one of its threads is
// stopped, and how long that took. kill(2) only starts a stop: the group
// stop begins when one thread of the process handles the signal, and until
// then, on a loaded machine, its other threads run on — long enough, seen
// under CI load, for a paused holder to answer a revocation sent after the
// SIGSTOP.
func (s *sidecar) pause() time.Duration {
	s.t.Helper()
	sent := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatal(err)
	}
	dir := fmt.Sprintf("/proc/%d/task", s.cmd.Process.Pid)
	for deadline := sent.Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		running, err := threadsRunning(dir)
		if err != nil {
			s.t.Fatalf("pause: %v", err)
		}
		if running == 0 {
			return time.Since(sent)
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("pause: %d threads of %s not stopped 30 s after SIGSTOP", running, s.addr)
		}
	}
}

// threadsRunning counts the threads in dir (/proc/<pid>/task) that are not
// stopped (state T).
func threadsRunning(dir string) (int, error) {
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			n++ // a thread that just exited, or unreadable: look again
			continue
		}
		// "tid (comm) S …": comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) {
			return 0, fmt.Errorf("%s/%s/stat: %q", dir, task.Name(), b)
		}
		if b[i+2] != 'T' {
			n++
		}
	}
	return n, nil
}

// resume SIGCONTs a paused process.
func (s *sidecar) resume() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		s.t.Fatal(err)
	}
}
