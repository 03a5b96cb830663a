package e2e

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Acceptance 3: while writes are pending and appliers are mid-batch, and
// cache entries are deleted behind the sidecar's back (eviction), every read
// returns the latest acknowledged value.
//
// Each document has one writer that increments n by 1, so its value is a
// counter; a read that starts after k increments were acknowledged and ends
// before i were issued must return a value in [k, i] — the linearizability
// condition for a single-writer counter. Every read is checked, per key.
func TestReadAfterWriteUnderEviction(t *testing.T) {
	const docs = 8
	e := newEnv(t, docs)
	addr := freeAddr(t)
	sc := start(t, e.config(addr, "write-back", ""), addr)
	type counter struct{ issued, acked atomic.Int64 }
	counters := map[string][]*counter{}
	for _, db := range []string{"pg", "maria"} {
		for range docs {
			counters[db] = append(counters[db], &counter{})
		}
	}
	// The run lasts 6 s, longer if it has not checked 500 reads by then (a
	// machine busy with other tests), at most 30 s.
	var reads, misses atomic.Int64
	var violations atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		<-time.After(6 * time.Second)
		for ctx.Err() == nil && reads.Load() < 500 {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	var wg sync.WaitGroup
	for _, db := range []string{"pg", "maria"} {
		for i := range docs {
			c := counters[db][i]
			wg.Add(1)
			go func() { // the writer
				defer wg.Done()
				for ctx.Err() == nil {
					c.issued.Add(1)
					_, err := sc.c.Patch(context.Background(), e.coll(db), strconv.Itoa(i+1), map[string]any{"$inc": map[string]any{"n": 1}})
					if err != nil {
						t.Errorf("patch: %v", err)
						return
					}
					c.acked.Add(1)
				}
			}()
		}
	}
	for r := range 6 {
		wg.Add(1)
		go func() { // readers
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 3))
			for ctx.Err() == nil {
				db := []string{"pg", "maria"}[rng.IntN(2)]
				i := rng.IntN(docs)
				c := counters[db][i]
				lo := c.acked.Load()
				raw, _, err := sc.c.Get(context.Background(), e.coll(db), strconv.Itoa(i+1))
				hi := c.issued.Load()
				if err != nil {
					t.Errorf("get: %v", err)
					return
				}
				var doc struct{ N int64 }
				_ = json.Unmarshal(raw, &doc)
				reads.Add(1)
				if doc.N < lo || doc.N > hi {
					violations.Add(1)
					t.Errorf("%s doc %d: read n=%d, but %d increments were acknowledged before the read and %d issued by its end", db, i+1, doc.N, lo, hi)
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // the evictor: drops every cache entry, often
		defer wg.Done()
		for ctx.Err() == nil {
			for _, db := range []string{"pg", "maria"} {
				for i := range docs {
					if err := evict(e, e.coll(db), strconv.Itoa(i+1)); err != nil {
						t.Errorf("evict: %v", err)
						return
					}
				}
			}
			misses.Add(1)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	wg.Wait()
	if reads.Load() < 500 {
		t.Errorf("only %d reads checked", reads.Load())
	}
	applied := metricValue(t, sc.addr, `writeback_apply_batch_size_count`)
	t.Logf("%d reads checked, %d eviction rounds, %v batches applied meanwhile, %d violations", reads.Load(), misses.Load(), applied, violations.Load())
	if applied < 5 {
		t.Errorf("appliers applied only %v batches during the run; the test did not exercise reads racing appliers", applied)
	}
	sc.flush(t)
	for _, db := range []string{"pg", "maria"} {
		got := e.rows(db)
		for i, c := range counters[db] {
			if got[int64(i+1)].N != c.acked.Load() {
				t.Errorf("%s row %d: n = %d, want %d", db, i+1, got[int64(i+1)].N, c.acked.Load())
			}
		}
	}
}
