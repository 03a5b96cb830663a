package bgt

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

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

func newWorld(t *testing.T) *world {
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
	})
	tbl, err := st.Describe(ctx, w.table, "id")
	if err != nil {
		t.Fatal(err)
	}
	w.buf = buffer.New(rdb, prefix, 4, time.Second)
	colls := map[string]*Collection{w.coll: {Name: w.coll, StoreName: "pg", Store: st, Table: tbl}}
	w.app = New(Config{InstanceID: "t", Workers: 2, BatchSize: 16, OwnerLease: time.Second, PollInterval: 10 * time.Millisecond},
		w.buf, colls, metrics.New(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	return w
}

func (w *world) put(t *testing.T, id string, n int) {
	t.Helper()
	tbl, _ := w.st.Describe(context.Background(), w.table, "id")
	c, err := change.ParsePut(tbl.Schema, id, []byte(fmt.Sprintf(`{"n":%d}`, n)))
	if err != nil {
		t.Fatal(err)
	}
	if _, out, err := w.buf.Write(context.Background(), w.coll, id, c, tbl.Schema, buffer.WriteOptions{TTL: time.Minute}); err != nil || out != buffer.Buffered {
		t.Fatalf("write: %v %v", out, err)
	}
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
// that moved on between the rounds, stay.
func TestCompactAppliedTwoRounds(t *testing.T) {
	w := newWorld(t)
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

func execSQL(ctx context.Context, dsn, q string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, q)
	return err
}
