package benchmarks

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/ycsb"
	"github.com/writeback/writeback/internal/bgt"
	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/change"
	"github.com/writeback/writeback/internal/config"
	"github.com/writeback/writeback/internal/metrics"
	"github.com/writeback/writeback/internal/store"
)

// myDSN is the MariaDB/MySQL of BenchmarkDrain; WRITEBACK_BENCH_MYSQL_DSN
// overrides it.
var myDSN = envOr("WRITEBACK_BENCH_MYSQL_DSN", "root@tcp(127.0.0.1:3306)/writeback")

// drainSpec is BenchmarkDrain's table: YCSB's usertable, 20k records.
var drainSpec = ycsb.Spec{Records: 20_000, Fields: 10, FieldSize: 100}

// drainBatch is the documents per applier batch and per direct statement
// (the default batchSize).
const drainBatch = 128

// drainShape is how a BenchmarkDrain run buffers, drains and compares.
type drainShape struct {
	docs       int   // one-field patches per round, each of a distinct record
	partitions int   // of the pending index
	workers    int   // of the appliers (a flush runs twice as many goroutines)
	conns      []int // the direct statements run at each of these concurrencies
	bounds     bool  // also measure the bounds of applied records (one client)
}

var (
	// drainOne drains with one applier goroutine against one client.
	drainOne = drainShape{docs: 4096, partitions: 1, workers: 1, conns: []int{1}, bounds: true}
	// drainDeployed drains with the default partitions and workers, enough
	// patches for a full batch per partition, against the direct statements
	// at 1 to 8 clients (as many as the flush's goroutines).
	drainDeployed = drainShape{docs: 8192, partitions: config.Default().Writeback.Partitions,
		workers: config.Default().Writeback.Workers, conns: []int{1, 2, 4, 8}}
)

// BenchmarkDrain measures, per SQL store, how fast the appliers drain
// buffered one-field patches (YCSB's update, the Redis protocol's HSET)
// into the table, against how fast one client writes the same rows itself
// with the database's fastest batched statement, in batches of the same
// size. Each round buffers drainDocs patches of distinct records under a
// fresh key prefix (not timed), drains them with bgt's Flush (one
// partition, hence one applier goroutine: one client against one client),
// then writes the same rows directly with each batched statement.
//
// Metrics: drain-changes/s (the appliers), direct-changes/s (the fastest
// direct statement; each one also has its own metric) and drain/direct, the
// ratio of the two; apply-changes/s counts only the time spent in the
// store's ApplyPlanned (the rest of a drain is reading the pending
// documents and their changes from Redis and planning the next batch, both
// while a batch is in the store, and trimming). Each way of writing the
// rows also reports the CPU time each process spent on it per change, in
// µs (<way>-<process>-us/change: self is the benchmark's process, the
// appliers or a direct client; postgres or mariadbd, and redis-server),
// read from /proc: on two CPUs every way is bound by its CPU time per
// change, and these say whose. The benchmark's own process also reports,
// per way, the bytes it allocated per change (<way>-self-B/change), the
// collections it ran per thousand changes (<way>-self-gc/kchange) and its
// minor page faults per change (<way>-self-faults/change); in a CPU profile
// (-cpuprofile) each way's goroutines carry the label way=<way>, the
// untimed buffering's way=buffer, so that what no label names is the
// runtime's own (collector, scavenger, scheduler).
//
// The bound of an exactly-once applier that keeps a record per document
// (what Store.Apply does: writeback_applied_docs, written in the store
// transaction): records-changes/s is one client writing the same rows with
// the UPDATE from arrays and, in the same transaction and round trip,
// upserting one applied record per row (under a collection of its own);
// records/direct is what such an applier can reach at best, drain/records
// how much of it the appliers do.
//
// The bound of an applier that keeps a record per batch instead
// (docs/design-applied-batches.md): batches-changes/s is the same client
// writing the rows with the UPDATE from arrays and, in the same transaction
// and round trip, inserting one row per batch that names the batch's
// documents and their last seqs (arrays on PostgreSQL, a JSON document on
// MySQL) into a table of its own; batches/direct is what such an applier
// can reach at best.
func BenchmarkDrain(b *testing.B) {
	for _, st := range []struct{ driver, dsn string }{{ycsb.Postgres, pgDSN}, {ycsb.MySQL, myDSN}} {
		b.Run(st.driver, func(b *testing.B) { benchDrain(b, st.driver, st.dsn, drainOne) })
	}
}

// BenchmarkDrainDeployed is BenchmarkDrain with the appliers as a sidecar
// runs them by default: writeback.partitions and writeback.workers of
// config.Default, 8192 patches per round (a batch of 128 per partition on
// average), drained by Flush's 2 × workers goroutines, each with its own
// store connection. The reference is the store's own at its best: each
// direct statement runs from 1, 2, 4 and 8 clients at once (each with its
// own connection, taking the batches in turn), and drain/direct divides by
// the fastest of them. The bounds of applied records are BenchmarkDrain's.
func BenchmarkDrainDeployed(b *testing.B) {
	for _, st := range []struct{ driver, dsn string }{{ycsb.Postgres, pgDSN}, {ycsb.MySQL, myDSN}} {
		b.Run(st.driver, func(b *testing.B) { benchDrain(b, st.driver, st.dsn, drainDeployed) })
	}
}

// timedStore adds up the time spent in Apply.
type timedStore struct {
	store.Store
	mu      sync.Mutex // guards applied
	applied time.Duration
}

func (s *timedStore) Apply(ctx context.Context, writes []store.Write) ([]store.Result, error) {
	return s.ApplyPlanned(ctx, store.Plan(writes))
}

// ApplyPlanned times the store's ApplyPlanned (the SQL stores are
// store.Planners): an applier plans its next batch while the current one
// is in the store, and that planning is not Apply's time.
func (s *timedStore) ApplyPlanned(ctx context.Context, p *store.Planned) ([]store.Result, error) {
	start := time.Now()
	res, err := s.Store.(store.Planner).ApplyPlanned(ctx, p)
	s.mu.Lock()
	s.applied += time.Since(start)
	s.mu.Unlock()
	return res, err
}

// drainWorld is one store's table, store, direct client and Redis.
type drainWorld struct {
	spec   ycsb.Spec
	db     *ycsb.DB
	st     *timedStore
	tbl    *store.Table
	rdb    *redis.Client
	direct map[string]func(ctx context.Context, keys, vals []string) error
	// bound writes the rows as direct's best statement does and, in the
	// same transaction, one applied record per row (see BenchmarkDrain).
	bound func(ctx context.Context, keys, vals []string, seq int64) error
	// batchBound writes the rows as direct's best statement does and, in
	// the same transaction, one record of the batch numbered batch.
	batchBound func(ctx context.Context, keys, vals []string, batch int64) error
}

func benchDrain(b *testing.B, driver, dsn string, shape drainShape) {
	ctx := context.Background()
	w := newDrainWorld(b, driver, dsn, slices.Max(shape.conns))
	var drain, bound, batches phase
	direct := map[string]*phase{}
	batchNo := int64(0)
	rounds := 0
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		keys, vals := drainRound(i, shape.docs)
		var app *bgt.Applier
		var cleanup func()
		pprof.Do(ctx, pprof.Labels("way", "buffer"), func(context.Context) { app, cleanup = w.buffer(b, keys, vals, shape) })
		b.StartTimer()
		var res bgt.FlushResult
		err := drain.run("drain", func() (err error) {
			res, err = app.Flush(ctx)
			return err
		})
		b.StopTimer()
		cleanup()
		if err != nil || !res.Drained || res.Applied != int64(len(keys)) {
			b.Fatalf("flush: %+v, %v; want %d changes applied", res, err, len(keys))
		}
		for name, write := range w.direct {
			for _, c := range shape.conns {
				// New values: a row written with the values it holds
				// costs MySQL no write at all.
				_, vals = drainRound(i, shape.docs)
				key := directName(name, c, shape)
				if direct[key] == nil {
					direct[key] = &phase{}
				}
				if err := direct[key].run(key, func() error { return inBatches(ctx, c, keys, vals, write) }); err != nil {
					b.Fatalf("direct %s: %v", key, err)
				}
			}
		}
		if shape.bounds {
			_, vals = drainRound(i, shape.docs)
			seq := int64(i + 1)
			if err := bound.run("records", func() error {
				return inBatches(ctx, 1, keys, vals, func(ctx context.Context, keys, vals []string) error {
					return w.bound(ctx, keys, vals, seq)
				})
			}); err != nil {
				b.Fatalf("direct with records: %v", err)
			}
			_, vals = drainRound(i, shape.docs)
			if err := batches.run("batches", func() error {
				return inBatches(ctx, 1, keys, vals, func(ctx context.Context, keys, vals []string) error {
					batchNo++
					return w.batchBound(ctx, keys, vals, batchNo)
				})
			}); err != nil {
				b.Fatalf("direct with batch records: %v", err)
			}
		}
		rounds++
		b.StartTimer()
	}
	b.StopTimer()
	changes := float64(rounds * shape.docs)
	var best *phase
	for name, d := range direct {
		b.ReportMetric(changes/d.took.Seconds(), "direct-"+name+"-changes/s")
		if best == nil || d.took < best.took {
			best = d
		}
	}
	drain.report(b, "drain", changes)
	best.report(b, "direct", changes)
	b.ReportMetric(changes/w.st.applied.Seconds(), "apply-changes/s")
	b.ReportMetric(best.took.Seconds()/drain.took.Seconds(), "drain/direct")
	if shape.bounds {
		bound.report(b, "records", changes)
		b.ReportMetric(best.took.Seconds()/bound.took.Seconds(), "records/direct")
		b.ReportMetric(bound.took.Seconds()/drain.took.Seconds(), "drain/records")
		batches.report(b, "batches", changes)
		b.ReportMetric(best.took.Seconds()/batches.took.Seconds(), "batches/direct")
	}
}

// phase adds up the time and the CPU time of the processes bench.TakeCPU
// reads (the benchmark's own is "self": the appliers, or a direct client)
// over the runs of one way of writing the rows, and what the benchmark's
// process allocated, collected and faulted in meanwhile (bench.Mem).
type phase struct {
	took time.Duration
	cpu  bench.CPU
	mem  bench.Mem
}

// run runs f as one more run of the phase, named way in CPU profiles (the
// pprof label "way"; the goroutines f starts carry it too).
func (p *phase) run(way string, f func() error) error {
	cpu0, mem0 := bench.TakeCPU(), bench.TakeMem()
	start := time.Now()
	var err error
	pprof.Do(context.Background(), pprof.Labels("way", way), func(context.Context) { err = f() })
	p.took += time.Since(start)
	p.mem = p.mem.Add(bench.TakeMem().Sub(mem0))
	if p.cpu == nil {
		p.cpu = bench.CPU{}
	}
	for k, v := range bench.TakeCPU().Sub(cpu0) {
		p.cpu[k] += v
	}
	return err
}

// report reports the phase's rate as <name>-changes/s and each process's
// CPU time per change (µs) as <name>-<process>-us/change, where /proc
// can be read; and the benchmark's process's bytes allocated per change
// (<name>-self-B/change), collections per thousand changes
// (<name>-self-gc/kchange) and minor page faults per change
// (<name>-self-faults/change).
func (p *phase) report(b *testing.B, name string, changes float64) {
	b.ReportMetric(changes/p.took.Seconds(), name+"-changes/s")
	b.ReportMetric(float64(p.mem.Alloc)/changes, name+"-self-B/change")
	b.ReportMetric(float64(p.mem.GCs)*1000/changes, name+"-self-gc/kchange")
	b.ReportMetric(float64(p.mem.Faults)/changes, name+"-self-faults/change")
	for k, v := range p.cpu {
		if v > 0 {
			b.ReportMetric(float64(v.Microseconds())/changes, name+"-"+k+"-us/change")
		}
	}
}

// directName names a direct statement run at concurrency c in the metrics:
// its own name when the shape runs it at one concurrency only.
func directName(name string, c int, shape drainShape) string {
	if len(shape.conns) == 1 {
		return name
	}
	return fmt.Sprintf("%s-c%d", name, c)
}

// inBatches writes the rows in batches of drainBatch with write, from c
// goroutines taking the batches in turn.
func inBatches(ctx context.Context, c int, keys, vals []string, write func(ctx context.Context, keys, vals []string) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, c)
	for g := range c {
		wg.Go(func() {
			for {
				lo := int(next.Add(1)-1) * drainBatch
				if lo >= len(keys) || errs[g] != nil {
					return
				}
				hi := min(lo+drainBatch, len(keys))
				errs[g] = write(ctx, keys[lo:hi], vals[lo:hi])
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// drainRound returns the records and random new field0 values of round i:
// docs distinct records, spread over the table.
func drainRound(i, docs int) (keys, vals []string) {
	r := newRand()
	step := drainSpec.Records / int64(docs)
	for d := range docs {
		rec := int64(d*int(step)+i) % drainSpec.Records
		keys = append(keys, ycsb.Key(rec))
		vals = append(vals, ycsb.RandomValue(r, drainSpec.FieldSize))
	}
	return keys, vals
}

// newDrainWorld loads the table and opens the store and the direct
// statements' client, with up to conns connections.
func newDrainWorld(b *testing.B, driver, dsn string, conns int) *drainWorld {
	b.Helper()
	ctx := context.Background()
	var rnd [4]byte
	_, _ = crand.Read(rnd[:])
	w := &drainWorld{spec: drainSpec}
	w.spec.Table = "bench_drain_" + hex.EncodeToString(rnd[:])
	db, err := ycsb.Open(ctx, driver, dsn)
	if err != nil {
		b.Fatal(err)
	}
	w.db = db
	b.Cleanup(func() { db.Close() })
	if err := db.Load(ctx, w.spec, 1, nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := db.Drop(context.Background(), w.spec.Table); err != nil {
			b.Errorf("dropping %s: %v", w.spec.Table, err)
		}
	})
	st, err := store.Open(ctx, driver, dsn)
	if err != nil {
		b.Fatal(err)
	}
	w.st = &timedStore{Store: st}
	b.Cleanup(func() {
		// The applied records of the table's collection go with it.
		if _, err := st.CompactApplied(context.Background(), w.records(b)); err != nil {
			b.Errorf("deleting the applied records of %s: %v", w.spec.Table, err)
		}
		st.Close()
	})
	if w.tbl, err = st.Describe(ctx, w.spec.Table, ycsb.KeyColumn); err != nil {
		b.Fatal(err)
	}
	w.rdb = redis.NewClient(&redis.Options{Addr: redisAddr})
	b.Cleanup(func() { w.rdb.Close() })
	if err := w.rdb.Ping(ctx).Err(); err != nil {
		b.Fatalf("cannot reach Redis at %s (%v); start the services with `make services`", redisAddr, err)
	}
	if driver == ycsb.Postgres {
		w.directPostgres(b, dsn, conns)
	} else {
		w.directMySQL(b, dsn, conns)
	}
	return w
}

// records lists the applied records of the table's collection.
func (w *drainWorld) records(b *testing.B) []store.AppliedRecord {
	var out []store.AppliedRecord
	after := ""
	for {
		page, err := w.st.ListApplied(context.Background(), w.spec.Table, after, 1000)
		if err != nil {
			b.Errorf("listing applied records: %v", err)
			return out
		}
		for _, r := range page {
			if r.Collection != w.spec.Table {
				return out
			}
			out = append(out, r)
		}
		if len(page) < 1000 {
			return out
		}
		after = page[len(page)-1].ID
	}
}

// buffer buffers one patch {"$set":{"field0": vals[i]}} of each record
// keys[i] under a fresh key prefix, and returns an applier over it and the
// function deleting its keys. The patches are buffered as the document
// service buffers a patch of a document that is not cached: a first write
// answers NeedBase, the second carries the base (write-around: nothing is
// cached).
func (w *drainWorld) buffer(b *testing.B, keys, vals []string, shape drainShape) (*bgt.Applier, func()) {
	b.Helper()
	ctx := context.Background()
	var rnd [4]byte
	_, _ = crand.Read(rnd[:])
	prefix := "bench-drain-" + hex.EncodeToString(rnd[:])
	buf := buffer.New(w.rdb, prefix, shape.partitions, 10*time.Second)
	cleanup := func() {
		if err := deleteKeys(context.Background(), w.rdb, prefix); err != nil {
			b.Errorf("deleting the keys of %s: %v", prefix, err)
		}
	}
	coll := w.spec.Table
	app := bgt.New(bgt.Config{InstanceID: prefix, Workers: shape.workers, BatchSize: drainBatch, OwnerLease: 10 * time.Second,
		PollInterval: time.Second, RetryBackoff: 10 * time.Millisecond},
		buf, map[string]*bgt.Collection{coll: {Name: coll, StoreName: "db", Store: w.st, Table: w.tbl}},
		metrics.New(prometheus.NewRegistry()), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := app.Prepare(ctx); err != nil {
		cleanup()
		b.Fatal(err)
	}
	field := ycsb.FieldName(0)
	reqs := make([]buffer.WriteRequest, len(keys))
	for i, k := range keys {
		v, _ := json.Marshal(vals[i])
		reqs[i] = buffer.WriteRequest{Coll: coll, ID: k, Schema: w.tbl.Schema,
			Change:  change.Change{Kind: change.Patch, Set: change.Doc{field: v}},
			Options: buffer.WriteOptions{Invalidate: true, Token: buffer.NewToken()}}
	}
	for pass := range 2 {
		res, errs := buf.WriteBatch(ctx, reqs)
		for i := range reqs {
			want := []buffer.Outcome{buffer.NeedBase, buffer.Buffered}[pass]
			if errs[i] != nil || res[i].Outcome != want {
				cleanup()
				b.Fatalf("buffering %s (pass %d): outcome %v, %v", keys[i], pass, res[i].Outcome, errs[i])
			}
			reqs[i].Options.HaveBase = true
			reqs[i].Options.Base = change.Doc{ycsb.KeyColumn: w.tbl.Schema.KeyValue(keys[i])}
		}
	}
	return app, cleanup
}

// directPostgres sets up a pool of up to conns connections and the two
// batched statements of PostgreSQL: an UPDATE from arrays and a multi-row
// upsert.
func (w *drainWorld) directPostgres(b *testing.B, dsn string, conns int) {
	b.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	t, k, f := w.spec.Table, ycsb.KeyColumn, ycsb.FieldName(0)
	update := fmt.Sprintf("UPDATE %s AS t SET %s = v.f FROM unnest($1::text[], $2::text[]) AS v(k, f) WHERE t.%s = v.k", t, f, k)
	w.direct = map[string]func(ctx context.Context, keys, vals []string) error{
		"update": func(ctx context.Context, keys, vals []string) error {
			_, err := pool.Exec(ctx, update, keys, vals)
			return err
		},
		"upsert": func(ctx context.Context, keys, vals []string) error {
			q, args := multiRowInsert(t, k, f, keys, vals, func(n int) string { return fmt.Sprintf("$%d", n) })
			_, err := pool.Exec(ctx, q+fmt.Sprintf(" ON CONFLICT (%s) DO UPDATE SET %s = EXCLUDED.%s", k, f, f), args...)
			return err
		},
	}
	records := fmt.Sprintf(`INSERT INTO %s AS a (collection, id, part, seq)
SELECT $1, u.i, 0, $3 FROM unnest($2::text[]) AS u(i)
ON CONFLICT (collection, id) DO UPDATE SET seq = EXCLUDED.seq WHERE a.seq < EXCLUDED.seq`, store.AppliedTable)
	// withUpdate runs q and the UPDATE from arrays of the rows in one
	// transaction and one round trip.
	withUpdate := func(ctx context.Context, keys, vals []string, q string, args ...any) error {
		batch := &pgx.Batch{}
		batch.Queue("BEGIN")
		batch.Queue(q, args...)
		batch.Queue(update, keys, vals)
		batch.Queue("COMMIT")
		return pool.SendBatch(ctx, batch).Close()
	}
	coll := boundCollection(t)
	w.bound = func(ctx context.Context, keys, vals []string, seq int64) error {
		return withUpdate(ctx, keys, vals, records, coll, keys, seq)
	}
	b.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DELETE FROM "+store.AppliedTable+" WHERE collection = $1", coll)
	})
	batches := t + "_batches"
	if _, err := pool.Exec(ctx, "CREATE TABLE "+batches+" (part int NOT NULL, batch bigint NOT NULL, ids text[] NOT NULL, seqs int8[] NOT NULL, PRIMARY KEY (part, batch))"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE "+batches) })
	insert := "INSERT INTO " + batches + " (part, batch, ids, seqs) VALUES (0, $1, $2, $3)"
	w.batchBound = func(ctx context.Context, keys, vals []string, batch int64) error {
		seqs := make([]int64, len(keys))
		for i := range seqs {
			seqs[i] = batch
		}
		return withUpdate(ctx, keys, vals, insert, batch, keys, seqs)
	}
}

// boundCollection names the applied records of the records bound of table
// t: a collection no sidecar serves.
func boundCollection(t string) string { return "drain-bound:" + t }

// directMySQL sets up up to conns connections (client-side interpolation,
// as the store's: one round trip per statement) and the two batched
// statements of MySQL: a multi-row upsert and an UPDATE picking each row's
// value with a CASE on the key (myUpdateCase).
func (w *drainWorld) directMySQL(b *testing.B, dsn string, conns int) {
	b.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.InterpolateParams = true
	db := myOpen(b, cfg, conns)
	t, k, f := w.spec.Table, ycsb.KeyColumn, ycsb.FieldName(0)
	w.direct = map[string]func(ctx context.Context, keys, vals []string) error{
		"upsert": func(ctx context.Context, keys, vals []string) error {
			q, args := multiRowInsert(t, k, f, keys, vals, func(int) string { return "?" })
			_, err := db.ExecContext(ctx, q+fmt.Sprintf(" ON DUPLICATE KEY UPDATE %s = VALUES(%s)", f, f), args...)
			return err
		},
		"update": func(ctx context.Context, keys, vals []string) error {
			var sb strings.Builder
			args := myUpdateCase(&sb, make([]any, 0, 2*len(keys)), t, k, f, keys, vals)
			_, err := db.ExecContext(ctx, sb.String(), args...)
			return err
		},
	}
	// The bound: one multi-statement packet, as the store's Apply sends.
	mcfg := cfg.Clone()
	mcfg.MultiStatements = true
	mdb := myOpen(b, mcfg, 1)
	coll := boundCollection(t)
	w.bound = func(ctx context.Context, keys, vals []string, seq int64) error {
		var sb strings.Builder
		args := make([]any, 0, 5*len(keys))
		sb.WriteString("START TRANSACTION; INSERT INTO " + store.AppliedTable + " (collection, id, part, seq) VALUES ")
		for i := range keys {
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString("(?, ?, 0, ?)")
			args = append(args, coll, keys[i], seq)
		}
		sb.WriteString(" ON DUPLICATE KEY UPDATE seq = IF(seq < VALUES(seq), VALUES(seq), seq); ")
		args = myUpdateCase(&sb, args, t, k, f, keys, vals)
		sb.WriteString("; COMMIT")
		_, err := mdb.ExecContext(ctx, sb.String(), args...)
		return err
	}
	b.Cleanup(func() {
		_, _ = mdb.ExecContext(context.Background(), "DELETE FROM "+store.AppliedTable+" WHERE collection = ?", coll)
	})
	batches := t + "_batches"
	if _, err := mdb.ExecContext(context.Background(), "CREATE TABLE "+batches+" (part INT NOT NULL, batch BIGINT NOT NULL, docs LONGTEXT NOT NULL, PRIMARY KEY (part, batch))"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = mdb.ExecContext(context.Background(), "DROP TABLE "+batches) })
	w.batchBound = func(ctx context.Context, keys, vals []string, batch int64) error {
		docs := make(map[string]int64, len(keys))
		for _, k := range keys {
			docs[k] = batch
		}
		js, err := json.Marshal(docs)
		if err != nil {
			return err
		}
		var sb strings.Builder
		args := make([]any, 0, 2+2*len(keys))
		sb.WriteString("START TRANSACTION; INSERT INTO " + batches + " (part, batch, docs) VALUES (0, ?, ?); ")
		args = append(args, batch, string(js))
		args = myUpdateCase(&sb, args, t, k, f, keys, vals)
		sb.WriteString("; COMMIT")
		_, err = mdb.ExecContext(ctx, sb.String(), args...)
		return err
	}
}

// myOpen opens a pool of at most conns connections with cfg, closed when
// b ends.
func myOpen(b *testing.B, cfg *mysql.Config, conns int) *sql.DB {
	b.Helper()
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		b.Fatal(err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	b.Cleanup(func() { db.Close() })
	return db
}

// myUpdateCase appends to sb MySQL's batched UPDATE of field f of the
// rows keyed k of table t, as the store's appliers send it (one CASE on
// the key picks each row's value), and returns args with the rows'
// arguments appended.
func myUpdateCase(sb *strings.Builder, args []any, t, k, f string, keys, vals []string) []any {
	fmt.Fprintf(sb, "UPDATE %s AS t SET t.%s = CASE t.%s", t, f, k)
	for i := range keys {
		sb.WriteString(" WHEN ? THEN ?")
		args = append(args, keys[i], vals[i])
	}
	fmt.Fprintf(sb, " END WHERE t.%s IN (", k)
	for i := range keys {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString("?")
		args = append(args, keys[i])
	}
	sb.WriteString(")")
	return args
}

// multiRowInsert is INSERT INTO t (k, f) VALUES (…), (…) … of the rows.
func multiRowInsert(t, k, f string, keys, vals []string, ph func(n int) string) (string, []any) {
	var sb strings.Builder
	args := make([]any, 0, 2*len(keys))
	fmt.Fprintf(&sb, "INSERT INTO %s (%s, %s) VALUES ", t, k, f)
	for i := range keys {
		if i > 0 {
			sb.WriteString(", ")
		}
		args = append(args, keys[i], vals[i])
		fmt.Fprintf(&sb, "(%s, %s)", ph(len(args)-1), ph(len(args)))
	}
	return sb.String(), args
}
