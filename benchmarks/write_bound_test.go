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
//	near       the front door (write-back, near cache, default lease),
//	           its appliers applying the writes to PostgreSQL meanwhile
//
// Reported: the medians of the throughputs and of the per-round ratios
// bound/postgres and applied/postgres (the bounds on A's ratio without and
// with the database's share of the writes), near/applied (how close the
// sidecar gets to its bound) and near/postgres (A's ratio). b.N is
// ignored.
func BenchmarkWriteBound(b *testing.B) {
	db, near, srv := boundSetup(b, true)
	ctx := context.Background()
	applied, err := startMapServer(ctx, respWorld.raw, respWorld.prefix+":", true)
	if err != nil {
		b.Fatal(err)
	}
	applied.lists = "applied:"
	if applied.apply, err = startBoundApplier(ctx, respWorld.raw, respWorld.prefix+":applied:"); err != nil {
		applied.close()
		b.Fatal(err)
	}
	b.Cleanup(applied.close)
	defer func() {
		// The bounds' lists, one per record each wrote.
		for _, lists := range []string{"bound:", "applied:"} {
			keys, _ := respWorld.raw.Keys(ctx, srv.prefix+lists+"*").Result()
			for len(keys) > 0 {
				n := min(len(keys), 500)
				respWorld.raw.Del(ctx, keys[:n]...)
				keys = keys[n:]
			}
		}
	}()
	boundc, appliedc, nearc := respClient(srv.addr()), respClient(applied.addr()), respClient(near.RespAddr())
	defer boundc.Close()
	defer appliedc.Close()
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
	sqlcs := pgClients(b, db)
	pg := respVariant{"postgres", func(ctx context.Context, r *rand.Rand, n int) error {
		c := <-sqlcs
		defer func() { sqlcs <- c }()
		if r.IntN(2) == 0 {
			_, err := c.Read(ctx, randomKey(r), true)
			return err
		}
		return c.Update(ctx, randomKey(r), r.IntN(spec.Fields), ycsb.RandomValue(r, spec.FieldSize))
	}, true}
	vs := []respVariant{pg, {"bound", fifty(boundc, ""), true}, {"applied", fifty(appliedc, ""), true}, {"near", fifty(nearc, spec.Table+"/"), true}}

	boundRounds(b, vs, near, "bound/postgres", "applied/postgres", "near/applied", "near/postgres")
	batches, rows, writes, err := applied.apply.stats()
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("the applied bound's batches: %d, %.1f records and %.1f writes each", batches, float64(rows)/float64(max(batches, 1)), float64(writes)/float64(max(batches, 1)))
}

// boundApplier is the least any write-back applier does for the writes
// the bound buffered: every boundEvery it takes the writes noted since
// its last batch, coalesced in memory by record (each field as its last
// write left it, as our appliers compact a document's changes), applies
// them to PostgreSQL in one statement, and trims what it applied from the
// records' lists in one Redis round trip. It keeps no sequence, no applied
// records and no pending index, and a crash loses its batch: a bound, not
// a product.
type boundApplier struct {
	conn   *pgx.Conn
	rdb    *redis.Client
	lists  string // the lists' names before the record's key
	update string

	mu                    sync.Mutex
	pending               map[string]*boundRow
	err                   error // the first batch that failed
	batches, rows, writes int   // applied, for the log

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

func startBoundApplier(ctx context.Context, rdb *redis.Client, lists string) (*boundApplier, error) {
	conn, err := pgx.Connect(ctx, pgDSN)
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
		conn: conn, rdb: rdb, lists: lists, pending: map[string]*boundRow{},
		update: fmt.Sprintf("UPDATE %s AS t SET %s FROM unnest($1::text[], %s) AS v(k, %s) WHERE t.%s = v.k",
			spec.Table, strings.Join(set, ", "), strings.Join(args, ", "), strings.Join(cols, ", "), ycsb.KeyColumn),
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	go a.run()
	return a, nil
}

// note records a write of record key buffered by the bound: HSET's field
// value pairs.
func (a *boundApplier) note(key string, pairs [][]byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	row := a.pending[key]
	if row == nil {
		row = &boundRow{fields: make([]*string, spec.Fields)}
		a.pending[key] = row
	}
	for i := 0; i+1 < len(pairs); i += 2 {
		n, err := strconv.Atoi(strings.TrimPrefix(string(pairs[i]), "field"))
		if err != nil || n < 0 || n >= spec.Fields {
			continue // not a YCSB field: nothing to apply
		}
		v := string(pairs[i+1])
		row.fields[n] = &v
	}
	row.elems += int64(len(pairs))
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
	rows := a.pending
	if len(rows) > 0 {
		a.pending = map[string]*boundRow{}
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
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("the applied bound's trim: %w", err)
	}
	a.mu.Lock()
	a.batches, a.rows, a.writes = a.batches+1, a.rows+len(keys), a.writes+writes
	a.mu.Unlock()
	return nil
}

// stats is what the applier applied so far, and the first batch's error
// if one failed.
func (a *boundApplier) stats() (batches, rows, writes int, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.batches, a.rows, a.writes, a.err
}

func (a *boundApplier) close() {
	close(a.stop)
	<-a.done
	a.conn.Close(context.Background())
}
