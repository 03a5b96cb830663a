package document_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/bgt"
	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/document"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/store"
	"github.com/writeback/writeback/internal/testenv"
)

// switchedStore is a store that can be taken down: Apply then fails as an
// unreachable database does.
type switchedStore struct {
	store.Store
	down atomic.Bool
}

func (s *switchedStore) Apply(ctx context.Context, ws []store.Write) ([]store.Result, error) {
	if s.down.Load() {
		return nil, errors.New("store: connection refused")
	}
	return s.Store.Apply(ctx, ws)
}

// fieldWorld is a document service over a PostgreSQL table
// "<table>(id bigint primary key, s text, n bigint)", collection <table>
// (write-back), whose appliers do not run: changes stay buffered until a
// write applies them.
type fieldWorld struct {
	svc   *document.Service
	buf   *buffer.Buffer
	st    *switchedStore
	table *store.Table
	coll  string
}

func newFieldWorld(t *testing.T) *fieldWorld {
	t.Helper()
	ctx := context.Background()
	dsn, redisAddr := testenv.PostgresDSN(t), testenv.RedisAddr(t)
	name := testenv.UniqueName(t, "fields")
	prefix := testenv.UniqueName(t, "fieldswb")
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(fmt.Sprintf("CREATE TABLE %s (id bigint PRIMARY KEY, s text, n bigint)", name)); err != nil {
		t.Fatal(err)
	}
	pg, err := store.Open(ctx, "postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() {
		iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		rdb.Close()
		pg.Close()
		_, _ = db.Exec("DROP TABLE IF EXISTS " + name)
		_, _ = db.Exec("DELETE FROM writeback_applied_docs WHERE collection = $1", name)
		db.Close()
	})
	tbl, err := pg.Describe(ctx, name, "id")
	if err != nil {
		t.Fatal(err)
	}
	w := &fieldWorld{st: &switchedStore{Store: pg}, table: tbl, coll: name}
	m := metrics.New(prometheus.NewRegistry())
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	w.buf = buffer.New(rdb, prefix, 4, 500*time.Millisecond)
	app := bgt.New(bgt.Config{InstanceID: "fields-test", Workers: 1, BatchSize: 16, OwnerLease: time.Second, PollInterval: 10 * time.Millisecond},
		w.buf, map[string]*bgt.Collection{name: {Name: name, StoreName: "pg", Store: w.st, Table: tbl}}, m, log)
	w.buf.Reseed = app.Prepare
	if err := app.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	w.svc = document.New(w.buf, app, map[string]*document.Collection{
		name: {Name: name, Policy: document.WriteBack, TTL: time.Minute, StoreName: "pg", Store: w.st, Table: tbl},
	}, m)
	return w
}

// set is HSET id field value (canonical JSON).
func (w *fieldWorld) set(t *testing.T, id, field, value string) document.FieldWrite {
	t.Helper()
	ref, err := w.svc.Ref(w.coll, id)
	if err != nil {
		t.Fatal(err)
	}
	return document.FieldWrite{Ref: ref, Op: document.SetFields, Set: change.Doc{field: []byte(value)}}
}

func (w *fieldWorld) pending(t *testing.T) int64 {
	t.Helper()
	st, err := w.buf.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.PendingChanges
}

// writeBatch runs ws through WriteFields and waits for every result.
func (w *fieldWorld) writeBatch(ws []document.FieldWrite) ([]document.FieldResult, []error) {
	rs, errs := make([]document.FieldResult, len(ws)), make([]error, len(ws))
	left := make(chan struct{}, len(ws))
	w.svc.WriteFields(context.Background(), ws, func(i int, r document.FieldResult, err error) {
		rs[i], errs[i] = r, err
		left <- struct{}{}
	})
	for range ws {
		<-left
	}
	return rs, errs
}

// Under the pinned-memory fallback a field write to a write-back
// collection applies the document's pending changes first, as the HTTP
// API's writes do: with the store down it is refused and buffers nothing;
// with the store up the pending changes and the write reach the store, in
// order, before the write is answered.
func TestFieldWritesUnderFallbackApplyPendingFirst(t *testing.T) {
	w := newFieldWorld(t)
	ctx := context.Background()
	for _, id := range []string{"1", "2"} {
		if r, err := w.svc.WriteField(ctx, w.set(t, id, "s", `"a"`)); err != nil || r.Added != 1 {
			t.Fatalf("creating %s: %+v %v; want 1 field added", id, r, err)
		}
	}
	if n := w.pending(t); n != 2 {
		t.Fatalf("%d changes pending after two creates; want 2 (the appliers do not run)", n)
	}

	w.svc.SetFallback(true)
	w.st.down.Store(true)
	var se *document.StoreError
	if _, err := w.svc.WriteField(ctx, w.set(t, "1", "n", "5")); !errors.As(err, &se) || se.Buffered != 0 {
		t.Fatalf("WriteField with the store down: %v; want a StoreError before buffering", err)
	}
	_, errs := w.writeBatch([]document.FieldWrite{w.set(t, "1", "n", "5"), w.set(t, "2", "n", "5")})
	for i, err := range errs {
		if !errors.As(err, &se) || se.Buffered != 0 {
			t.Fatalf("WriteFields[%d] with the store down: %v; want a StoreError before buffering", i, err)
		}
	}
	if n := w.pending(t); n != 2 {
		t.Fatalf("%d changes pending after refused writes; want the 2 of before", n)
	}

	w.st.down.Store(false)
	if r, err := w.svc.WriteField(ctx, w.set(t, "1", "n", "7")); err != nil || r.Added != 1 {
		t.Fatalf("WriteField with the store up: %+v %v; want 1 field added", r, err)
	}
	rs, errs := w.writeBatch([]document.FieldWrite{w.set(t, "2", "n", "8")})
	if errs[0] != nil || rs[0].Added != 1 {
		t.Fatalf("WriteFields with the store up: %+v %v; want 1 field added", rs[0], errs[0])
	}
	if n := w.pending(t); n != 0 {
		t.Fatalf("%d changes pending after writing through; want 0", n)
	}
	for id, n := range map[string]string{"1": "7", "2": "8"} {
		doc, _, err := w.st.Read(ctx, w.table, w.coll, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		if string(doc["s"]) != `"a"` || string(doc["n"]) != n {
			t.Fatalf("store row %s: s=%s n=%s; want s=\"a\" (the pending create) and n=%s", id, doc["s"], doc["n"], n)
		}
	}
}
