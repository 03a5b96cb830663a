package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/internal/testenv"
	"github.com/writeback/writeback/pkg/client"
)

func getDoc(t *testing.T, c *client.Client, coll, id string) map[string]any {
	t.Helper()
	raw, _, err := c.Get(context.Background(), coll, id)
	if err != nil {
		t.Fatalf("get %s/%s: %v", coll, id, err)
	}
	var d map[string]any
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// Write-through and write-around reach the store before the acknowledgement;
// write-through keeps the cache entry current, write-around drops it.
func TestSynchronousPolicies(t *testing.T) {
	for _, policy := range []string{"write-through", "write-around"} {
		t.Run(policy, func(t *testing.T) {
			e := newEnv(t, 3)
			addr := freeAddr(t)
			sc := start(t, e.config(addr, policy, ""), addr)
			ctx := context.Background()
			for _, db := range []string{"pg", "maria"} {
				coll := e.coll(db)
				getDoc(t, sc.c, coll, "1") // cache it
				if _, err := sc.c.Patch(ctx, coll, "1", map[string]any{"$inc": map[string]any{"n": 5}, "$set": map[string]any{"s": "x"}}); err != nil {
					t.Fatal(err)
				}
				if r := e.rows(db)[1]; r.N != 5 || r.S.String != "x" {
					t.Fatalf("%s: the store has n=%d s=%q right after the acknowledgement; want 5, x", db, r.N, r.S.String)
				}
				part := buffer.New(e.redis, e.prefix, 16, time.Second).Partition(coll, "1")
				key := fmt.Sprintf("%s:{%d}:c:%s:1", e.prefix, part, coll)
				cached := e.redis.HGet(ctx, key, "n").Val()
				switch policy {
				case "write-through":
					if cached != "5" {
						t.Errorf("%s: cache entry n = %q after write-through; want 5", db, cached)
					}
				case "write-around":
					if e.redis.Exists(ctx, key).Val() != 0 {
						t.Errorf("%s: cache entry still present after write-around", db)
					}
				}
				if d := getDoc(t, sc.c, coll, "1"); d["n"] != float64(5) {
					t.Errorf("%s: read n = %v, want 5", db, d["n"])
				}
				// PUT of a new document and DELETE are synchronous too.
				if _, err := sc.c.Put(ctx, coll, "10", map[string]any{"n": 1, "s": "new"}); err != nil {
					t.Fatal(err)
				}
				if _, err := sc.c.Delete(ctx, coll, "2"); err != nil {
					t.Fatal(err)
				}
				rows := e.rows(db)
				if rows[10].N != 1 || rows[10].S.String != "new" {
					t.Errorf("%s: put not in the store: %+v", db, rows[10])
				}
				if _, ok := rows[2]; ok {
					t.Errorf("%s: deleted row still in the store", db)
				}
			}
			st, err := sc.c.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Pending != 0 || st.PinnedBytes != 0 {
				t.Errorf("%s left %d changes pending, %d bytes pinned", policy, st.Pending, st.PinnedBytes)
			}
		})
	}
}

// A change the store rejects for good becomes a dead letter, visible in
// status and metrics, and never blocks the partition; under write-through
// the client gets the store's error as a 400.
func TestDeadLetters(t *testing.T) {
	e := newEnv(t, 4)
	for _, db := range e.dbs {
		e.exec(db, fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s_nonneg CHECK (n >= 0)", e.table, e.table))
	}
	addr := freeAddr(t)
	sc := start(t, e.config(addr, "write-back", ""), addr)
	ctx := context.Background()
	for _, db := range []string{"pg", "maria"} {
		coll := e.coll(db)
		if _, err := sc.c.Patch(ctx, coll, "1", map[string]any{"$inc": map[string]any{"n": -5}}); err != nil {
			t.Fatal(err) // only the store can tell: accepted
		}
		for id := 2; id <= 4; id++ {
			if _, err := sc.c.Patch(ctx, coll, strconv.Itoa(id), map[string]any{"$inc": map[string]any{"n": 7}}); err != nil {
				t.Fatal(err)
			}
		}
		// On document 3 a rejected change sits between two valid ones:
		// only it may become a dead letter.
		for _, ops := range []map[string]any{
			{"$inc": map[string]any{"n": -100}},
			{"$set": map[string]any{"s": "after"}},
		} {
			if _, err := sc.c.Patch(ctx, coll, "3", ops); err != nil {
				t.Fatal(err)
			}
		}
	}
	sc.flush(t) // drains: the bad changes are dead letters, the rest applied
	st, err := sc.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.DeadLetters != 4 || len(st.DeadLetterList) != 4 {
		t.Fatalf("dead letters: %d (%d listed); want 4: %+v", st.DeadLetters, len(st.DeadLetterList), st.DeadLetterList)
	}
	for _, dl := range st.DeadLetterList {
		if (dl.ID != "1" && dl.ID != "3") || dl.Error == "" || !strings.Contains(string(dl.Change), "$inc") {
			t.Errorf("dead letter %+v lacks the id, error or change", dl)
		}
		if strings.Contains(string(dl.Change), `"s"`) || strings.Contains(string(dl.Change), `"n":7`) {
			t.Errorf("a valid change was dead-lettered with the rejected one: %s", dl.Change)
		}
	}
	for _, db := range []string{"pg", "maria"} {
		rows := e.rows(db)
		if rows[1].N != 0 || rows[2].N != 7 || rows[4].N != 7 {
			t.Errorf("%s rows %+v: want the rejected change absent and the others applied", db, rows)
		}
		if rows[3].N != 7 || rows[3].S.String != "after" {
			t.Errorf("%s row 3 = %+v: want n=7 (the valid $inc before the rejected one) and s=after (the valid $set after it)", db, rows[3])
		}
		// The cache entry that contained the rejected change was dropped.
		if d := getDoc(t, sc.c, e.coll(db), "1"); d["n"] != float64(0) {
			t.Errorf("%s: read n = %v after the dead letter; want the store's 0", db, d["n"])
		}
	}
	waitFor(t, 5*time.Second, "the dead-letter gauge", func() bool {
		return metricValue(t, addr, "writeback_dead_letters") == 4
	})

	// Write-through: the store's verdict reaches the client.
	sc.stop()
	addr2 := freeAddr(t)
	wt := start(t, e.config(addr2, "write-through", ""), addr2)
	_, err = wt.c.Patch(ctx, e.coll("pg"), "3", map[string]any{"$inc": map[string]any{"n": -100}})
	if !errIs(err, http.StatusBadRequest) || !strings.Contains(err.Error(), "store rejected") {
		t.Fatalf("write-through of a change the store rejects: %v; want a 400 saying the store rejected it", err)
	}
	if d := getDoc(t, wt.c, e.coll("pg"), "3"); d["n"] != float64(7) {
		t.Errorf("read n = %v after a rejected write-through; want 7", d["n"])
	}
}

// Scans reflect buffered inserts, updates and deletes, in key order, both
// while they are pending and after they are applied.
func TestScanReflectsBufferedWrites(t *testing.T) {
	e := newEnv(t, 6)
	addr := freeAddr(t)
	sc := start(t, e.config(addr, "write-back", ""), addr)
	ctx := context.Background()
	for _, db := range []string{"pg", "maria"} {
		coll := e.coll(db)
		// The table's rows stay locked while the scans run "while
		// pending": the appliers' transactions wait, so the writes stay
		// buffered (a plain SELECT, the store's scan, takes no lock).
		lock, err := e.dbs[db].BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lock.ExecContext(ctx, "SELECT id FROM "+e.table+" FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		mustWrite(t)(sc.c.Delete(ctx, coll, "2"))
		mustWrite(t)(sc.c.Put(ctx, coll, "8", map[string]any{"n": 80, "s": "eight"}))
		mustWrite(t)(sc.c.Put(ctx, coll, "0", map[string]any{"n": 0, "s": "zero"}))
		mustWrite(t)(sc.c.Patch(ctx, coll, "4", map[string]any{"$set": map[string]any{"s": "four"}}))
		want := []string{"0:zero", "1:init", "3:init", "4:four", "5:init", "6:init", "8:eight"}
		check := func(when string) {
			docs, err := sc.c.Scan(ctx, coll, "", 100)
			if err != nil {
				t.Fatal(err)
			}
			if got := scanKeys(t, docs); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("%s scan %s: %v, want %v", db, when, got, want)
			}
			page, err := sc.c.Scan(ctx, coll, "3", 3)
			if err != nil {
				t.Fatal(err)
			}
			if got := scanKeys(t, page); strings.Join(got, " ") != "3:init 4:four 5:init" {
				t.Errorf("%s scan from 3 limit 3 %s: %v", db, when, got)
			}
			// Short pages whose rows a buffered delete or insert displaces:
			// the scan must fetch past its limit.
			for _, p := range []struct {
				from  string
				limit int
				want  string
			}{{"1", 2, "1:init 3:init"}, {"", 2, "0:zero 1:init"}, {"", 1, "0:zero"}, {"2", 1, "3:init"}} {
				page, err := sc.c.Scan(ctx, coll, p.from, p.limit)
				if err != nil {
					t.Fatal(err)
				}
				if got := scanKeys(t, page); strings.Join(got, " ") != p.want {
					t.Errorf("%s scan from %q limit %d %s: %v, want %s", db, p.from, p.limit, when, got, p.want)
				}
			}
		}
		check("while pending")
		if st, err := sc.c.Status(ctx); err != nil || st.Pending == 0 {
			t.Fatalf("status %+v, %v: the scans ran with nothing pending", st, err)
		}
		if err := lock.Rollback(); err != nil {
			t.Fatal(err)
		}
		sc.flush(t)
		check("after flush")
	}
}

func mustWrite(t *testing.T) func(int64, error) {
	t.Helper()
	return func(_ int64, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
}

func scanKeys(t *testing.T, docs []json.RawMessage) []string {
	t.Helper()
	var out []string
	for _, raw := range docs {
		var d struct {
			ID int64
			S  string
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d:%s", d.ID, d.S))
	}
	return out
}

// TestETagAuthAndMetrics covers conditional GETs, bearer auth and the
// metrics the API promises.
func TestETagAuthAndMetrics(t *testing.T) {
	e := newEnv(t, 2)
	addr := freeAddr(t)
	sc := start(t, e.config(addr, "write-back", "auth: {token: s3cret}\n"), addr)
	ctx := context.Background()
	if _, _, err := sc.c.Get(ctx, e.coll("pg"), "1"); !errIs(err, http.StatusUnauthorized) {
		t.Fatalf("GET without a token: %v; want 401", err)
	}
	c := client.New("http://"+addr, client.WithToken("s3cret"))
	raw, tag, err := c.Get(ctx, e.coll("pg"), "1")
	if err != nil || tag == "" {
		t.Fatalf("GET with the token: %v, etag %q", err, tag)
	}
	_, tag2, notModified, err := c.GetIfNoneMatch(ctx, e.coll("pg"), "1", tag)
	if err != nil || !notModified || tag2 != tag {
		t.Fatalf("conditional GET of an unchanged document: notModified=%v err=%v", notModified, err)
	}
	if _, err := c.Patch(ctx, e.coll("pg"), "1", map[string]any{"$inc": map[string]any{"n": 1}}); err != nil {
		t.Fatal(err)
	}
	raw2, _, notModified, err := c.GetIfNoneMatch(ctx, e.coll("pg"), "1", tag)
	if err != nil || notModified || string(raw2) == string(raw) {
		t.Fatalf("conditional GET after a change: notModified=%v err=%v body %s", notModified, err, raw2)
	}
	// Health endpoints need no token.
	if err := sc.c.Healthz(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{
		"writeback_requests_total", "writeback_request_duration_seconds", "writeback_cache_hits_total",
		"writeback_cache_misses_total", "writeback_buffered_changes_total", "writeback_pending_changes",
		"writeback_pinned_bytes", "writeback_oldest_pending_age_seconds", "writeback_apply_batch_size",
		"writeback_apply_duration_seconds", "writeback_duplicates_skipped_total", "writeback_dead_letters",
		"writeback_write_through_fallback",
	} {
		if !strings.Contains(string(body), "\n"+name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if !strings.Contains(string(body), `writeback_requests_total{code="401",op="get"} 1`) {
		t.Errorf("the rejected request is not counted with its code")
	}
}

// The sidecar refuses a Redis whose eviction policy could evict buffered
// writes, with one sentence saying how to fix it.
func TestRefusesEvictingRedis(t *testing.T) {
	e := newEnv(t, 1)
	redisAddr := testenv.PrivateRedis(t, "--maxmemory-policy", "allkeys-lru")
	addr := freeAddr(t)
	cfg := e.config(addr, "write-back", "")
	out, err := exec.Command(binary, "serve", "--config", cfg, "--redis-addrs", redisAddr).CombinedOutput()
	if err == nil {
		t.Fatal("serve started against an allkeys-lru Redis")
	}
	if !strings.Contains(string(out), "allkeys-lru") || !strings.Contains(string(out), "noeviction") {
		t.Errorf("serve's error does not name the policy and the fix:\n%s", out)
	}
}

// The dead-letter commands, through the CLI: list shows the rejected
// changes with the store's error; after the cause is fixed, replay buffers
// a change again and it is applied; drop removes one for good.
func TestDeadLetterCommands(t *testing.T) {
	e := newEnv(t, 3)
	db := e.dbs["pg"]
	e.exec(db, fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s_cap CHECK (n <= 10)", e.table, e.table))
	addr := freeAddr(t)
	sc := start(t, e.config(addr, "write-back", ""), addr)
	ctx := context.Background()
	coll := e.coll("pg")
	for _, id := range []string{"1", "2"} {
		mustWrite(t)(sc.c.Patch(ctx, coll, id, map[string]any{"$inc": map[string]any{"n": 50}}))
	}
	sc.flush(t)
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(binary, append(args, "--addr", "http://"+addr)...).CombinedOutput()
		if err != nil {
			t.Fatalf("writeback %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	list := cli("deadletters", "list")
	if strings.Count(list, coll) != 2 || !strings.Contains(list, "check") {
		t.Fatalf("deadletters list shows:\n%s", list)
	}
	dls, err := sc.c.DeadLetters(ctx, 10)
	if err != nil || len(dls) != 2 {
		t.Fatalf("dead letters: %v %v", dls, err)
	}
	var one, two client.DeadLetter
	for _, d := range dls {
		if d.ID == "1" {
			one = d
		} else {
			two = d
		}
	}
	if out := cli("deadletters", "drop", "--collection", coll, "--id", "2", "--seq", strconv.FormatInt(two.Seq, 10)); !strings.Contains(out, "dropped 1") {
		t.Errorf("drop: %s", out)
	}
	e.exec(db, fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT %s_cap", e.table, e.table)) // the cause, fixed
	if out := cli("deadletters", "replay", "--collection", coll, "--id", "1", "--seq", strconv.FormatInt(one.Seq, 10)); !strings.Contains(out, "replayed 1") {
		t.Errorf("replay: %s", out)
	}
	sc.flush(t)
	rows := e.rows("pg")
	if rows[1].N != 50 || rows[2].N != 0 {
		t.Errorf("after replaying 1 and dropping 2: n = %d, %d; want 50, 0", rows[1].N, rows[2].N)
	}
	if st, _ := sc.c.Status(ctx); st.DeadLetters != 0 {
		t.Errorf("%d dead letters left", st.DeadLetters)
	}
	if out := cli("deadletters", "list"); !strings.Contains(out, "no dead letters") {
		t.Errorf("list after: %s", out)
	}
}

// TestGCHeapFloor checks that `writeback serve` raises the collector's
// goal to gcHeapFloor (its live heap is far below the default 64 MiB, so
// the GC percentage goes above GOGC's 100), and that 0 leaves Go's
// collector as GOGC says.
func TestGCHeapFloor(t *testing.T) {
	e := newEnv(t, 1)
	for _, tc := range []struct {
		name string
		envs []string
		ok   func(percent float64) bool
		want string
	}{
		{"default floor", nil, func(p float64) bool { return p > 100 }, "above 100"},
		{"floor off", []string{"WRITEBACK_GC_HEAP_FLOOR=0"}, func(p float64) bool { return p == 100 }, "100"},
		{"floor off, GOGC=50", []string{"WRITEBACK_GC_HEAP_FLOOR=0", "GOGC=50"}, func(p float64) bool { return p == 50 }, "50"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := freeAddr(t)
			sc := start(t, e.config(addr, "write-back", ""), addr, tc.envs...)
			defer sc.stop()
			if p := metricValue(t, addr, "go_gc_gogc_percent"); !tc.ok(p) {
				t.Errorf("go_gc_gogc_percent = %v; want %s", p, tc.want)
			}
		})
	}
}
