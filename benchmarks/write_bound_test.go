package benchmarks

import (
	"context"
	"math/rand/v2"
	"testing"

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
//	near       the front door (write-back, near cache, default lease),
//	           its appliers applying the writes to PostgreSQL meanwhile
//
// Reported: the medians of the throughputs and of the per-round ratios
// bound/postgres (the bound on A's ratio), near/bound and near/postgres
// (A's ratio). b.N is ignored.
func BenchmarkWriteBound(b *testing.B) {
	db, near, srv := boundSetup(b, true)
	ctx := context.Background()
	defer func() {
		// The bound's lists, one per record it wrote.
		keys, _ := respWorld.raw.Keys(ctx, srv.prefix+"bound:*").Result()
		for len(keys) > 0 {
			n := min(len(keys), 500)
			respWorld.raw.Del(ctx, keys[:n]...)
			keys = keys[n:]
		}
	}()
	boundc, nearc := respClient(srv.addr()), respClient(near.RespAddr())
	defer boundc.Close()
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
	vs := []respVariant{pg, {"bound", fifty(boundc, ""), true}, {"near", fifty(nearc, spec.Table+"/"), true}}

	boundRounds(b, vs, near, "bound/postgres", "near/bound", "near/postgres")
}
