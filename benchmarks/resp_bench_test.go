package benchmarks

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/benchmarks/sidecar"
	"github.com/writeback/writeback/benchmarks/ycsb"
)

// The Redis-protocol benchmarks compare, on the benchmark table (10 000
// documents of 10 × 100-byte fields), three ways of reading a whole
// document and of setting one field:
//
//	redis  raw Redis: HGETALL / HSET of plain hashes of the same shape
//	resp   the sidecar's Redis-protocol front door: HGETALL / HSET of
//	       "bench_usertable/<key>", every read a cache hit, every write
//	       buffered write-back (replicas 0)
//	http   the sidecar's HTTP API: GET / PATCH {"$set":…} (no pipelining)
//
// and, for HSET only, two reference servers that do a fraction of the
// front door's work (resp_ceiling_test.go): proxy forwards each pipeline
// of HSETs to Redis as it is, skeleton as one script doing the two
// commands every buffered write needs.
//
// go-redis clients (RESP3) send pipelines of respPipeline commands from
// 4 × GOMAXPROCS goroutines, one connection each.

// respPipeline is the depth of every Redis-protocol pipeline.
const respPipeline = 64

var respWorld struct {
	once   sync.Once
	err    error
	sc     *sidecar.Sidecar // write-back, with the Redis-protocol front door
	raw    *redis.Client    // raw Redis
	prefix string           // of the raw hashes, which expire after rawTTL
}

// rawTTL is the lifetime of the raw hashes: they delete themselves.
const rawTTL = 15 * time.Minute

// respSetup starts the sidecar with its front door and loads the raw
// hashes, once per process; TestMain's clean-up stops the sidecar.
func respSetup(b *testing.B) {
	b.Helper()
	setup(b)
	respWorld.once.Do(func() {
		ctx := context.Background()
		sc, err := sidecar.Start(ctx, sidecar.Options{
			Policy: "write-back", Driver: ycsb.Postgres, DSN: pgDSN, RedisAddr: redisAddr,
			Collection: spec.Table, Key: ycsb.KeyColumn, PrefixBase: "bench-resp", ListenResp: "127.0.0.1:0",
		})
		if err != nil {
			respWorld.err = err
			return
		}
		world.mu.Lock()
		world.sidecars["resp"] = sc // closed by TestMain
		world.mu.Unlock()
		respWorld.sc = sc

		var rnd [4]byte
		_, _ = crand.Read(rnd[:])
		respWorld.prefix = "bench-raw-" + hex.EncodeToString(rnd[:])
		respWorld.raw = redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 64})
		r := newRand()
		pipe := respWorld.raw.Pipeline()
		for rec := int64(0); rec < spec.Records; rec++ {
			vals := make([]any, 0, 2*spec.Fields)
			for f := range spec.Fields {
				vals = append(vals, ycsb.FieldName(f), ycsb.RandomValue(r, spec.FieldSize))
			}
			key := respWorld.prefix + ":" + ycsb.Key(rec)
			pipe.HSet(ctx, key, vals...)
			pipe.Expire(ctx, key, rawTTL)
			if pipe.Len() == 500 || rec == spec.Records-1 {
				if _, err := pipe.Exec(ctx); err != nil {
					respWorld.err = fmt.Errorf("loading the raw hashes: %w", err)
					return
				}
			}
		}
		// Warm the sidecar's cache through the front door.
		respWorld.err = warmFrontDoor(ctx, sc)
	})
	if respWorld.err != nil {
		b.Fatal(respWorld.err)
	}
}

func respClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: 4 * parallelism * runtime.GOMAXPROCS(0), ReadTimeout: 30 * time.Second})
}

// clients is how many goroutines measure runs with threads: threads, or
// parallelism × GOMAXPROCS for 0.
func clients(threads int) int {
	if threads > 0 {
		return threads
	}
	return parallelism * runtime.GOMAXPROCS(0)
}

// respVariant is one of the ways to issue an operation: issue runs n
// operations on random records (pipelined where the variant can).
type respVariant struct {
	name  string
	issue func(ctx context.Context, r *rand.Rand, n int) error
	one   bool // one operation at a time, as YCSB's clients issue them
}

// perCall is how many operations a variant issues at once.
func (v respVariant) perCall() int {
	if v.name == "http" || v.one {
		return 1
	}
	return respPipeline
}

func randomKey(r *rand.Rand) string { return ycsb.Key(r.Int64N(spec.Records)) }

// respVariants builds the read or write variants over fresh clients.
func respVariants(b *testing.B, write bool) ([]respVariant, func()) {
	respSetup(b)
	sc := respWorld.sc
	side := respClient(sc.RespAddr())
	raw := respClient(redisAddr)
	httpc := sc.NewClient(spec.Fields)
	value := ycsb.RandomValue(newRand(), spec.FieldSize)
	pipelined := func(c *redis.Client, key func(string) string) func(ctx context.Context, r *rand.Rand, n int) error {
		return func(ctx context.Context, r *rand.Rand, n int) error {
			pipe := c.Pipeline()
			for range n {
				k := key(randomKey(r))
				if write {
					pipe.HSet(ctx, k, ycsb.FieldName(r.IntN(spec.Fields)), value)
				} else {
					pipe.HGetAll(ctx, k)
				}
			}
			cmds, err := pipe.Exec(ctx)
			if err != nil {
				return err
			}
			if !write {
				for _, c := range cmds {
					if m := c.(*redis.MapStringStringCmd).Val(); len(m) != spec.Fields {
						return fmt.Errorf("%s: %d fields, want %d", c.Args()[1], len(m), spec.Fields)
					}
				}
			}
			return nil
		}
	}
	vs := []respVariant{
		{name: "redis", issue: pipelined(raw, func(k string) string { return respWorld.prefix + ":" + k })},
		{name: "resp", issue: pipelined(side, func(k string) string { return spec.Table + "/" + k })},
		{"http", func(ctx context.Context, r *rand.Rand, n int) error {
			for range n {
				k := randomKey(r)
				var err error
				if write {
					err = httpc.Update(ctx, k, r.IntN(spec.Fields), value)
				} else {
					_, err = httpc.Read(ctx, k, false)
				}
				if err != nil {
					return err
				}
			}
			return nil
		}, false},
	}
	done := func() { side.Close(); raw.Close(); httpc.Close() }
	if !write {
		return vs, done
	}
	// The reference points for HSET (resp_ceiling_test.go), on the raw
	// hashes.
	proxy, err := startRefProxy(redisAddr, forwardHSET)
	if err != nil {
		b.Fatal(err)
	}
	skeleton, err := startRefProxy(redisAddr, skeletonHSET)
	if err != nil {
		b.Fatal(err)
	}
	proxyc, skeletonc := respClient(proxy.addr()), respClient(skeleton.addr())
	rawKey := func(k string) string { return respWorld.prefix + ":" + k }
	vs = append(vs,
		respVariant{name: "proxy", issue: pipelined(proxyc, rawKey)},
		respVariant{name: "skeleton", issue: pipelined(skeletonc, rawKey)})
	return vs, func() {
		done()
		proxyc.Close()
		skeletonc.Close()
		if err := errors.Join(proxy.close(""), skeleton.close(skeletonList+respWorld.prefix)); err != nil {
			b.Error(err)
		}
	}
}

// benchVariant runs b.N operations of v from parallelism × GOMAXPROCS
// goroutines and reports their throughput.
func benchVariant(b *testing.B, v respVariant) {
	ctx := context.Background()
	b.SetParallelism(parallelism)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		r := newRand()
		for {
			n := 0
			for n < v.perCall() && pb.Next() {
				n++
			}
			if n == 0 {
				return
			}
			if err := v.issue(ctx, r, n); err != nil {
				b.Errorf("%s: %v", v.name, err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}

// BenchmarkRESPHitRead reads whole documents: HGETALL (raw Redis and the
// front door, pipelined) and GET /v1/docs (HTTP), every read a hit.
func BenchmarkRESPHitRead(b *testing.B) {
	vs, done := respVariants(b, false)
	defer done()
	for _, v := range vs {
		b.Run(v.name, func(b *testing.B) { benchVariant(b, v) })
	}
}

// BenchmarkRESPWrite sets one field to a new 100-byte value: HSET (raw
// Redis and the front door, pipelined; write-back, replicas 0) and PATCH
// {"$set":…} (HTTP).
func BenchmarkRESPWrite(b *testing.B) {
	vs, done := respVariants(b, true)
	defer done()
	for _, v := range vs {
		b.Run(v.name, func(b *testing.B) { benchVariant(b, v) })
	}
}

// BenchmarkRESPSideBySide measures the three read variants, and then the
// five write variants, for a fixed time each, one after the other, over
// several rounds, and reports the median throughputs and the medians of the
// per-round ratios the front door is held to: hit reads ≥ 3× the HTTP API
// and ≥ 40 % of raw Redis, HSET ≥ 30 % of raw Redis (and, for reference,
// HSET against the HTTP API's PATCH, and the reference servers' HSET
// against raw Redis). The machine is shared, so ratios
// within a round, a few seconds apart, mean more than any single figure.
// b.N is ignored: one iteration is the whole measurement.
func BenchmarkRESPSideBySide(b *testing.B) {
	const rounds, window = 5, time.Second
	reads, doneR := respVariants(b, false)
	defer doneR()
	writes, doneW := respVariants(b, true)
	defer doneW()
	runs, ratios := map[string][]float64{}, map[string][]float64{}
	b.ResetTimer()
	// All the reads first: the writes leave the appliers busy for a while,
	// which would slow down whatever runs next.
	for range rounds {
		round := map[string]float64{}
		for _, v := range reads {
			round[v.name] = measure(b, v, window, 0)
			runs["read-"+v.name] = append(runs["read-"+v.name], round[v.name])
		}
		ratios["read-resp/http"] = append(ratios["read-resp/http"], round["resp"]/round["http"])
		ratios["read-resp/redis"] = append(ratios["read-resp/redis"], round["resp"]/round["redis"])
	}
	for range rounds {
		round := map[string]float64{}
		for _, v := range writes {
			round[v.name] = measure(b, v, window, 0)
			runs["hset-"+v.name] = append(runs["hset-"+v.name], round[v.name])
		}
		ratios["hset-resp/redis"] = append(ratios["hset-resp/redis"], round["resp"]/round["redis"])
		ratios["hset-proxy/redis"] = append(ratios["hset-proxy/redis"], round["proxy"]/round["redis"])
		ratios["hset-skeleton/redis"] = append(ratios["hset-skeleton/redis"], round["skeleton"]/round["redis"])
		ratios["hset-resp/http"] = append(ratios["hset-resp/http"], round["resp"]/round["http"])
	}
	b.StopTimer()
	median := func(xs []float64) float64 {
		xs = slices.Sorted(slices.Values(xs))
		return xs[len(xs)/2]
	}
	for k, xs := range runs {
		b.ReportMetric(median(xs), k+"-ops/s")
	}
	for k, xs := range ratios {
		b.ReportMetric(median(xs), k)
	}
	b.Logf("throughput per round: %v", runs)
	b.Logf("ratios per round: %v", ratios)
}

// measure runs v from threads goroutines (0: parallelism × GOMAXPROCS)
// for d and returns its throughput in operations per second.
func measure(b *testing.B, v respVariant, d time.Duration, threads int) float64 {
	ctx := context.Background()
	var ops atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	start := time.Now()
	for range clients(threads) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := newRand()
			n := v.perCall()
			for time.Now().Before(deadline) {
				if err := v.issue(ctx, r, n); err != nil {
					b.Errorf("%s: %v", v.name, err)
					return
				}
				ops.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	return float64(ops.Load()) / time.Since(start).Seconds()
}
