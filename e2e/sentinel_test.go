package e2e

import (
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// topology runs scripts/redis-topology.sh.
func topology(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("bash", append([]string{"../scripts/redis-topology.sh"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-topology.sh %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func sentinelPrimary(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("redis-cli", "-p", "26390", "sentinel", "get-master-addr-by-name", "wbmaster").Output()
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 {
		t.Fatalf("sentinel answered %q", out)
	}
	return f[1]
}

// Durability acceptance 1: under a running $inc workload (16 clients) with
// redis.replicas 2, the Redis primary is SIGKILLed; Sentinel promotes a
// replica and the sidecar follows it by itself. Writes that WAIT cannot
// confirm on 2 replicas fail with 503 (no silent downgrade) until the old
// primary is back as a replica; after a flush the database equals the
// model of acknowledged writes (failed requests may or may not have
// applied: the model allows both).
func TestSentinelFailover(t *testing.T) {
	topology(t, "sentinel", "up")
	t.Cleanup(func() { topology(t, "sentinel", "down") })
	const docs = 16
	e := newEnv(t, docs)
	addr := freeAddr(t)
	path := e.config(addr, "write-back", "")
	rewriteRedis(t, path, "  mode: sentinel\n  masterName: wbmaster\n  replicas: 2\n  addrs: [127.0.0.1:26390, 127.0.0.1:26391, 127.0.0.1:26392]")
	sc := start(t, path, addr)

	models := map[string][]*docModel{"pg": make([]*docModel, docs), "maria": make([]*docModel, docs)}
	for _, ms := range models {
		for i := range ms {
			ms[i] = &docModel{}
		}
	}
	for _, db := range []string{"pg", "maria"} {
		for i := range docs {
			models[db][i].sets = []setOp{{val: "init", acked: true}}
		}
	}
	var mu sync.Mutex // guards models, failures, lastFail, firstFail, okAfter
	var failures, acked int
	var firstFail, lastFail time.Time
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 5))
			for {
				select {
				case <-stop:
					return
				default:
				}
				db := []string{"pg", "maria"}[rng.IntN(2)]
				id := rng.IntN(docs)
				amt := rng.Int64N(1_000_000) + 1
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := sc.c.Patch(ctx, e.coll(db), strconv.Itoa(id+1), map[string]any{"$inc": map[string]any{"n": amt}})
				cancel()
				mu.Lock()
				m := models[db][id]
				if err == nil {
					acked++
					m.acked += amt
				} else {
					failures++
					if firstFail.IsZero() {
						firstFail = time.Now()
					}
					lastFail = time.Now()
					m.uncertain = append(m.uncertain, amt)
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(time.Second)
	mu.Lock()
	before := acked
	mu.Unlock()
	if before == 0 {
		t.Fatalf("no write was acknowledged with 2 replicas before the failover:\n%s", sc.out())
	}
	old := sentinelPrimary(t)
	pid, err := os.ReadFile("/tmp/writeback-redis/" + old + "/pid")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(pid)))
	killed := time.Now()
	if err := syscall.Kill(n, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "Sentinel to promote a replica", func() bool { return sentinelPrimary(t) != old })
	promoted := time.Now()
	time.Sleep(2 * time.Second)   // writes now reach only 1 replica: 503s, not silent acks
	topology(t, "sentinel", "up") // the old primary comes back and is made a replica
	back := time.Now()
	waitFor(t, 30*time.Second, "writes to be acknowledged again with 2 replicas", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return acked > before && !lastFail.IsZero() && time.Since(lastFail) > time.Second
	})
	close(stop)
	wg.Wait()
	sc.flush(t)
	t.Logf("primary killed; promoted after %v; writes failed from %v to %v after the kill (%d failed, %d acknowledged); old primary back as a replica %v after the kill",
		promoted.Sub(killed).Round(100*time.Millisecond), firstFail.Sub(killed).Round(100*time.Millisecond),
		lastFail.Sub(killed).Round(100*time.Millisecond), failures, acked, back.Sub(killed).Round(100*time.Millisecond))
	if failures == 0 {
		t.Errorf("no write failed while only 1 of the 2 required replicas was up: acknowledged without WAIT's confirmation")
	}
	for _, db := range []string{"pg", "maria"} {
		got := e.rows(db)
		for id, m := range models[db] {
			if err := m.check(got[int64(id+1)].N, "init"); err != nil {
				t.Errorf("%s row %d: %v", db, id+1, err)
			}
		}
	}
}

// rewriteRedis replaces the standalone redis section of a config file.
func rewriteRedis(t *testing.T, path, section string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(b), "  addrs: ["+"127.0.0.1:6379]", section, 1)
	if cfg == string(b) {
		t.Fatalf("could not rewrite the redis section of:\n%s", b)
	}
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Durability acceptance 2 (first half): the core's concurrency test on a
// local Redis Cluster of 3 primaries × 1 replica: every script's keys share
// their partition's hash tag, so each runs on one slot; the pipelines over
// partitions span the nodes.
func TestClusterConcurrentIncrements(t *testing.T) {
	topology(t, "cluster", "up")
	t.Cleanup(func() { topology(t, "cluster", "down") })
	const docs, clients, perClient = 20, 16, 100
	e := newEnv(t, docs)
	addr := freeAddr(t)
	path := e.config(addr, "write-back", "")
	// replicas: 1 — each write WAITs for its slot's replica, on the primary
	// that took it.
	rewriteRedis(t, path, "  mode: cluster\n  replicas: 1\n  addrs: [127.0.0.1:7000, 127.0.0.1:7001, 127.0.0.1:7002]")
	sc := start(t, path, addr)
	want := map[string]map[int]int64{"pg": {}, "maria": {}}
	var mu sync.Mutex // guards want
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 11))
			for range perClient {
				db := []string{"pg", "maria"}[rng.IntN(2)]
				id := rng.IntN(docs) + 1
				amt := rng.Int64N(9) + 1
				if _, err := sc.c.Patch(context.Background(), e.coll(db), strconv.Itoa(id), map[string]any{"$inc": map[string]any{"n": amt}}); err != nil {
					t.Errorf("patch: %v", err)
					return
				}
				mu.Lock()
				want[db][id] += amt
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sc.flush(t)
	for _, db := range []string{"pg", "maria"} {
		got := e.rows(db)
		for id := 1; id <= docs; id++ {
			if got[int64(id)].N != want[db][id] {
				t.Errorf("%s row %d: n = %d, want %d", db, id, got[int64(id)].N, want[db][id])
			}
		}
	}
	// Keys really are spread over the cluster's primaries.
	spread := 0
	for _, port := range []string{"7000", "7001", "7002"} {
		out, _ := exec.Command("redis-cli", "-p", port, "dbsize").Output()
		if n, _ := strconv.Atoi(strings.TrimSpace(string(out))); n > 0 {
			spread++
		}
	}
	if spread < 2 {
		t.Errorf("keys on %d of 3 primaries; the cluster was not exercised", spread)
	}
}

// Durability acceptance 2 (second half): on the Redis Cluster, under a
// running $inc workload, one primary is SIGKILLed; its replica takes over
// its slots and the sidecar follows (ClusterClient reloads the slot map).
// After a flush the database equals the model of acknowledged writes
// (failed requests may or may not have applied).
func TestClusterPrimaryKilled(t *testing.T) {
	topology(t, "cluster", "up")
	t.Cleanup(func() { topology(t, "cluster", "down") })
	const docs = 16
	e := newEnv(t, docs)
	addr := freeAddr(t)
	path := e.config(addr, "write-back", "")
	rewriteRedis(t, path, "  mode: cluster\n  addrs: [127.0.0.1:7000, 127.0.0.1:7001, 127.0.0.1:7002]")
	sc := start(t, path, addr)
	models := map[string][]*docModel{"pg": make([]*docModel, docs), "maria": make([]*docModel, docs)}
	for _, ms := range models {
		for i := range ms {
			ms[i] = &docModel{sets: []setOp{{val: "init", acked: true}}}
		}
	}
	var mu sync.Mutex // guards models, acked, failed, lastFail
	var acked, failed int
	var lastFail time.Time
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 17))
			for {
				select {
				case <-stop:
					return
				default:
				}
				db := []string{"pg", "maria"}[rng.IntN(2)]
				id := rng.IntN(docs)
				amt := rng.Int64N(1_000_000) + 1
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := sc.c.Patch(ctx, e.coll(db), strconv.Itoa(id+1), map[string]any{"$inc": map[string]any{"n": amt}})
				cancel()
				mu.Lock()
				if err == nil {
					acked++
					models[db][id].acked += amt
				} else {
					failed++
					lastFail = time.Now()
					models[db][id].uncertain = append(models[db][id].uncertain, amt)
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(time.Second)
	pid, err := os.ReadFile("/tmp/writeback-redis/7001/pid")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err := syscall.Kill(n, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	mu.Lock()
	before := acked
	mu.Unlock()
	waitFor(t, 30*time.Second, "writes to succeed again after the primary's replica took over", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return acked > before+200 && (lastFail.IsZero() || time.Since(lastFail) > time.Second)
	})
	close(stop)
	wg.Wait()
	sc.flush(t)
	window := time.Duration(0)
	if !lastFail.IsZero() {
		window = lastFail.Sub(killed)
	}
	t.Logf("cluster primary :7001 killed; %d writes failed, the last %v after the kill; %d acknowledged", failed, window.Round(100*time.Millisecond), acked)
	for _, db := range []string{"pg", "maria"} {
		got := e.rows(db)
		for id, m := range models[db] {
			if err := m.check(got[int64(id+1)].N, "init"); err != nil {
				t.Errorf("%s row %d: %v", db, id+1, err)
			}
		}
	}
}
