package bgt

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/store"
	"github.com/writeback/writeback/internal/testenv"
)

// world is an applier over one PostgreSQL table with real Redis.
type world struct {
	app   *Applier
	buf   *buffer.Buffer
	st    store.Store
	table string
	coll  string
}

func newWorld(t *testing.T, tune ...func(*Config)) *world {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, "postgres", testenv.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	w := &world{st: st, table: testenv.UniqueName(t, "bgt"), coll: testenv.UniqueName(t, "c")}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	prefix := testenv.UniqueName(t, "bgt")
	t.Cleanup(func() {
		iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		rdb.Close()
		st.Close()
	})
	exec := func(q string) {
		t.Helper()
		if err := execSQL(ctx, testenv.PostgresDSN(t), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(fmt.Sprintf("CREATE TABLE %s (id bigint PRIMARY KEY, n bigint)", w.table))
	t.Cleanup(func() {
		_ = execSQL(ctx, testenv.PostgresDSN(t), "DROP TABLE "+w.table)
		_ = execSQL(ctx, testenv.PostgresDSN(t), "DELETE FROM writeback_applied_docs WHERE collection IN ('"+w.coll+"', '"+w.coll+"_other')")
		_ = execSQL(ctx, testenv.PostgresDSN(t), "DELETE FROM "+store.FloorsTable+" WHERE collection = '"+w.coll+"'")
	})
	tbl, err := st.Describe(ctx, w.table, "id")
	if err != nil {
		t.Fatal(err)
	}
	w.buf = buffer.New(rdb, prefix, 4, time.Second)
	colls := map[string]*Collection{w.coll: {Name: w.coll, StoreName: "pg", Store: st, Table: tbl}}
	cfg := Config{InstanceID: "t", Workers: 2, BatchSize: 16, OwnerLease: time.Second, PollInterval: 10 * time.Millisecond}
	for _, f := range tune {
		f(&cfg)
	}
	w.app = New(cfg, w.buf, colls, metrics.New(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	return w
}

// put buffers {"n": n} as document id and returns its seq.
func (w *world) put(t *testing.T, id string, n int) int64 {
	t.Helper()
	tbl, _ := w.st.Describe(context.Background(), w.table, "id")
	c, err := change.ParsePut(tbl.Schema, id, []byte(fmt.Sprintf(`{"n":%d}`, n)))
	if err != nil {
		t.Fatal(err)
	}
	seq, out, err := w.buf.Write(context.Background(), w.coll, id, c, tbl.Schema, buffer.WriteOptions{TTL: time.Minute})
	if err != nil || out != buffer.Buffered {
		t.Fatalf("write: %v %v", out, err)
	}
	return seq
}

func (w *world) records(t *testing.T) map[string]int64 {
	t.Helper()
	recs, err := w.st.ListApplied(context.Background(), "", "", 100000)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, r := range recs {
		if r.Collection == w.coll {
			out[r.ID] = r.Seq
		}
	}
	return out
}

// Applied records are deleted only after two compaction rounds found them
// idle with the same seq; records of documents with buffered writes, or
// that moved on between the rounds, stay. (The rounds write records only
// when they do not read cuts.)
func TestCompactAppliedTwoRounds(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.RecordsOnly = true })
	ctx := context.Background()
	for _, id := range []string{"1", "2", "3"} {
		w.put(t, id, 1)
	}
	if res, err := w.app.Flush(ctx); err != nil || !res.Drained {
		t.Fatalf("flush: %+v %v", res, err)
	}
	if got := w.records(t); len(got) != 3 {
		t.Fatalf("records after apply: %v", got)
	}
	// A record of a collection this sidecar does not serve (another
	// deployment on the same database) is never its to delete.
	if err := execSQL(ctx, testenv.PostgresDSN(t), "INSERT INTO writeback_applied_docs (collection, id, part, seq) VALUES ('"+w.coll+"_other', '1', 0, 5)"); err != nil {
		t.Fatal(err)
	}
	w.app.compactApplied(ctx) // round 1: all idle, none deleted yet
	if got := w.records(t); len(got) != 3 {
		t.Fatalf("round 1 deleted records: %v", got)
	}
	w.put(t, "2", 2) // pending at round 2: kept
	w.put(t, "3", 3) // applied between the rounds: its record moved on, kept
	if _, _, err := w.app.ApplyRound(ctx, []int{w.buf.Partition(w.coll, "3")}); err != nil {
		t.Fatal(err)
	}
	if w.buf.Partition(w.coll, "2") == w.buf.Partition(w.coll, "3") {
		// The round may have applied 2 as well; buffer it again.
		w.put(t, "2", 4)
	}
	w.app.compactApplied(ctx) // round 2
	got := w.records(t)
	if _, ok := got["1"]; ok {
		t.Errorf("record 1, idle in both rounds, was kept: %v", got)
	}
	if _, ok := got["2"]; !ok {
		t.Errorf("record 2, pending, was deleted: %v", got)
	}
	if _, ok := got["3"]; !ok {
		t.Errorf("record 3, moved on between rounds, was deleted: %v", got)
	}
	var foreign int
	all, err := w.st.ListApplied(ctx, "", "", 100000)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		if r.Collection == w.coll+"_other" {
			foreign++
		}
	}
	if foreign != 1 {
		t.Errorf("another collection's applied record was compacted away")
	}
	// Everything still applies exactly once afterwards.
	if res, err := w.app.Flush(ctx); err != nil || !res.Drained {
		t.Fatalf("flush: %+v %v", res, err)
	}
}

// A batch the store cannot apply within the batch timeout is retried
// smaller until it fits, instead of failing the same way forever: here
// every row costs the store 50 ms, a round has 300 ms, and the configured
// round of 16 documents needs 800 ms — and so does a round of one
// partition alone (64 documents in 4 partitions).
func TestRoundsShrinkAfterTimeout(t *testing.T) {
	w := newWorld(t, func(c *Config) {
		c.Workers, c.BatchSize, c.MaxPerDoc = 1, 16, 16
		c.BatchTimeout, c.RetryBackoff = 300*time.Millisecond, 10*time.Millisecond
	})
	ctx := context.Background()
	dsn := testenv.PostgresDSN(t)
	fn := w.table + "_slow"
	for _, q := range []string{
		"CREATE FUNCTION " + fn + "() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.05); RETURN NEW; END $$",
		"CREATE TRIGGER " + fn + " BEFORE INSERT OR UPDATE ON " + w.table + " FOR EACH ROW EXECUTE FUNCTION " + fn + "()",
	} {
		if err := execSQL(ctx, dsn, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { _ = execSQL(ctx, dsn, "DROP FUNCTION IF EXISTS "+fn+"() CASCADE") })

	// 64 documents, the last 8 written 3 times: every document's last
	// value is its id times 10.
	last := map[string]int64{} // id → seq of its last write
	for i := range 64 {
		id := fmt.Sprint(i)
		if i >= 56 {
			w.put(t, id, 1)
			w.put(t, id, 2)
		}
		last[id] = w.put(t, id, 10*i)
	}
	runUntilApplied(t, w.app.Run, func(ctx context.Context) (int64, error) {
		st, err := w.buf.Stats(ctx)
		return st.PendingChanges, err
	}, "changes still pending after 30 s: rounds that time out are retried at the same size")
	// Every document holds its last value, and what is applied of it
	// reaches its last write.
	tbl, err := w.st.Describe(ctx, w.table, "id")
	if err != nil {
		t.Fatal(err)
	}
	for id, seq := range last {
		doc, applied, err := w.st.Read(ctx, tbl, w.coll, id, w.buf.Partition(w.coll, id))
		if err != nil {
			t.Fatalf("document %s: %v", id, err)
		}
		i, _ := strconv.Atoi(id)
		assert.JSONEq(t, fmt.Sprint(10*i), string(doc["n"]), "document %s", id)
		// A cut's floor may hold later changes of other documents.
		assert.GreaterOrEqual(t, applied, seq, "document %s: applied seq", id)
	}
	w.app.mu.Lock()
	s, ok := w.app.shrunk.m[w.buf.Partition(w.coll, "0")]
	w.app.mu.Unlock()
	if !ok || s.div < 2 || s.failed < 1 {
		t.Errorf("rounds of document 0's partition: %+v, %v; want them shrunk after a timeout", s, ok)
	}
	timeouts, shrinks := testutil.ToFloat64(w.app.m.BatchTimeouts), testutil.ToFloat64(w.app.m.BatchShrinks)
	if timeouts < 1 || shrinks < 1 || shrinks > timeouts {
		t.Errorf("writeback_apply_batch_timeouts_total %v, writeback_apply_batch_shrinks_total %v; want at least one of each, and no more shrinks than timeouts", timeouts, shrinks)
	}
}

// runUntilApplied runs run (an applier's Run) until pending reports
// nothing pending, and stops it; after 30 s it fails the test with
// pending's count and what.
func runUntilApplied(t *testing.T, run func(context.Context) error, pending func(context.Context) (int64, error), what string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := pending(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d %s", n, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func execSQL(ctx context.Context, dsn, q string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, q)
	return err
}

// queryInt reads one integer from PostgreSQL.
func queryInt(ctx context.Context, dsn, q string, n *int) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, q).Scan(n)
}

// A round that timed out halves the next; successes double them back, but
// not to the size that timed out until shrinkMemory has passed; a round of
// one change of one document cannot shrink further.
func TestResize(t *testing.T) {
	a := New(Config{BatchSize: 8, MaxPerDoc: 4}, buffer.New(nil, "resize", 8, time.Second), nil, metrics.New(prometheus.NewRegistry()), nil)
	a.shrunk.resize([]int{3}, 1, true, false)
	assert.Equal(t, 2, a.shrunk.m[3].div)
	a.shrunk.resize([]int{3}, 2, true, false)
	assert.Equal(t, 4, a.shrunk.m[3].div)
	a.shrunk.resize([]int{3}, 4, false, true)
	assert.Equal(t, 4, a.shrunk.m[3].div, "grown back to the size that timed out within shrinkMemory")
	a.shrunk.resize([]int{3}, 4, false, false)
	assert.Equal(t, 4, a.shrunk.m[3].div, "a failure other than a timeout changes nothing")

	s := a.shrunk.m[3]
	s.until = time.Now().Add(-time.Second)
	a.shrunk.m[3] = s
	a.shrunk.resize([]int{3}, 4, false, true)
	assert.Equal(t, 2, a.shrunk.m[3].div)
	a.shrunk.resize([]int{3}, 2, false, true)
	_, ok := a.shrunk.m[3]
	assert.False(t, ok, "back to the configured size once the memory passed")

	for div := 1; div <= 8; div *= 2 {
		a.shrunk.resize([]int{5}, div, true, false)
	}
	docs, perDoc := a.roundSize(a.shrunk.m[5].div)
	assert.Equal(t, [2]int{1, 1}, [2]int{docs, perDoc})
	a.shrunk.resize([]int{5}, a.shrunk.m[5].div, true, false)
	assert.Equal(t, 8, a.shrunk.m[5].div, "cannot shrink below one change")
}

// The rollback check's floors are the applied records of the sidecar's own
// collections. Another deployment sharing the database (its own
// collections, keyPrefix and Redis) runs ahead in the same partition
// numbers: its records say nothing of this Redis, and must neither count
// as a rollback (which drops every cache entry and I lease of the node)
// nor raise this deployment's sequences. The sidecar's own records above a
// sequence still do.
func TestPrepareIgnoresOtherDeployments(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	if err := w.app.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	record := func(coll string, part int, seq int64) {
		t.Helper()
		q := fmt.Sprintf("INSERT INTO writeback_applied_docs (collection, id, part, seq) VALUES ('%s', '%d', %d, %d)", coll, part, part, seq)
		if err := execSQL(ctx, testenv.PostgresDSN(t), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	const ahead = 1 << 52 // above the sequences' clock (µs)
	for p := range 4 {
		record(w.coll+"_other", p, ahead+int64(p))
	}
	if err := w.app.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(w.app.m.RedisRollbacks); got != 0 {
		t.Errorf("writeback_redis_rollbacks_total = %v after another deployment's records ran ahead; want 0", got)
	}
	if seq := w.put(t, "1", 1); seq >= ahead {
		t.Errorf("a write got seq %d: the sequences were raised to another deployment's records", seq)
	}

	record(w.coll, 0, ahead)
	if err := w.app.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(w.app.m.RedisRollbacks); got != 1 {
		t.Errorf("writeback_redis_rollbacks_total = %v with the sidecar's own record above its sequence; want 1", got)
	}
}
