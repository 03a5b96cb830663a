package benchmarks

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/benchmarks/bench"
	"github.com/writeback/writeback/benchmarks/sidecar"
	"github.com/writeback/writeback/benchmarks/ycsb"
)

// The benchmarks need the project's services (`make services`). Their
// addresses can be overridden with WRITEBACK_BENCH_REDIS and
// WRITEBACK_BENCH_PG_DSN.
var (
	redisAddr = envOr("WRITEBACK_BENCH_REDIS", "127.0.0.1:6379")
	pgDSN     = envOr("WRITEBACK_BENCH_PG_DSN", "postgres://postgres@127.0.0.1:5432/writeback?sslmode=disable")
)

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// spec is the table of the micro-benchmarks: 10k records of about 1 KB.
var spec = ycsb.Spec{Table: "bench_usertable", Records: 10_000, Fields: 10, FieldSize: 100}

// parallelism × GOMAXPROCS goroutines issue requests in every parallel
// benchmark, so that the database benchmarks are not starved of
// concurrency (8 on a 2-CPU machine, as many as the demo's clients).
const parallelism = 4

// world is what the benchmarks share, set up on first use by setup and
// torn down by TestMain: the loaded table and one sidecar per policy.
var world struct {
	once     sync.Once
	err      error
	db       *ycsb.DB
	mu       sync.Mutex // guards sidecars
	sidecars map[string]*sidecar.Sidecar
}

func TestMain(m *testing.M) {
	unhost, err := bench.HostSidecars()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	code := m.Run()
	unhost()
	if world.db != nil {
		ctx := context.Background()
		world.mu.Lock()
		for policy, sc := range world.sidecars {
			if err := sc.Close(); err != nil {
				fmt.Fprintf(os.Stderr, "stopping the %s sidecar: %v\n", policy, err)
			}
		}
		world.mu.Unlock()
		if err := world.db.Drop(ctx, spec.Table); err != nil {
			fmt.Fprintf(os.Stderr, "dropping %s: %v\n", spec.Table, err)
		}
		if err := sidecar.ForgetApplied(ctx, world.db, spec.Table); err != nil {
			fmt.Fprintf(os.Stderr, "deleting the applied records of %s: %v\n", spec.Table, err)
		}
		world.db.Close()
	}
	os.Exit(code)
}

// setup loads the table once per process. A missing service fails the
// benchmark with a message saying how to start it.
func setup(b *testing.B) *ycsb.DB {
	b.Helper()
	world.once.Do(func() {
		ctx := context.Background()
		db, err := ycsb.Open(ctx, ycsb.Postgres, pgDSN)
		if err != nil {
			world.err = err
			return
		}
		if err := db.Load(ctx, spec, 1, nil); err != nil {
			db.Close()
			world.err = err
			return
		}
		if err := sidecar.ForgetApplied(ctx, db, spec.Table); err != nil {
			db.Close()
			world.err = err
			return
		}
		world.db = db
		world.sidecars = map[string]*sidecar.Sidecar{}
	})
	if world.err != nil {
		b.Fatal(world.err)
	}
	return world.db
}

// sidecarFor returns the process's sidecar with the policy, starting it
// and reading every record through it once (so that every document is
// cached) on first use. The benchmark framework calls a benchmark several
// times with growing b.N; they all share it.
func sidecarFor(b *testing.B, policy string) *sidecar.Sidecar {
	b.Helper()
	setup(b)
	world.mu.Lock()
	defer world.mu.Unlock()
	if sc := world.sidecars[policy]; sc != nil {
		return sc
	}
	ctx := context.Background()
	sc, err := sidecar.Start(ctx, sidecar.Options{
		Policy: policy, Driver: ycsb.Postgres, DSN: pgDSN, RedisAddr: redisAddr,
		Collection: spec.Table, Key: ycsb.KeyColumn,
	})
	if err != nil {
		b.Fatal(err)
	}
	world.sidecars[policy] = sc
	// Warm the cache with 8 readers.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := sc.NewClient(spec.Fields)
			for rec := int64(g); rec < spec.Records; rec += 8 {
				if _, err := c.Read(ctx, ycsb.Key(rec), false); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatalf("warming the %s sidecar's cache: %v", policy, err)
	}
	return sc
}

// recorder collects the latencies of every goroutine of a benchmark.
type recorder struct {
	mu  sync.Mutex // guards all
	all []time.Duration
}

func (r *recorder) add(samples []time.Duration) {
	r.mu.Lock()
	r.all = append(r.all, samples...)
	r.mu.Unlock()
}

// report adds the p50 and p99 latency, in microseconds, to the
// benchmark's line.
func (r *recorder) report(b *testing.B) {
	slices.Sort(r.all)
	l := ycsb.Latencies(r.all)
	b.ReportMetric(float64(l.Percentile(50))/float64(time.Microsecond), "p50-us")
	b.ReportMetric(float64(l.Percentile(99))/float64(time.Microsecond), "p99-us")
}

// newRand returns a goroutine's own random source.
func newRand() *rand.Rand {
	return rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
}

// BenchmarkRedisGET is the floor of a cache hit: a raw go-redis GET of a
// 1 KB string, the size of one of the benchmark's documents.
func BenchmarkRedisGET(b *testing.B) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 64})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		b.Fatalf("cannot connect to Redis at %s (%v); start the services with `make services`", redisAddr, err)
	}
	var rnd [4]byte
	_, _ = crand.Read(rnd[:])
	key := "bench-raw-" + hex.EncodeToString(rnd[:])
	value := ycsb.RandomValue(newRand(), 1000)
	if err := rdb.Set(ctx, key, value, 0).Err(); err != nil {
		b.Fatal(err)
	}
	defer rdb.Del(ctx, key)
	var rec recorder
	b.SetParallelism(parallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		samples := make([]time.Duration, 0, 1024)
		for pb.Next() {
			start := time.Now()
			v, err := rdb.Get(ctx, key).Result()
			samples = append(samples, time.Since(start))
			if err != nil || len(v) != len(value) {
				b.Errorf("GET %s: %d bytes, %v", key, len(v), err)
				return
			}
		}
		rec.add(samples)
	})
	b.StopTimer()
	rec.report(b)
}

// BenchmarkSidecarHitGET reads cached documents through the sidecar's HTTP
// API with pkg/client: GET /v1/docs/bench_usertable/{key}, every one a hit.
// Compare its time per operation with BenchmarkRedisGET's.
func BenchmarkSidecarHitGET(b *testing.B) {
	sc := sidecarFor(b, "write-back")
	ctx := context.Background()
	var rec recorder
	b.SetParallelism(parallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := sc.NewClient(spec.Fields)
		r := newRand()
		samples := make([]time.Duration, 0, 1024)
		for pb.Next() {
			key := ycsb.Key(r.Int64N(spec.Records))
			start := time.Now()
			_, err := c.Read(ctx, key, false)
			samples = append(samples, time.Since(start))
			if err != nil {
				b.Errorf("GET %s: %v", key, err)
				return
			}
		}
		rec.add(samples)
	})
	b.StopTimer()
	rec.report(b)
}

// BenchmarkRoundTrip measures one request at a time — the round trip the
// core's target is stated in ("a cache-hit read through the sidecar ≤ 3× a
// raw Redis GET round trip") — side by side in one run: a raw GET of a
// 1 KB string, and a GET of a cached ~1 KB document through the sidecar.
func BenchmarkRoundTrip(b *testing.B) {
	ctx := context.Background()
	b.Run("redis-get", func(b *testing.B) {
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
		defer rdb.Close()
		key := "bench-rt-" + strconv.FormatUint(rand.Uint64(), 16)
		if err := rdb.Set(ctx, key, ycsb.RandomValue(newRand(), 1000), 0).Err(); err != nil {
			b.Fatalf("cannot write to Redis at %s (%v); start the services with `make services`", redisAddr, err)
		}
		defer rdb.Del(ctx, key)
		sequential(b, func() error { return rdb.Get(ctx, key).Err() })
	})
	b.Run("sidecar-hit", func(b *testing.B) {
		c := sidecarFor(b, "write-back").NewClient(spec.Fields)
		r := newRand()
		sequential(b, func() error {
			_, err := c.Read(ctx, ycsb.Key(r.Int64N(spec.Records)), false)
			return err
		})
	})
}

// sequential runs op b.N times, one at a time, and reports its p50 and p99.
func sequential(b *testing.B, op func() error) {
	var rec recorder
	samples := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		err := op()
		samples = append(samples, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	rec.add(samples)
	rec.report(b)
}

// BenchmarkUpdate sets one random field of a random record to a new
// 100-byte value: directly in PostgreSQL (UPDATE … WHERE ycsb_key = $2),
// and through the sidecar (PATCH {"$set":{…}}) under write-through, which
// acknowledges once PostgreSQL has committed, and write-back, which
// acknowledges once the change is buffered in Redis.
func BenchmarkUpdate(b *testing.B) {
	b.Run("database", func(b *testing.B) {
		db := setup(b)
		benchUpdates(b, func() (ycsb.Client, error) { return db.NewClient(context.Background(), spec) })
	})
	for _, policy := range []string{"write-through", "write-back"} {
		b.Run(policy, func(b *testing.B) {
			sc := sidecarFor(b, policy)
			benchUpdates(b, func() (ycsb.Client, error) { return sc.NewClient(spec.Fields), nil })
		})
	}
}

func benchUpdates(b *testing.B, newClient func() (ycsb.Client, error)) {
	ctx := context.Background()
	// One client per goroutine, connected before the clock starts.
	clients := make(chan ycsb.Client, parallelism*runtime.GOMAXPROCS(0))
	for range cap(clients) {
		c, err := newClient()
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		clients <- c
	}
	var rec recorder
	b.SetParallelism(parallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := <-clients
		r := newRand()
		samples := make([]time.Duration, 0, 1024)
		for pb.Next() {
			key := ycsb.Key(r.Int64N(spec.Records))
			field := r.IntN(spec.Fields)
			value := ycsb.RandomValue(r, spec.FieldSize)
			start := time.Now()
			err := c.Update(ctx, key, field, value)
			samples = append(samples, time.Since(start))
			if err != nil {
				b.Errorf("update %s: %v", key, err)
				return
			}
		}
		rec.add(samples)
	})
	b.StopTimer()
	rec.report(b)
}
