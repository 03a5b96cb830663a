package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// Two sidecars and an embedded member (pkg/writeback) share one Redis: a
// repeated scan is served from each one's scan cache, and an insert, a
// delete or a patch through any of them shows in the next scan of every
// other.
func TestScanCacheAcrossSidecars(t *testing.T) {
	nearOnly(t) // the scan cache runs with the near cache
	e := newEnv(t, 4)
	coll := e.coll("pg")
	addrA, addrB, addrM := freeAddr(t), freeAddr(t), freeAddr(t)
	cfg := e.config(addrA, "write-back", "")
	a := start(t, cfg, addrA, "WRITEBACK_NEAR_CACHE=on")
	b := start(t, e.config(addrB, "write-back", ""), addrB, "WRITEBACK_NEAR_CACHE=on")
	m := startEmbedded(t, cfg, addrM, e.prefix+"-embedded", false, false)
	ctx := context.Background()
	all := []*sidecar{a, b, m}
	hits := func(s *sidecar) float64 {
		return metricLine(t, s.addr, fmt.Sprintf(`writeback_scan_cache_hits_total{collection=%q}`, coll))
	}
	// expect scans twice on every member: the second scan is a hit.
	expect := func(when string, want ...string) {
		t.Helper()
		for i, s := range all {
			for try := range 2 {
				before := hits(s)
				docs, err := s.c.Scan(ctx, coll, "", 100)
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.Join(scanKeys(t, docs), " "); got != strings.Join(want, " ") {
					t.Fatalf("%s: member %d scan %d: %s; want %s", when, i, try, got, strings.Join(want, " "))
				}
				if try == 1 && hits(s) != before+1 {
					t.Fatalf("%s: member %d: the repeated scan was not a hit (hits %v → %v)", when, i, before, hits(s))
				}
			}
		}
	}
	expect("at first", "1:init", "2:init", "3:init", "4:init")
	mustWrite(t)(a.c.Put(ctx, coll, "9", map[string]any{"n": 9, "s": "nine"}))
	expect("after an insert", "1:init", "2:init", "3:init", "4:init", "9:nine")
	mustWrite(t)(m.c.Delete(ctx, coll, "2"))
	expect("after a delete", "1:init", "3:init", "4:init", "9:nine")
	mustWrite(t)(b.c.Patch(ctx, coll, "3", map[string]any{"$set": map[string]any{"s": "three"}}))
	expect("after a patch", "1:init", "3:three", "4:init", "9:nine")
	a.flush(t)
	expect("after a flush", "1:init", "3:three", "4:init", "9:nine")
}
