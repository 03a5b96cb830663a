package document_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/writeback/writeback/internal/document"
)

// A read that misses in Redis keeps the value it computed from the store
// as its near-cache copy (the fill leases it): the document's next read is
// a near-cache hit, with no Redis round trip, through Get and through
// GetMany alike. The copy is leased like any other: another sidecar's
// write revokes it before it takes effect, and the reader then reads the
// new value.
func TestNearCacheFillLeases(t *testing.T) {
	w := newScanWorld(t)
	ctx := context.Background()
	for name, sc := range map[string]*scanSidecar{"fill-a": w.a, "fill-b": w.b} {
		coll, err := sc.svc.Collection(w.coll)
		if err != nil {
			t.Fatal(err)
		}
		coll.ScanCache = false
		coll.Near = &document.NearCache{MaxBytes: 1 << 20, LeaseTTL: time.Minute}
		if err := sc.svc.StartNear(ctx, name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sc.svc.StopNear)
	}
	// Rows the cache has never seen: every first read misses in Redis.
	if _, err := w.db.Exec(fmt.Sprintf("INSERT INTO %s (id, s) VALUES (1, 'one'), (2, 'two'), (3, 'three')", w.coll)); err != nil {
		t.Fatal(err)
	}
	a := w.a
	redisMisses := func() float64 { return testutil.ToFloat64(a.m.CacheMisses.WithLabelValues(w.coll)) }
	nearHits := func() float64 { return testutil.ToFloat64(a.m.Near.Hits.WithLabelValues(w.coll)) }
	get := func(id string) string {
		t.Helper()
		d, err := a.svc.Get(ctx, w.coll, id)
		if err != nil {
			t.Fatalf("get %s: %v", id, err)
		}
		return string(d["s"])
	}
	getMany := func(ids ...string) []string {
		t.Helper()
		refs := make([]document.Ref, len(ids))
		for i, id := range ids {
			r, err := a.svc.Ref(w.coll, id)
			if err != nil {
				t.Fatal(err)
			}
			refs[i] = r
		}
		out := make([]string, len(ids))
		var mu sync.Mutex
		var wg sync.WaitGroup
		wg.Add(len(ids))
		a.svc.GetMany(ctx, refs, func(i int, h document.Hash, err error) {
			defer wg.Done()
			if err != nil {
				t.Errorf("get many: %s: %v", ids[i], err)
			}
			mu.Lock()
			out[i] = h["s"]
			mu.Unlock()
		})
		wg.Wait()
		return out
	}
	cached := func(id string) (string, bool) {
		t.Helper()
		r, err := a.svc.Ref(w.coll, id)
		if err != nil {
			t.Fatal(err)
		}
		e, ok := a.svc.Cached(r)
		if !ok {
			return "", false
		}
		return e.Hash["s"], true
	}

	// Get: the miss in Redis leaves the copy.
	if got := get("1"); got != `"one"` {
		t.Fatalf("first read of 1: %s", got)
	}
	if m := redisMisses(); m != 1 {
		t.Fatalf("%v Redis misses after the first read, want 1", m)
	}
	if s, ok := cached("1"); !ok || s != `"one"` {
		t.Fatalf("near cache holds %q (%v) after a read that missed in Redis; want the value read", s, ok)
	}
	hits0 := nearHits()
	if got := get("1"); got != `"one"` || nearHits() != hits0+1 || redisMisses() != 1 {
		t.Fatalf("second read of 1: %s, near-cache hits %v→%v, Redis misses %v; want a near-cache hit", got, hits0, nearHits(), redisMisses())
	}

	// GetMany: its misses too.
	if got := getMany("2", "3"); got[0] != `"two"` || got[1] != `"three"` {
		t.Fatalf("first multi-read: %v", got)
	}
	for _, id := range []string{"2", "3"} {
		if _, ok := cached(id); !ok {
			t.Fatalf("near cache holds no copy of %s after a multi-read that missed in Redis", id)
		}
	}

	// Another sidecar's write revokes the copy before it takes effect.
	start := time.Now()
	w.put(t, w.b, "1", "new")
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the write took %v: the holder of the fill's lease should have let go at once", d)
	}
	if s, ok := cached("1"); ok {
		t.Fatalf("near cache still holds %s after another sidecar's write", s)
	}
	if got := get("1"); got != `"new"` {
		t.Fatalf("read of 1 after another sidecar's write: %s, want \"new\"", got)
	}
}
