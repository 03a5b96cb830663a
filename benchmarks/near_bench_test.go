package benchmarks

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/benchmarks/sidecar"
	"github.com/writeback/writeback/benchmarks/ycsb"
	"github.com/writeback/writeback/internal/config"
)

// The near cache's hit, side by side: HGETALL of a whole document through
// the Redis-protocol front door of a sidecar whose near cache holds it (no
// Redis round trip, the reply memoized), against raw Redis's HGETALL of a
// plain hash of the same shape and the front door without a near cache
// (every read a Redis cache hit). Same clients and pipelines as
// resp_bench_test.go.

var nearWorld struct {
	mu  sync.Mutex                         // guards scs
	scs map[time.Duration]*sidecar.Sidecar // by lease
}

// startNear starts a write-back sidecar with the Redis-protocol front door
// and the near cache (leases of lease) over the PostgreSQL of dsn, and
// reads every document through it twice: the first read fills Redis if
// needed, the second takes the lease that the measured reads are served
// under. The caller closes it.
func startNear(ctx context.Context, dsn, prefix string, lease time.Duration) (*sidecar.Sidecar, error) {
	sc, err := sidecar.Start(ctx, sidecar.Options{
		Policy: "write-back", Driver: ycsb.Postgres, DSN: dsn, RedisAddr: redisAddr,
		Collection: spec.Table, Key: ycsb.KeyColumn, PrefixBase: prefix, ListenResp: "127.0.0.1:0",
		Configure: func(c *config.Config) {
			c.Writeback.NearCache = config.NearCacheOn
			coll := c.Collections[spec.Table]
			coll.NearCache.LeaseTTL = config.Duration{Duration: lease}
			c.Collections[spec.Table] = coll
		},
	})
	if err != nil {
		return nil, err
	}
	for range 2 {
		if err := warmFrontDoor(ctx, sc); err != nil {
			sc.Close()
			return nil, err
		}
	}
	return sc, nil
}

// nearSetup starts the near-cache sidecar over the benchmarks' PostgreSQL
// with leases of lease (startNear), once per process.
func nearSetup(b *testing.B, lease time.Duration) *sidecar.Sidecar {
	b.Helper()
	respSetup(b)
	nearWorld.mu.Lock()
	defer nearWorld.mu.Unlock()
	if sc := nearWorld.scs[lease]; sc != nil {
		return sc
	}
	sc, err := startNear(context.Background(), pgDSN, "bench-near", lease)
	if err != nil {
		b.Fatal(err)
	}
	world.mu.Lock()
	world.sidecars["near-"+lease.String()] = sc // closed by TestMain
	world.mu.Unlock()
	if nearWorld.scs == nil {
		nearWorld.scs = map[time.Duration]*sidecar.Sidecar{}
	}
	nearWorld.scs[lease] = sc
	return sc
}

// reportMedians reports the medians of each variant's throughputs per round
// (<name>-ops/s) and of each ratio per round.
func reportMedians(b *testing.B, runs, ratios map[string][]float64) {
	median := func(xs []float64) float64 { return slices.Sorted(slices.Values(xs))[len(xs)/2] }
	for k, xs := range runs {
		b.ReportMetric(median(xs), k+"-ops/s")
	}
	for k, xs := range ratios {
		b.ReportMetric(median(xs), k)
	}
}

// warmFrontDoor reads every document through sc's Redis-protocol front door,
// in pipelines: every one is then cached (and, with a near cache, leased).
func warmFrontDoor(ctx context.Context, sc *sidecar.Sidecar) error {
	c := respClient(sc.RespAddr())
	defer c.Close()
	for lo := int64(0); lo < spec.Records; lo += 500 {
		pipe := c.Pipeline()
		for rec := lo; rec < min(lo+500, spec.Records); rec++ {
			pipe.HGetAll(ctx, spec.Table+"/"+ycsb.Key(rec))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("warming the cache through the front door: %w", err)
		}
	}
	return nil
}

// BenchmarkNearHitSideBySide measures, in rounds of one second each, raw
// Redis's HGETALL (redis), the front door's with the near cache (near:
// lease 30 s, every read a near-cache hit; near-2s: the default lease,
// where a document is leased again from Redis once per lease, in the
// background, while it is being read) and without it (resp), and reports the medians of the throughputs and of the
// per-round ratios to raw Redis (the target: near ≥ 0.8× raw Redis). b.N is
// ignored.
func BenchmarkNearHitSideBySide(b *testing.B) { nearSideBySide(b, false) }

// BenchmarkNearHitOneAtATime is BenchmarkNearHitSideBySide with every
// client issuing one HGETALL at a time (no pipelining), as YCSB's do:
// latency, not Redis's or the sidecar's throughput, bounds it.
func BenchmarkNearHitOneAtATime(b *testing.B) { nearSideBySide(b, true) }

func nearSideBySide(b *testing.B, one bool) {
	const rounds, window = 5, time.Second
	long, short := nearSetup(b, 30*time.Second), nearSetup(b, 2*time.Second)
	vs, done := respVariants(b, false)
	defer done()
	var redisV, respV respVariant
	for _, v := range vs {
		switch v.name {
		case "redis":
			redisV = v
		case "resp":
			respV = v
		}
	}
	nearV := func(name string, sc *sidecar.Sidecar) (respVariant, func()) {
		c := respClient(sc.RespAddr())
		return respVariant{name, func(ctx context.Context, r *rand.Rand, n int) error {
			pipe := c.Pipeline()
			for range n {
				pipe.HGetAll(ctx, spec.Table+"/"+randomKey(r))
			}
			cmds, err := pipe.Exec(ctx)
			if err != nil {
				return err
			}
			for _, cmd := range cmds {
				if m := cmd.(*redis.MapStringStringCmd).Val(); len(m) != spec.Fields {
					return fmt.Errorf("%s: %d fields, want %d", cmd.Args()[1], len(m), spec.Fields)
				}
			}
			return nil
		}, one}, func() { c.Close() }
	}
	near30, close30 := nearV("near", long)
	defer close30()
	near2, close2 := nearV("near-2s", short)
	defer close2()
	redisV.one, respV.one = one, one
	runs, ratios := map[string][]float64{}, map[string][]float64{}
	b.ResetTimer()
	for range rounds {
		round := map[string]float64{}
		for _, v := range []respVariant{redisV, near30, near2, respV} {
			if v.name == "near-2s" {
				// The other variants' windows are longer than its lease:
				// its copies lapsed meanwhile, as those of documents
				// nobody reads should. Read every document once first,
				// as a workload that never paused would have.
				if err := warmFrontDoor(context.Background(), short); err != nil {
					b.Fatal(err)
				}
			}
			round[v.name] = measure(b, v, window, 0)
			runs[v.name] = append(runs[v.name], round[v.name])
		}
		for _, n := range []string{"near", "near-2s", "resp"} {
			ratios[n+"/redis"] = append(ratios[n+"/redis"], round[n]/round["redis"])
		}
	}
	b.StopTimer()
	reportMedians(b, runs, ratios)
	hits, _, _ := long.Metric("writeback_nearcache_hits_total")
	misses, _, _ := long.Metric("writeback_nearcache_misses_total")
	hits2, _, _ := short.Metric("writeback_nearcache_hits_total")
	misses2, _, _ := short.Metric("writeback_nearcache_misses_total")
	b.Logf("throughput per round: %v", runs)
	b.Logf("ratios per round: %v", ratios)
	b.Logf("near-cache hits/misses: lease 30s %.0f/%.0f, lease 2s %.0f/%.0f", hits, misses, hits2, misses2)
}
