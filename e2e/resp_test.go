package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/testenv"
)

// The Redis-protocol front door, end to end: replies compared with a real
// redis-server's for the same commands, and the core's concurrency and
// crash tests driven through RESP (HINCRBY, HSET) instead of HTTP.

// respClient returns a go-redis client of a sidecar's front door that never
// retries (a retried HINCRBY could apply twice, which the tests would
// blame on the sidecar).
func respClient(t *testing.T, addr string, proto int) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto, MaxRetries: -1, ReadTimeout: 30 * time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// diffConfig writes a sidecar config serving the env's two collections
// and a differential-test collection <table>_dt over table <table>_dt(id
// text primary key, a text, b text, n bigint, f double precision), whose
// columns are all nullable: a hash of it behaves as a plain Redis hash of
// fields a, b, n, f.
func diffConfig(e *env, listen, listenResp string) (string, string) {
	e.t.Helper()
	dt := e.table + "_dt"
	db := e.dbs["pg"]
	e.exec(db, fmt.Sprintf("CREATE TABLE %s (id text PRIMARY KEY, a text, b text, n bigint, f double precision)", dt))
	e.t.Cleanup(func() {
		_, _ = db.Exec("DROP TABLE IF EXISTS " + dt)
		_, _ = db.Exec("DELETE FROM writeback_applied_docs WHERE collection = $1", dt)
	})
	cfg := fmt.Sprintf(`listen: %s
listenResp: %s
redis:
  addrs: [%s]
  keyPrefix: %s
stores:
  pg: {driver: postgres, dsn: %q}
collections:
  %s: {store: pg, table: %s, key: id}
writeback: {partitions: 16, pollInterval: 10ms}
log: {level: warn}
`, listen, listenResp, testenv.RedisAddr(e.t), e.prefix, e.dsns["pg"], dt, dt)
	p := filepath.Join(e.t.TempDir(), "writeback.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return p, dt
}

// diffScript is the differential test's command sequence, one command per
// line, "{c}" standing for the collection. It sticks to plain data, where
// a document and a Redis hash behave alike: fields are set in column order
// (a, b, n, f), so that HGETALL lists them in the same order as a Redis
// hash does (insertion order); no hash loses its last field; floats are
// exactly representable (HINCRBYFLOAT formats others differently from
// Redis: see docs/api.md).
const diffScript = `PING
PING hello
ECHO "two words"
HSET {c}/k1 a x
HSET {c}/k1 a y b z
HSET {c}/k1 a y b z
HGET {c}/k1 a
HGET {c}/k1 n
HGET {c}/k1 nosuch
HGET {c}/nosuch a
HMGET {c}/k1 a nosuch b
HMGET {c}/nosuch a b
HGETALL {c}/k1
HGETALL {c}/nosuch
HLEN {c}/k1
HLEN {c}/nosuch
HEXISTS {c}/k1 a
HEXISTS {c}/k1 n
HEXISTS {c}/k1 nosuch
HINCRBY {c}/k1 n 5
HINCRBY {c}/k1 n -7
HINCRBY {c}/k2 n 3
HGETALL {c}/k2
HINCRBY {c}/k1 n x
HINCRBY {c}/k1 n 1.5
HINCRBY {c}/k1 a 1
HINCRBYFLOAT {c}/k1 a 1
HINCRBYFLOAT {c}/k1 f 10.5
HINCRBYFLOAT {c}/k1 f 0.25
HINCRBYFLOAT {c}/k1 f -20
HINCRBYFLOAT {c}/k1 f abc
HGETALL {c}/k1
HDEL {c}/k1 b nosuch
HDEL {c}/k1 b
HDEL {c}/nosuch a
HGETALL {c}/k1
EXISTS {c}/k1 {c}/k2 {c}/k3 {c}/k1
HMSET {c}/k3 a 1 b 2
HSET {c}/k3 b 3
HSET {c}/k3 a 1 b 2 n 4
HGETALL {c}/k3
DEL {c}/k3 {c}/k4
DEL {c}/k3
HGETALL {c}/k3
EXISTS {c}/k3
HSET {c}/k1
HSET {c}/k1 a
HSET {c}/k1 a 1 b
HMSET {c}/k1 a
HGET {c}/k1
HMGET {c}/k1
HGETALL
HLEN {c}/k1 x
HEXISTS {c}/k1
HDEL {c}/k1
HINCRBY {c}/k1 n
HINCRBYFLOAT {c}/k1
DEL
EXISTS
FOO bar baz
NOSUCHCOMMAND
SELECT 0
SELECT x
SELECT 1x
PING a b
ECHO
HELLO 4
HELLO x
AUTH x
CLIENT SETNAME "a b"
CLIENT SETNAME me
CLIENT GETNAME
CLIENT NOSUCH
DEL {c}/k1 {c}/k2
EXISTS {c}/k1 {c}/k2`

// TestRESPDifferential sends the same commands to a sidecar's front door
// and to the real Redis, in four ways — raw pipelined RESP2 and RESP3
// (byte for byte), redis-cli in both protocols (as it prints them), and
// go-redis v9 in both protocols (as it decodes them) — and requires the
// same replies.
func TestRESPDifferential(t *testing.T) {
	e := newEnv(t, 1)
	addr, raddr := freeAddr(t), freeAddr(t)
	cfg, coll := diffConfig(e, addr, raddr)
	start(t, cfg, addr)
	redisAddr := testenv.RedisAddr(t)
	lines := strings.Split(strings.ReplaceAll(diffScript, "{c}", coll), "\n")
	// The real Redis gets the same key names; make sure they are fresh.
	real := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer real.Close()
	clean := func() {
		keys, _ := real.Keys(context.Background(), coll+"/*").Result()
		if len(keys) > 0 {
			real.Del(context.Background(), keys...)
		}
	}
	clean()
	t.Cleanup(clean)

	t.Run("raw", func(t *testing.T) {
		for _, proto := range []int{2, 3} {
			var in bytes.Buffer
			if proto == 3 {
				in.WriteString(encode("HELLO", "3"))
			}
			in.WriteString(encode("ECHO", "start"))
			for _, l := range lines {
				in.WriteString(encode(splitArgs(t, l)...))
			}
			in.WriteString(encode("RESET"))
			in.WriteString(encode("QUIT"))
			want := rawExchange(t, redisAddr, in.Bytes())
			got := rawExchange(t, raddr, in.Bytes())
			// What follows HELLO's reply (server version and connection
			// id differ) must be identical.
			_, want, _ = bytes.Cut(want, []byte("$5\r\nstart\r\n"))
			_, got, _ = bytes.Cut(got, []byte("$5\r\nstart\r\n"))
			if !bytes.Equal(got, want) {
				t.Errorf("RESP%d replies differ from Redis's:\n%s", proto, firstDiff(got, want))
			}
			clean()
		}
	})
	t.Run("redis-cli", func(t *testing.T) {
		for _, proto := range []string{"-2", "-3"} {
			script := strings.Join(lines, "\n") + "\n"
			run := func(addr string) string {
				host, port, _ := net.SplitHostPort(addr)
				cmd := exec.Command("redis-cli", "-h", host, "-p", port, proto, "--no-raw")
				cmd.Stdin = strings.NewReader(script)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("redis-cli (install it with make services): %v\n%s", err, out)
				}
				return string(out)
			}
			want := run(redisAddr)
			clean()
			got := run(raddr)
			clean()
			if got != want {
				t.Errorf("redis-cli %s prints differently:\n%s", proto, firstDiff([]byte(got), []byte(want)))
			}
		}
	})
	t.Run("go-redis", func(t *testing.T) {
		for _, proto := range []int{2, 3} {
			run := func(addr string) []string {
				c := respClient(t, addr, proto)
				var out []string
				for _, l := range lines {
					args := splitArgs(t, l)
					anys := make([]any, len(args))
					for i, a := range args {
						anys[i] = a
					}
					v, err := c.Do(context.Background(), anys...).Result()
					out = append(out, fmt.Sprintf("%s → %#v %v", l, v, err))
				}
				return out
			}
			want := run(redisAddr)
			clean()
			got := run(raddr)
			clean()
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("RESP%d, go-redis:\n got %s\nwant %s", proto, got[i], want[i])
				}
			}
		}
	})
	t.Run("commands for tools", func(t *testing.T) {
		// What differs from Redis by design, checked for its shape.
		c := respClient(t, raddr, 3)
		ctx := context.Background()
		docs, err := c.Do(ctx, "COMMAND", "DOCS").Result()
		m, _ := docs.(map[any]any)
		if err != nil || len(m) != 22 {
			t.Fatalf("COMMAND DOCS: %d commands, %v", len(m), err)
		}
		info, err := c.Info(ctx).Result()
		if err != nil || !strings.Contains(info, "redis_version:") || !strings.Contains(info, "pending_changes:") {
			t.Fatalf("INFO: %q %v", info, err)
		}
		host, port, _ := net.SplitHostPort(raddr)
		out, err := exec.Command("redis-cli", "-h", host, "-p", port, "--no-raw", "COMMAND", "INFO", "hset").CombinedOutput()
		if err != nil || !strings.Contains(string(out), `"hset"`) || !strings.Contains(string(out), "(integer) -4") {
			t.Fatalf("redis-cli COMMAND INFO hset: %v\n%s", err, out)
		}
	})
}

// encode is a command in RESP.
func encode(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// splitArgs splits a script line as redis-cli does: on spaces, with
// double quotes around an argument with spaces.
func splitArgs(t *testing.T, line string) []string {
	t.Helper()
	var args []string
	for line != "" {
		line = strings.TrimLeft(line, " ")
		if strings.HasPrefix(line, `"`) {
			end := strings.IndexByte(line[1:], '"')
			if end < 0 {
				t.Fatalf("unbalanced quotes: %s", line)
			}
			args = append(args, line[1:1+end])
			line = line[2+end:]
			continue
		}
		a, rest, _ := strings.Cut(line, " ")
		if a != "" {
			args = append(args, a)
		}
		line = rest
	}
	return args
}

// rawExchange sends in, half-closes, and returns everything the server
// sends until it closes the connection (QUIT ends in).
func rawExchange(t *testing.T, addr string, in []byte) []byte {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := nc.Write(in); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(nc)
	if err != nil {
		t.Fatalf("%s: %v after %q", addr, err, out)
	}
	return out
}

// firstDiff shows where got and want part.
func firstDiff(got, want []byte) string {
	gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(gl) || i < len(wl); i++ {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			lo := max(0, i-3)
			return fmt.Sprintf("line %d:\n got %q\nwant %q\ncontext (want): %q", i+1, g, w, wl[lo:min(len(wl), i+1)])
		}
	}
	return "(equal)"
}

// Acceptance 2 through RESP: 16 concurrent go-redis clients (RESP2 and
// RESP3) issue 200 pipelined HINCRBY each on 20 documents of both
// databases while appliers run; after flush every row equals the model,
// and the values HINCRBY answered for a document are all distinct: each
// increment was applied once, and its reply is the value right after it.
func TestRESPConcurrentIncrementsExactlyOnce(t *testing.T) {
	e := newEnv(t, 20)
	addr, raddr := freeAddr(t), freeAddr(t)
	sc := start(t, e.config(addr, "write-back", "listenResp: "+raddr+"\n"), addr)
	const clients, perClient, docs, depth = 16, 200, 20, 10
	want := map[string]map[int64]int64{"pg": {}, "maria": {}}
	replies := map[string]map[int64][]int64{"pg": {}, "maria": {}}
	var mu sync.Mutex // guards want, replies
	var wg sync.WaitGroup
	errc := make(chan error, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc := respClient(t, raddr, 2+c%2)
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for range perClient / depth {
				type inc struct {
					db  string
					id  int64
					amt int64
					cmd *redis.IntCmd
				}
				var incs []inc
				pipe := rc.Pipeline()
				for range depth {
					db := []string{"pg", "maria"}[rng.IntN(2)]
					id := int64(rng.IntN(docs) + 1)
					amt := int64(rng.IntN(9) + 1)
					incs = append(incs, inc{db, id, amt, pipe.HIncrBy(context.Background(), fmt.Sprintf("%s/%d", e.coll(db), id), "n", amt)})
				}
				if _, err := pipe.Exec(context.Background()); err != nil {
					errc <- err
					return
				}
				mu.Lock()
				for _, in := range incs {
					want[in.db][in.id] += in.amt
					replies[in.db][in.id] = append(replies[in.db][in.id], in.cmd.Val())
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("HINCRBY failed: %v", err)
	}
	sc.flush(t)
	for _, db := range []string{"pg", "maria"} {
		got := e.rows(db)
		for id := int64(1); id <= docs; id++ {
			if got[id].N != want[db][id] {
				t.Errorf("%s row %d: n = %d, want %d", db, id, got[id].N, want[db][id])
			}
			rs := slices.Sorted(slices.Values(replies[db][id]))
			distinct := len(slices.Compact(slices.Clone(rs))) == len(rs)
			if len(rs) > 0 && (!distinct || rs[len(rs)-1] != want[db][id]) {
				t.Errorf("%s row %d: HINCRBY answered %v; want distinct values, the last %d", db, id, rs, want[db][id])
			}
		}
	}
	st, err := sc.c.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 0 || st.PinnedBytes != 0 || st.PendingDocuments != 0 {
		t.Errorf("after flush: pending %d, documents %d, pinned bytes %d; want all 0", st.Pending, st.PendingDocuments, st.PinnedBytes)
	}
	// The front door's commands are counted like the API's requests.
	if n := metricLine(t, addr, `writeback_requests_total{code="200",op="hincrby"}`); n != clients*perClient {
		t.Errorf(`requests_total{op="hincrby",code="200"} = %v; want %d`, n, clients*perClient)
	}
}

// metricLine reads one sample of /metrics by its exact name and labels.
func metricLine(t *testing.T, addr, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	return 0
}

// Acceptance 2 through RESP: TestCrashRecovery's workload — HINCRBY with
// random large amounts and HSET of s — over the front door, with the
// sidecar SIGKILLed 22 times (some at armed fault points) and restarted on
// the same ports; after a final flush both databases equal the model of
// acknowledged writes, and the front door serves the same values.
func TestRESPCrashRecovery(t *testing.T) {
	const docs = 12
	e := newEnv(t, docs)
	addr, raddr := freeAddr(t), freeAddr(t)
	cfg := e.config(addr, "write-back", "listenResp: "+raddr+"\n")
	models, _ := crashWorkload(t, e, newCrashing(t, cfg, addr), docs, 8, 22,
		func(c int, _ func() *sidecar) crashOps { return respOps{respClient(t, raddr, 2+c%2)} })
	rc := respClient(t, raddr, 3)
	for _, db := range []string{"pg", "maria"} {
		got := e.rows(db)
		for id, m := range models[db] {
			r := got[int64(id+1)]
			if err := m.check(r.N, r.S.String); err != nil {
				t.Errorf("%s row %d: %v", db, id+1, err)
			}
			h, err := rc.HGetAll(context.Background(), fmt.Sprintf("%s/%d", e.coll(db), id+1)).Result()
			if err != nil {
				t.Fatal(err)
			}
			if want := map[string]string{"n": strconv.FormatInt(r.N, 10), "s": r.S.String}; !reflect.DeepEqual(h, want) {
				t.Errorf("%s row %d: the front door reads %v, the database has %v", db, id+1, h, want)
			}
		}
	}
}

// respOps writes over the front door: HINCRBY and HSET.
type respOps struct{ rc *redis.Client }

func (o respOps) inc(ctx context.Context, coll string, id int, amt int64) error {
	return o.rc.HIncrBy(ctx, fmt.Sprintf("%s/%d", coll, id), "n", amt).Err()
}

func (o respOps) set(ctx context.Context, coll string, id int, val string) error {
	return o.rc.HSet(ctx, fmt.Sprintf("%s/%d", coll, id), "s", val).Err()
}

// Durability acceptance 3 through RESP: TestPinnedMemoryFallback's
// workload — HINCRBY with the store stopped and an 8 KiB pinned-memory
// limit — over the front door. Once write-back collections fall back to
// write-through, a field write first applies the document's pending
// changes, as an HTTP write does, so with the store down it is refused
// without buffering anything (pinned memory stops growing), alone or in a
// pipeline; when the store returns everything drains and the database
// equals the model.
func TestRESPPinnedMemoryFallback(t *testing.T) {
	const docs = 10
	e := newEnv(t, docs)
	px := e.proxyStore("pg")
	addr, raddr := freeAddr(t), freeAddr(t)
	path := e.config(addr, "write-back", "listenResp: "+raddr+"\n")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), "  pollInterval: 10ms\n", "  pollInterval: 10ms\n  pinnedMemoryLimit: 8KiB\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	sc := start(t, path, addr)
	rc := respClient(t, raddr, 3)
	ctx := context.Background()
	coll := e.coll("pg")
	key := func(id int) string { return fmt.Sprintf("%s/%d", coll, id) }
	for id := 1; id <= docs; id++ {
		if err := rc.HGetAll(ctx, key(id)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	models := make([]docModel, docs+1)
	for id := range models {
		models[id].sets = []setOp{{val: "init", acked: true}}
	}
	px.cut()
	// Buffer until the limit trips: the first refused write.
	var i int
	for i = 0; i < 20000; i++ {
		id, amt := i%docs+1, int64(1000+i)
		if err := rc.HIncrBy(ctx, key(id), "n", amt).Err(); err != nil {
			if !strings.Contains(err.Error(), "store is unavailable") {
				t.Fatalf("write %d: %v; want the store's unavailability once over the limit", i, err)
			}
			models[id].uncertain = append(models[id].uncertain, amt)
			break
		}
		models[id].acked += amt
	}
	if i == 20000 {
		t.Fatal("20000 writes buffered with the store down and an 8 KiB limit: no fallback")
	}
	st, err := sc.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Collections[0].WriteThroughFallback {
		t.Fatalf("over the limit but status does not show the fallback: %+v", st.Collections)
	}
	pinned := st.PinnedBytes
	for k := range 10 {
		id, amt := k%docs+1, int64(500000+k)
		models[id].uncertain = append(models[id].uncertain, amt)
		if err := rc.HIncrBy(ctx, key(id), "n", amt).Err(); err == nil || !strings.Contains(err.Error(), "store is unavailable") {
			t.Fatalf("a write in fallback with the store down: %v; want the store's unavailability", err)
		}
	}
	pipe := rc.Pipeline()
	var cmds []*redis.IntCmd
	for k := range 2 * docs {
		id, amt := k%docs+1, int64(700000+k)
		models[id].uncertain = append(models[id].uncertain, amt)
		cmds = append(cmds, pipe.HIncrBy(ctx, key(id), "n", amt))
	}
	_, _ = pipe.Exec(ctx)
	for k, c := range cmds {
		if err := c.Err(); err == nil || !strings.Contains(err.Error(), "store is unavailable") {
			t.Fatalf("pipelined write %d in fallback with the store down: %v; want the store's unavailability", k, err)
		}
	}
	if st, _ := sc.c.Status(ctx); st.PinnedBytes != pinned {
		t.Errorf("pinned bytes grew from %d to %d while writes were refused", pinned, st.PinnedBytes)
	}
	t.Logf("fallback after %d buffered writes, %d bytes pinned (limit 8 KiB)", i, pinned)
	px.restore(t)
	waitFor(t, 30*time.Second, "the buffer to drain and write-back to resume", func() bool {
		st, err := sc.c.Status(ctx)
		return err == nil && st.Pending == 0 && !st.Collections[0].WriteThroughFallback
	})
	if err := rc.HIncrBy(ctx, key(1), "n", 7).Err(); err != nil {
		t.Fatalf("a write after recovery: %v", err)
	}
	models[1].acked += 7
	sc.flush(t)
	rows := e.rows("pg")
	for id := 1; id <= docs; id++ {
		if err := models[id].check(rows[int64(id)].N, "init"); err != nil {
			t.Errorf("row %d: %v", id, err)
		}
	}
}
