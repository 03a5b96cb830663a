package writeback_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
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
	"github.com/writeback/writeback/pkg/writeback"
)

// fixture is a PostgreSQL table of (id, n, s) with row 1 = (1, 1, "one")
// and a Redis key prefix of its own, both removed at the end.
type fixture struct {
	table, prefix, dsn string
	rdb                *redis.Client
	pg                 *sql.DB
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{table: testenv.UniqueName(t, "emb"), prefix: testenv.UniqueName(t, "embwb"), dsn: testenv.PostgresDSN(t)}
	f.rdb = redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	var err error
	if f.pg, err = sql.Open("pgx", f.dsn); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pg.Exec(fmt.Sprintf("CREATE TABLE %s (id bigint PRIMARY KEY, n bigint, s text); INSERT INTO %s VALUES (1, 1, 'one')", f.table, f.table)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if keys, _ := f.rdb.Keys(ctx, f.prefix+":*").Result(); len(keys) > 0 {
			f.rdb.Del(ctx, keys...)
		}
		f.rdb.Close()
		_, _ = f.pg.Exec("DROP TABLE IF EXISTS " + f.table)
		_, _ = f.pg.Exec("DELETE FROM writeback_applied_docs WHERE collection = $1", f.table)
		f.pg.Close()
	})
	return f
}

// yaml is the configuration every member of a test shares: the near cache
// on with a lease of lease, the appliers polling every 20ms.
func (f *fixture) yaml(t *testing.T, lease time.Duration) []byte {
	return fmt.Appendf(nil, `listen: 127.0.0.1:0
redis: {addrs: [%q], keyPrefix: %q}
stores: {pg: {driver: postgres, dsn: %q, maxConns: 4}}
collections:
  %s: {store: pg, key: id, nearCache: {maxBytes: 1MiB, leaseTTL: %s, hotWindow: 0s}}
writeback: {partitions: 4, workers: 1, pollInterval: 20ms, ownerLease: 3s, nearCache: on}
`, testenv.RedisAddr(t), f.prefix, f.dsn, f.table, lease)
}

func quiet() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// open opens an embedded member that the test closes at its end.
func (f *fixture) open(t *testing.T, lease time.Duration, appliers bool, reg *prometheus.Registry) *writeback.DB {
	t.Helper()
	db, err := writeback.Open(context.Background(), writeback.Options{Config: f.yaml(t, lease), Appliers: appliers, Registry: reg, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// sidecar runs a sidecar on the same configuration (appliers running) and
// returns a client of its HTTP API.
func (f *fixture) sidecar(t *testing.T, lease time.Duration) *client.Client {
	t.Helper()
	return runSidecar(t, f.yaml(t, lease))
}

// runSidecar runs a sidecar on the YAML configuration y, with an instance
// id of its own, until the test ends, and returns a client of its HTTP API.
func runSidecar(t *testing.T, y []byte) *client.Client {
	t.Helper()
	cfg, err := config.Parse("test", y)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Writeback.InstanceID = testenv.UniqueName(t, "sidecar")
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(context.Background(), cfg, prometheus.NewRegistry(), quiet())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sidecar Run: %v", err)
		}
	})
	return client.New(srv.Addr())
}

// doc is a document of the fixture's table.
type doc struct {
	ID int64  `json:"id"`
	N  int64  `json:"n"`
	S  string `json:"s"`
}

func get(t *testing.T, d writeback.Documents, id string) doc {
	t.Helper()
	raw, _, err := d.Get(context.Background(), tableOf(d), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	var out doc
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("get %s: %s: %v", id, raw, err)
	}
	return out
}

// tables maps each Documents of a test to its collection (one per test).
var tables = map[writeback.Documents]string{}

func tableOf(d writeback.Documents) string { return tables[d] }

func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if c := m.GetCounter(); c != nil {
				sum += c.GetValue()
			}
		}
	}
	return sum
}

// A write through either member is the other's next read, although both
// hold the document in their near caches: the writer revokes the other's
// lease first.
func TestEmbeddedAndSidecarReadEachOthersWrites(t *testing.T) {
	f := newFixture(t)
	reg := prometheus.NewRegistry()
	db := f.open(t, 5*time.Second, false, reg)
	hc := f.sidecar(t, 5*time.Second)
	tables[db], tables[hc] = f.table, f.table
	ctx := context.Background()

	if got := get(t, db, "1"); got != (doc{1, 1, "one"}) {
		t.Fatalf("embedded read of the store's row: %+v", got)
	}
	members := []struct {
		name string
		d    writeback.Documents
	}{{"embedded", db}, {"sidecar", hc}}
	for i := range 20 {
		w, r := members[i%2], members[(i+1)%2]
		// Both read first: both hold a lease and a copy.
		before := get(t, r.d, "1")
		get(t, w.d, "1")
		get(t, r.d, "1") // a near-cache hit
		v := fmt.Sprintf("v%d", i)
		start := time.Now()
		if _, err := w.d.Patch(ctx, f.table, "1", map[string]any{"$set": map[string]any{"s": v}, "$inc": map[string]any{"n": 1}}); err != nil {
			t.Fatalf("%s patch: %v", w.name, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s's write waited %s: the other member did not answer its revocation (lease 5s)", w.name, d)
		}
		if got := get(t, r.d, "1"); got.S != v || got.N != before.N+1 {
			t.Fatalf("%s read %+v after %s wrote s=%s, n=%d", r.name, got, w.name, v, before.N+1)
		}
	}
	if h := metric(t, reg, "writeback_nearcache_hits_total"); h < 10 {
		t.Errorf("the embedded member served %v reads from its near cache, want at least 10", h)
	}
	if r := metric(t, reg, "writeback_nearcache_revocations_received_total"); r < 5 {
		t.Errorf("the embedded member received %v revocations, want at least 5", r)
	}

	// Put, GetMany, Scan, Delete across members.
	if _, err := db.Put(ctx, f.table, "2", json.RawMessage(`{"id":2,"n":20,"s":"two"}`)); err != nil {
		t.Fatal(err)
	}
	docs, err := hc.GetMany(ctx, f.table, []string{"2", "1", "3"})
	if err != nil || len(docs) != 3 || docs[2] != nil || !strings.Contains(string(docs[0]), `"two"`) {
		t.Fatalf("sidecar GetMany after an embedded Put: %s, %v", docs, err)
	}
	if _, err := hc.Delete(ctx, f.table, "2"); err != nil {
		t.Fatal(err)
	}
	edocs, err := db.GetMany(ctx, f.table, []string{"2", "1"})
	if err != nil || edocs[0] != nil || edocs[1] == nil {
		t.Fatalf("embedded GetMany after a sidecar Delete: %s, %v", edocs, err)
	}
	// The same document, the same bytes and ETag from both members.
	eb, et, err := db.Get(ctx, f.table, "1")
	if err != nil {
		t.Fatal(err)
	}
	hb, ht, err := hc.Get(ctx, f.table, "1")
	if err != nil || string(eb) != string(hb) || et != ht {
		t.Fatalf("embedded %s %s, sidecar %s %s (%v)", eb, et, hb, ht, err)
	}
	if _, _, nm, err := db.GetIfNoneMatch(ctx, f.table, "1", et); err != nil || !nm {
		t.Fatalf("GetIfNoneMatch with the current ETag: notModified %v, %v", nm, err)
	}
	// Projections, from the near cache and after the other member's write.
	if p, err := db.GetFields(ctx, f.table, "1", "s", "missing", "id"); err != nil || !strings.HasPrefix(string(p), `{"s":`) || strings.Contains(string(p), `"n"`) {
		t.Fatalf("GetFields: %s, %v", p, err)
	}
	if _, err := hc.Patch(ctx, f.table, "1", map[string]any{"$set": map[string]any{"s": "projected"}}); err != nil {
		t.Fatal(err)
	}
	if p, err := db.GetFields(ctx, f.table, "1", "s"); err != nil || string(p) != `{"s":"projected"}` {
		t.Fatalf("GetFields after a sidecar write: %s, %v", p, err)
	}
	if ps, err := db.GetManyFields(ctx, f.table, []string{"1", "2"}, "n", "s"); err != nil || len(ps) != 2 || ps[1] != nil || !strings.HasSuffix(string(ps[0]), `,"s":"projected"}`) {
		t.Fatalf("GetManyFields: %s, %v", ps, err)
	}
	if _, err := db.GetFields(ctx, f.table, "2", "s"); !client.IsNotFound(err) {
		t.Fatalf("GetFields of a deleted document: %v, want not_found", err)
	}
	// Field texts: from the near cache (the copy GetFields just leased),
	// after the other member's write, and in a multi-read.
	if vs, err := db.GetValues(ctx, f.table, "1", "s", "missing", "n"); err != nil || len(vs) != 3 || vs[0] != `"projected"` || vs[1] != "" || vs[2] == "" {
		t.Fatalf("GetValues: %q, %v", vs, err)
	}
	if _, err := hc.Patch(ctx, f.table, "1", map[string]any{"$set": map[string]any{"s": "valued"}}); err != nil {
		t.Fatal(err)
	}
	if vs, err := db.GetValues(ctx, f.table, "1", "s"); err != nil || len(vs) != 1 || vs[0] != `"valued"` {
		t.Fatalf("GetValues after a sidecar write: %q, %v", vs, err)
	}
	if vss, err := db.GetManyValues(ctx, f.table, []string{"1", "2"}, "s"); err != nil || len(vss) != 2 || vss[1] != nil || len(vss[0]) != 1 || vss[0][0] != `"valued"` {
		t.Fatalf("GetManyValues: %q, %v", vss, err)
	}
	if _, err := db.GetValues(ctx, f.table, "2", "s"); !client.IsNotFound(err) {
		t.Fatalf("GetValues of a deleted document: %v, want not_found", err)
	}
	hb, _, _ = hc.Get(ctx, f.table, "1")
	scan, err := db.Scan(ctx, f.table, "", 0)
	if err != nil || len(scan) != 1 || string(scan[0]) != string(hb) {
		t.Fatalf("embedded Scan: %s, %v", scan, err)
	}
}

// The embedded mode's errors are the HTTP API's, as *client.Error.
func TestEmbeddedErrors(t *testing.T) {
	f := newFixture(t)
	db := f.open(t, time.Second, false, nil)
	ctx := context.Background()
	if _, _, err := db.Get(ctx, f.table, "9"); !client.IsNotFound(err) {
		t.Errorf("get of a missing document: %v, want not_found", err)
	}
	if _, _, err := db.Get(ctx, "nope", "1"); !client.IsNotFound(err) {
		t.Errorf("get of an unknown collection: %v, want not_found", err)
	}
	if _, _, err := db.Get(ctx, f.table, "x"); !client.IsInvalid(err) {
		t.Errorf("get of a non-integer id: %v, want invalid_argument", err)
	}
	if _, err := db.Patch(ctx, f.table, "1", map[string]any{"$bogus": 1}); !client.IsInvalid(err) {
		t.Errorf("patch with an unknown operator: %v, want invalid_argument", err)
	}
	if _, err := db.Put(ctx, f.table, "", map[string]any{}); !client.IsInvalid(err) {
		t.Errorf("put with an empty id: %v, want invalid_argument", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := db.Get(cctx, f.table, "1"); !errors.Is(err, context.Canceled) {
		t.Errorf("get with a cancelled context: %v, want one wrapping context.Canceled", err)
	}
}

// pgRow reads row id from the store, bypassing writeback.
func (f *fixture) pgRow(t *testing.T, id int) doc {
	t.Helper()
	var d doc
	if err := f.pg.QueryRow(fmt.Sprintf("SELECT id, n, s FROM %s WHERE id = $1", f.table), id).Scan(&d.ID, &d.N, &d.S); err != nil {
		t.Fatal(err)
	}
	return d
}

// eventually waits up to 10s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Appliers off: writes stay buffered (and readable) until a member that
// runs appliers joins. On: the embedded member applies them itself.
func TestEmbeddedAppliers(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	off := f.open(t, time.Second, false, nil)
	if _, err := off.Patch(ctx, f.table, "1", map[string]any{"$set": map[string]any{"s": "buffered"}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // 25 poll intervals of an applier, were one running
	if r := f.pgRow(t, 1); r.S != "one" {
		t.Fatalf("a member without appliers applied a write: the row is %+v", r)
	}
	tables[off] = f.table
	if got := get(t, off, "1"); got.S != "buffered" {
		t.Fatalf("the buffered write is not read back: %+v", got)
	}

	on := f.open(t, time.Second, true, nil)
	eventually(t, "the member with appliers applies the buffered write", func() bool { return f.pgRow(t, 1).S == "buffered" })
	if _, err := on.Patch(ctx, f.table, "1", map[string]any{"$inc": map[string]any{"n": 41}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the member with appliers applies its own write", func() bool { return f.pgRow(t, 1).N == 42 })
}

// Close gives the member's leases back: a writer elsewhere does not wait
// for them to expire. Later calls fail with ErrClosed.
func TestEmbeddedClose(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const lease = 10 * time.Second
	db, err := writeback.Open(ctx, writeback.Options{Config: f.yaml(t, lease), Appliers: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	tables[db] = f.table
	get(t, db, "1")
	get(t, db, "1")
	// The lease record names the embedded member as a holder.
	keys, err := f.rdb.Keys(ctx, f.prefix+":{*}:l:*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("lease records: %v, %v", keys, err)
	}
	if ok, _ := f.rdb.HExists(ctx, keys[0], db.InstanceID()).Result(); !ok {
		t.Fatalf("the embedded member holds no lease in %s", keys[0])
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if ok, _ := f.rdb.HExists(ctx, keys[0], db.InstanceID()).Result(); ok {
		t.Fatalf("the embedded member still holds its lease in %s after Close", keys[0])
	}
	if _, _, err := db.Get(ctx, f.table, "1"); !errors.Is(err, writeback.ErrClosed) {
		t.Errorf("Get after Close: %v, want ErrClosed", err)
	}
	if _, err := db.Patch(ctx, f.table, "1", map[string]any{"$inc": map[string]any{"n": 1}}); !errors.Is(err, writeback.ErrClosed) {
		t.Errorf("Patch after Close: %v, want ErrClosed", err)
	}
	hc := f.sidecar(t, lease)
	start := time.Now()
	if _, err := hc.Patch(ctx, f.table, "1", map[string]any{"$set": map[string]any{"s": "after"}}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a write after Close waited %s (lease %s): the lease was not given back", d, lease)
	}
	// The appliers gave their partitions back: the sidecar applies at
	// once, not after the embedded member's ownership (3s) expires.
	eventually(t, "the sidecar applies after the embedded member closed", func() bool { return f.pgRow(t, 1).S == "after" })
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the sidecar applied %s after the write: the embedded appliers kept their partitions (ownerLease 3s)", d)
	}
}

// Bad settings are refused at Open, one sentence each.
func TestEmbeddedRefusesBadSettings(t *testing.T) {
	f := newFixture(t)
	good := string(f.yaml(t, time.Second))
	for _, c := range []struct {
		name string
		o    writeback.Options
		want string
	}{
		{"none", writeback.Options{}, "no configuration"},
		{"both", writeback.Options{ConfigFile: "x.yaml", Config: []byte(good)}, "both set"},
		{"missing file", writeback.Options{ConfigFile: t.TempDir() + "/nope.yaml"}, "does not exist"},
		{"negative maxBytes", writeback.Options{Config: []byte(strings.Replace(good, "maxBytes: 1MiB", "maxBytes: -1", 1))}, "maxBytes"},
		{"short lease", writeback.Options{Config: []byte(strings.Replace(good, "leaseTTL: 1s", "leaseTTL: 50ms", 1))}, "leaseTTL: 50ms is shorter"},
		{"no collections", writeback.Options{Config: fmt.Appendf(nil, "redis: {addrs: [%q]}\n", testenv.RedisAddr(t))}, "no collections"},
		{"bad instance", writeback.Options{Config: []byte(good), InstanceID: "a b"}, "instanceID"},
		{"no table", writeback.Options{Config: []byte(strings.Replace(good, f.table+":", f.table+"_missing:", 1))}, f.table + "_missing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.o.Logger = quiet()
			db, err := writeback.Open(context.Background(), c.o)
			if err == nil {
				db.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not say %q", err, c.want)
			}
		})
	}
}

// Close while calls are in flight: it waits for them; each call either
// completes or fails with ErrClosed, nothing else.
func TestEmbeddedCloseUnderLoad(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	db, err := writeback.Open(ctx, writeback.Options{Config: f.yaml(t, time.Second), Appliers: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	counts := make(chan [2]int, 8)
	for g := range 8 {
		go func() {
			ok, closed := 0, 0
			for {
				var err error
				if g%4 == 0 {
					_, err = db.Patch(ctx, f.table, "1", map[string]any{"$inc": map[string]any{"n": 1}})
				} else {
					_, _, err = db.Get(ctx, f.table, "1")
				}
				switch {
				case err == nil:
					ok++
				case errors.Is(err, writeback.ErrClosed):
					closed++
				default:
					errs <- err
					counts <- [2]int{ok, closed}
					return
				}
				if closed > 0 {
					errs <- nil
					counts <- [2]int{ok, closed}
					return
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	total := 0
	for range 8 {
		if err := <-errs; err != nil {
			t.Errorf("a call during Close failed with %v, want success or ErrClosed", err)
		}
		c := <-counts
		total += c[0]
	}
	if total < 100 {
		t.Errorf("only %d calls succeeded before Close", total)
	}
}
