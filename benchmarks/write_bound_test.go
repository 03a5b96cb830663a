package benchmarks

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/sidecar"
	"github.com/writeback/writeback/benchmarks/ycsb"
)

// The bound of YCSB A through the Redis-protocol front door (issue 18's
// "A ≥ 1.5× the database"), built as BenchmarkNearHitBound is for C: half
// the operations read a whole record, half set one field, one at a time
// per client, against
//
//	postgres   the database alone: YCSB's point read and one-field UPDATE
//	bound      mapServer with a buffer: reads answered from memory, each
//	           write one RPUSH to Redis before its answer — strictly less
//	           than any durable write-back front door can do per write
//	applied    bound, and its writes applied to PostgreSQL as well
//	           (boundApplier): strictly less than any write-back sidecar
//	           does, front door and appliers, on the same two CPUs
//	scripted   applied, each write made durable by a Lua script that
//	           does Design 1's least (boundWriteScript): a sequence, the
//	           change appended, the cache entry updated, the document
//	           pending — what a Lua write path costs before its checks
//	near       the front door (write-back, near cache, default lease),
//	           its appliers applying the writes to PostgreSQL meanwhile
//
// Reported: the medians of the throughputs and of the per-round ratios
// bound/postgres, applied/postgres and scripted/postgres (the bounds on
// A's ratio without and with the database's share of the writes, and with
// a Lua write path), near/scripted (how close the sidecar gets to its
// bound) and near/postgres (A's ratio); logged: each variant's CPU time
// per operation by process. b.N is ignored.
func BenchmarkWriteBound(b *testing.B) {
	db, near, srv := boundSetup(b, true)
	writeBound(b, db, near, srv, pgDSN, 0)
}

// remoteLatency and remoteThreads are issue 18's remote deployment: the
// store 1 ms away each way, 16 client threads.
const (
	remoteLatency = time.Millisecond
	remoteThreads = 16
)

// BenchmarkWriteBoundRemote is BenchmarkWriteBound with PostgreSQL behind
// an in-process latency proxy adding remoteLatency each way (toxiproxy, as
// ycsb --store-latency) and remoteThreads clients, Redis local: the bounds
// of issue 18's "A ≥ 5× the database alone with the database 1 ms away".
// Every variant's database traffic goes through the proxy — the clients'
// of postgres, the appliers' of applied and scripted, the front door's
// (its misses and its appliers) — and the proxy runs in this process, as
// in ycsb. b.N is ignored.
func BenchmarkWriteBoundRemote(b *testing.B) {
	setup(b)
	respSetup(b)
	ctx := context.Background()
	addr, err := bench.StoreAddr(ycsb.Postgres, pgDSN)
	if err != nil {
		b.Fatal(err)
	}
	// Closed after everything writeBound starts (b.Cleanup runs last in,
	// first out), whose database connections go through the proxy.
	proxy, err := bench.StartLatencyProxy(addr, remoteLatency)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(proxy.Close)
	dsn, err := bench.WithStoreAddr(ycsb.Postgres, pgDSN, proxy.Addr)
	if err != nil {
		b.Fatal(err)
	}
	db, err := ycsb.Open(ctx, ycsb.Postgres, dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	near, err := startNear(ctx, dsn, "bench-near-remote", 2*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := near.Close(); err != nil {
			b.Errorf("stopping the remote front door: %v", err)
		}
	})
	srv, err := startMapServer(ctx, respWorld.raw, respWorld.prefix+":", true)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.close)
	writeBound(b, db, near, srv, dsn, remoteThreads)
}

// writeBound measures BenchmarkWriteBound's variants against db, the
// front door near and the bare server srv, the bounds' appliers writing
// to the PostgreSQL of dsn, with threads clients per variant (0: the
// package's parallelism).
func writeBound(b *testing.B, db *ycsb.DB, near *sidecar.Sidecar, srv *mapServer, dsn string, threads int) {
	ctx := context.Background()
	applier := func(lists string, script bool) *mapServer {
		s, err := startMapServer(ctx, respWorld.raw, respWorld.prefix+":", true)
		if err != nil {
			b.Fatal(err)
		}
		s.lists, s.script = lists, script
		pending := ""
		if script {
			pending = respWorld.prefix + ":" + lists + "pending"
		}
		if s.apply, err = startBoundApplier(ctx, respWorld.raw, dsn, respWorld.prefix+":"+lists, pending); err != nil {
			s.close()
			b.Fatal(err)
		}
		b.Cleanup(s.close)
		return s
	}
	applied, scripted := applier("applied:", false), applier("scripted:", true)
	defer func() {
		// The bounds' keys: a list per record each wrote, the scripted
		// bound's entries, sequence and pending index.
		for _, lists := range []string{"bound:", "applied:", "scripted:"} {
			keys, _ := respWorld.raw.Keys(ctx, srv.prefix+lists+"*").Result()
			for len(keys) > 0 {
				n := min(len(keys), 500)
				respWorld.raw.Del(ctx, keys[:n]...)
				keys = keys[n:]
			}
		}
	}()
	boundc, appliedc, scriptedc, nearc := respClient(srv.addr()), respClient(applied.addr()), respClient(scripted.addr()), respClient(near.RespAddr())
	defer boundc.Close()
	defer appliedc.Close()
	defer scriptedc.Close()
	defer nearc.Close()
	fifty := func(c *redis.Client, prefix string) func(ctx context.Context, r *rand.Rand, n int) error {
		return func(ctx context.Context, r *rand.Rand, n int) error {
			k := prefix + randomKey(r)
			if r.IntN(2) == 0 {
				return c.HGetAll(ctx, k).Err()
			}
			return c.HSet(ctx, k, ycsb.FieldName(r.IntN(spec.Fields)), ycsb.RandomValue(r, spec.FieldSize)).Err()
		}
	}
	sqlcs := pgClients(b, db, threads)
	pg := respVariant{"postgres", func(ctx context.Context, r *rand.Rand, n int) error {
		c := <-sqlcs
		defer func() { sqlcs <- c }()
		if r.IntN(2) == 0 {
			_, err := c.Read(ctx, randomKey(r), true)
			return err
		}
		return c.Update(ctx, randomKey(r), r.IntN(spec.Fields), ycsb.RandomValue(r, spec.FieldSize))
	}, true}
	vs := []respVariant{pg, {"bound", fifty(boundc, ""), true}, {"applied", fifty(appliedc, ""), true},
		{"scripted", fifty(scriptedc, ""), true}, {"near", fifty(nearc, spec.Table+"/"), true}}

	boundRounds(b, vs, near, threads, "bound/postgres", "applied/postgres", "scripted/postgres", "near/scripted", "near/postgres")
	for _, s := range []*mapServer{applied, scripted} {
		batches, rows, writes, err := s.apply.stats()
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("the %s bound's batches: %d, %.1f records and %.1f writes each", strings.TrimSuffix(s.lists, ":"), batches,
			float64(rows)/float64(max(batches, 1)), float64(writes)/float64(max(batches, 1)))
	}
}

// boundWriteScript is the least a Lua write path of Design 1 does per
// write: the partition's next sequence number, the change appended to the
// document's buffered write with it, the cache entry updated, the document
// added to the pending index. KEYS: buffered write (list), cache entry
// (hash), sequence, pending index; ARGV: the change, then the field value
// pairs the entry takes.
var boundWriteScript = redis.NewScript(`
local seq = redis.call('INCR', KEYS[3])
redis.call('RPUSH', KEYS[1], seq .. '|' .. ARGV[1])
redis.call('HSET', KEYS[2], unpack(ARGV, 2))
redis.call('ZADD', KEYS[4], 'NX', seq, KEYS[1])
return seq
`)

// boundApplier is the least any write-back applier does for the writes
// the bound buffered: every boundEvery it takes the writes noted since
// its last batch, coalesced in memory by record (each field as its last
// write left it, as our appliers compact a document's changes), applies
// them to PostgreSQL in one statement, and trims what it applied from the
// records' lists in one Redis round trip. It keeps no sequence, no applied
// records and no pending index, and a crash loses its batch: a bound, not
// a product.
type boundApplier struct {
	conn    *pgx.Conn
	rdb     *redis.Client
	lists   string // the lists' names before the record's key
	pending string // the pending index the trim removes records from ("": none)
	update  string

	mu      sync.Mutex
	rows    map[string]*boundRow // the writes noted since the last batch, by record
	err     error                // the first batch that failed
	applied struct{ batches, rows, writes int }

	stop, done chan struct{}
}

// boundRow is a record's writes since the last batch: its fields' last
// values (nil: not written) and how many list elements they pushed.
type boundRow struct {
	fields []*string
	elems  int64
	writes int
}

// boundEvery is how often the bound applies: batches a few dozen writes
// at A's rates, more than our appliers usually find in one poll.
const boundEvery = 20 * time.Millisecond

func startBoundApplier(ctx context.Context, rdb *redis.Client, dsn, lists, pending string) (*boundApplier, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	// UPDATE … FROM unnest(keys, field0s, …): one statement per batch,
	// each record's unwritten fields NULL and left as they are.
	var set, cols, args []string
	for i := range spec.Fields {
		f := ycsb.FieldName(i)
		set = append(set, fmt.Sprintf("%s = COALESCE(v.%s, t.%s)", f, f, f))
		cols = append(cols, f)
		args = append(args, fmt.Sprintf("$%d::text[]", i+2))
	}
	a := &boundApplier{
		conn: conn, rdb: rdb, lists: lists, pending: pending, rows: map[string]*boundRow{},
		update: fmt.Sprintf("UPDATE %s AS t SET %s FROM unnest($1::text[], %s) AS v(k, %s) WHERE t.%s = v.k",
			spec.Table, strings.Join(set, ", "), strings.Join(args, ", "), strings.Join(cols, ", "), ycsb.KeyColumn),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	go a.run()
	return a, nil
}

// note records a write of record key buffered by the bound: HSET's field
// value pairs, which took elems elements of the record's list.
func (a *boundApplier) note(key string, pairs [][]byte, elems int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	row := a.rows[key]
	if row == nil {
		row = &boundRow{fields: make([]*string, spec.Fields)}
		a.rows[key] = row
	}
	for i := 0; i+1 < len(pairs); i += 2 {
		n, err := strconv.Atoi(strings.TrimPrefix(string(pairs[i]), "field"))
		if err != nil || n < 0 || n >= spec.Fields {
			continue // not a YCSB field: nothing to apply
		}
		v := string(pairs[i+1])
		row.fields[n] = &v
	}
	row.elems += elems
	row.writes++
}

func (a *boundApplier) run() {
	defer close(a.done)
	t := time.NewTicker(boundEvery)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
		}
		err := a.batch()
		a.mu.Lock()
		if a.err == nil {
			a.err = err
		}
		a.mu.Unlock()
	}
}

// batch applies and trims the writes noted since the last one.
func (a *boundApplier) batch() error {
	a.mu.Lock()
	rows := a.rows
	if len(rows) > 0 {
		a.rows = map[string]*boundRow{}
	}
	a.mu.Unlock()
	if len(rows) == 0 {
		return nil
	}
	ctx := context.Background()
	keys := make([]string, 0, len(rows))
	cols := make([][]*string, spec.Fields)
	writes := 0
	for k, r := range rows {
		keys = append(keys, k)
		for i, v := range r.fields {
			cols[i] = append(cols[i], v)
		}
		writes += r.writes
	}
	args := []any{keys}
	for _, c := range cols {
		args = append(args, c)
	}
	tag, err := a.conn.Exec(ctx, a.update, args...)
	if err != nil {
		return fmt.Errorf("the applied bound's UPDATE: %w", err)
	}
	if tag.RowsAffected() != int64(len(keys)) {
		return fmt.Errorf("the applied bound's UPDATE changed %d rows of %d", tag.RowsAffected(), len(keys))
	}
	pipe := a.rdb.Pipeline()
	for k, r := range rows {
		pipe.LTrim(ctx, a.lists+k, r.elems, -1)
		if a.pending != "" {
			pipe.ZRem(ctx, a.pending, a.lists+k)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("the applied bound's trim: %w", err)
	}
	a.mu.Lock()
	a.applied.batches, a.applied.rows, a.applied.writes = a.applied.batches+1, a.applied.rows+len(keys), a.applied.writes+writes
	a.mu.Unlock()
	return nil
}

// stats is what the applier applied so far, and the first batch's error
// if one failed.
func (a *boundApplier) stats() (batches, rows, writes int, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.applied.batches, a.applied.rows, a.applied.writes, a.err
}

func (a *boundApplier) close() {
	close(a.stop)
	<-a.done
	a.conn.Close(context.Background())
}
