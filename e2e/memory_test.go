package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Reliability item 6: Redis's memory settings are checked after the start
// too. A pinnedMemoryLimit not clearly below maxmemory is warned about at
// start. When the sidecar reconnects to a server (a restart, a failover)
// whose policy could evict buffered writes, write-back collections fall
// back to write-through at once — a write is applied before it is
// acknowledged — and writeback_redis_eviction_unsafe says why.
func TestMemoryPolicyRechecked(t *testing.T) {
	e := newEnv(t, 4)
	rs := startPrivateRedis(t)
	rs.args = []string{"--maxmemory", "64mb"}
	rs.kill()
	rs.start()
	addr := freeAddr(t)
	sc := start(t, e.configOn(rs, addr, "write-back", ""), addr)
	ctx := context.Background()
	st, err := sc.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(st.Warnings, "\n"), "pinnedMemoryLimit") {
		t.Errorf("a 1 GiB pinnedMemoryLimit over a 64 MiB maxmemory was not warned about: %q", st.Warnings)
	}
	coll := e.coll("pg")
	if _, err := sc.c.Patch(ctx, coll, "1", map[string]any{"$set": map[string]any{"s": "before"}}); err != nil {
		t.Fatal(err)
	}
	if st, _ := sc.c.Status(ctx); st.Collections[0].WriteThroughFallback {
		t.Fatalf("fallback with a noeviction Redis: %+v", st.Collections)
	}

	// The server comes back with allkeys-lru.
	rs.kill()
	rs.args = []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}
	rs.start()
	var werr error
	for try := 0; try < 100; try++ {
		if _, werr = sc.c.Patch(ctx, coll, "2", map[string]any{"$set": map[string]any{"s": "reconnected"}}); werr == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if werr != nil {
		t.Fatalf("no write succeeded after the restart: %v\n%s", werr, sc.out())
	}
	waitFor(t, 5*time.Second, "the eviction policy to be noticed", func() bool {
		return metricValue(t, addr, "writeback_redis_eviction_unsafe") == 1
	})
	waitFor(t, 5*time.Second, "write-back collections to fall back to write-through", func() bool {
		st, err := sc.c.Status(ctx)
		return err == nil && st.Collections[0].WriteThroughFallback && st.Collections[1].WriteThroughFallback
	})
	// Acknowledged means applied now.
	if _, err := sc.c.Patch(ctx, coll, "3", map[string]any{"$set": map[string]any{"s": "through"}}); err != nil {
		t.Fatal(err)
	}
	if r := e.rows("pg")[3]; r.S.String != "through" {
		t.Errorf("a write acknowledged under an evicting Redis is not in the store: %+v", r)
	}
}
