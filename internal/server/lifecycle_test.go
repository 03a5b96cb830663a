package server_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/writeback/writeback/internal/config"
	"github.com/writeback/writeback/pkg/client"
)

// ownerKeys lists the partition ownership leases under the fixture's
// prefix, with their holders.
func (f *fixture) ownerKeys(t *testing.T) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := f.rdb.Keys(ctx, f.prefix+":{*}:owner").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		out[k] = f.rdb.Get(ctx, k).Val()
	}
	return out
}

// Run's end is graceful: the listener stops accepting at once, a request
// in flight (a write-through PUT waiting for a row lock) still gets its
// answer and its change is applied, then Run returns and the partitions
// and the sidecar's registration are released — not left to expire.
func TestGracefulShutdown(t *testing.T) {
	f := newFixture(t)
	cfg := f.config(t)
	r := run(t, cfg)
	id := cfg.Writeback.InstanceID
	poll(t, 5*time.Second, "the sidecar to own its 4 partitions", func() bool {
		owners := f.ownerKeys(t)
		for _, holder := range owners {
			if holder != id {
				return false
			}
		}
		return len(owners) == 4 && len(r.status(t).OwnedPartitions) == 4
	})

	tx, err := f.pg.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }() // for a test that fails before the release below
	if _, err := tx.Exec(fmt.Sprintf("SELECT 1 FROM %s_wt WHERE id = 1 FOR UPDATE", f.table)); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		code int
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("PUT", r.url+"/v1/docs/"+f.table+"_wt/1", strings.NewReader(`{"n":2,"s":"two"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		resp.Body.Close()
		answered <- answer{code: resp.StatusCode}
	}()
	poll(t, 10*time.Second, "the PUT to wait for the row lock", func() bool {
		var n int
		err := f.pg.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'", f.table+"_wt").Scan(&n)
		return err == nil && n > 0
	})

	r.cancel()
	addr := strings.TrimPrefix(r.url, "http://")
	poll(t, 5*time.Second, "the listener to refuse connections", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	select {
	case err := <-r.done:
		t.Fatalf("Run returned (%v) while a request was in flight", err)
	case a := <-answered:
		t.Fatalf("the in-flight PUT was answered (%d, %v) before its row lock was released", a.code, a.err)
	default:
	}
	if len(f.ownerKeys(t)) != 4 {
		t.Errorf("partitions were released while a request was in flight")
	}

	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-answered:
		if a.err != nil || a.code != http.StatusOK {
			t.Errorf("the in-flight PUT: %d %v; want 200", a.code, a.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the in-flight PUT got no answer within 10s of its lock's release")
	}
	r.stop(t)
	var n int64
	if err := f.pg.QueryRow(fmt.Sprintf("SELECT n FROM %s_wt WHERE id = 1", f.table)).Scan(&n); err != nil || n != 2 {
		t.Errorf("the store has n = %d (%v); want the in-flight write-through PUT's 2", n, err)
	}
	if owners := f.ownerKeys(t); len(owners) != 0 {
		t.Errorf("ownership leases left after Run returned: %v", owners)
	}
	if score, err := f.rdb.ZScore(context.Background(), f.prefix+":sidecars", id).Result(); err == nil {
		t.Errorf("the sidecar is still registered (expiry %v) after Run returned", score)
	}
}

// Above writeback.pinnedMemoryLimit, the server switches write-back
// collections (only them) to write-through, shown in /v1/status and
// writeback_write_through_fallback; a write then reaches the store before
// its answer. Once a flush drains the buffer below 80 % of the limit, it
// switches back.
func TestPinnedMemoryFallback(t *testing.T) {
	f := newFixture(t)
	cfg := f.config(t)
	cfg.Writeback.PinnedMemoryLimit = config.ByteSize(1024) // a small pending document pins about 370 bytes (buffer.PendingDocOverhead)
	r := run(t, cfg)
	fallback := func() map[string]bool {
		out := map[string]bool{}
		for _, c := range r.status(t).Collections {
			out[c.Name] = c.WriteThroughFallback
		}
		return out
	}
	inStore := func(id int) bool {
		var n int
		if err := f.pg.QueryRow(fmt.Sprintf("SELECT count(*) FROM %s WHERE id = $1", f.table), id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	put := func(id int, s string) {
		t.Helper()
		if code := r.call(t, "PUT", fmt.Sprintf("/v1/docs/%s/%d", f.table, id), fmt.Sprintf(`{"n":%d,"s":%q}`, id, s), nil); code != http.StatusOK {
			t.Fatalf("PUT %d: %d", id, code)
		}
	}

	put(2, "small")
	if inStore(2) || fallback()[f.table] {
		t.Fatal("below the limit a write-back PUT reached the store, or the fallback is on")
	}
	put(3, strings.Repeat("x", 512))
	poll(t, 5*time.Second, "the fallback to switch on", func() bool { return fallback()[f.table] })
	if fb := fallback(); fb[f.table+"_wt"] {
		t.Errorf("the fallback flag is set on the write-through collection: %v", fb)
	}
	if got := r.metric(t, `writeback_write_through_fallback{collection="`+f.table+`"}`); got != 1 {
		t.Errorf("writeback_write_through_fallback = %v in fallback; want 1", got)
	}
	put(4, "through")
	if !inStore(4) {
		t.Error("in fallback, a write-back PUT was answered before it reached the store")
	}

	var res client.FlushResult
	if code := r.call(t, "POST", "/v1/flush", "", &res); code != http.StatusOK || !res.Drained {
		t.Fatalf("flush: %d %+v", code, res)
	}
	poll(t, 5*time.Second, "the fallback to switch off", func() bool { return !fallback()[f.table] })
	if got := r.metric(t, `writeback_write_through_fallback{collection="`+f.table+`"}`); got != 0 {
		t.Errorf("writeback_write_through_fallback = %v after the drain; want 0", got)
	}
	put(5, "back")
	if inStore(5) {
		t.Error("after the fallback ended, a write-back PUT reached the store before a flush")
	}
}
