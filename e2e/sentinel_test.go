package e2e

import (
	"context"
	"fmt"
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
	const docs = 16
	e, _, sc := sentinelSidecar(t, docs, 2)
	load := startIncLoad(e, sc, docs, 5)
	time.Sleep(time.Second)
	before := load.ackedCount()
	if before == 0 {
		t.Fatalf("no write was acknowledged with 2 replicas before the failover:\n%s", sc.out())
	}
	killed := killSentinelPrimary(t)
	promoted := time.Now()
	time.Sleep(2 * time.Second)   // writes now reach only 1 replica: 503s, not silent acks
	topology(t, "sentinel", "up") // the old primary comes back and is made a replica
	back := time.Now()
	waitFor(t, 30*time.Second, "writes to be acknowledged again with 2 replicas", func() bool { return load.recovered(before) })
	load.finish(t, sc)
	t.Logf("primary killed; promoted after %v; writes failed from %v to %v after the kill (%d failed, %d acknowledged); old primary back as a replica %v after the kill",
		promoted.Sub(killed).Round(100*time.Millisecond), load.firstFail.Sub(killed).Round(100*time.Millisecond),
		load.lastFail.Sub(killed).Round(100*time.Millisecond), load.failed, load.acked, back.Sub(killed).Round(100*time.Millisecond))
	if load.failed == 0 {
		t.Errorf("no write failed while only 1 of the 2 required replicas was up: acknowledged without WAIT's confirmation")
	}
}

// topologyUp brings redis-topology.sh's topology name ("sentinel" or
// "cluster") up, and down when the test ends.
func topologyUp(t *testing.T, name string) {
	t.Helper()
	topology(t, name, "up")
	t.Cleanup(func() { topology(t, name, "down") })
}

// topologySidecar brings the topology name up (down when the test ends)
// and starts a write-back sidecar on it, with the redis section section,
// over docs documents of both databases.
func topologySidecar(t *testing.T, name string, docs int, section string) (*env, string, *sidecar) {
	t.Helper()
	topologyUp(t, name)
	e := newEnv(t, docs)
	addr := freeAddr(t)
	path := e.config(addr, "write-back", "")
	rewriteRedis(t, path, section)
	return e, addr, start(t, path, addr)
}

// sentinelSidecar brings the Sentinel topology up (down when the test
// ends) and starts a write-back sidecar on it with redis.replicas, over
// docs documents of both databases.
func sentinelSidecar(t *testing.T, docs, replicas int) (*env, string, *sidecar) {
	t.Helper()
	return topologySidecar(t, "sentinel", docs,
		fmt.Sprintf("  mode: sentinel\n  masterName: wbmaster\n  replicas: %d\n  addrs: [127.0.0.1:26390, 127.0.0.1:26391, 127.0.0.1:26392]", replicas))
}

// clusterPrimaries are the addresses of the primaries of
// redis-topology.sh's Cluster, each with one replica.
var clusterPrimaries = []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}

// clusterRedis is the redis section of a sidecar on the Cluster with
// redis.replicas (left out when 0).
func clusterRedis(replicas int) string {
	section := "  mode: cluster\n"
	if replicas > 0 {
		section += fmt.Sprintf("  replicas: %d\n", replicas)
	}
	return section + "  addrs: [" + strings.Join(clusterPrimaries, ", ") + "]"
}

// clusterSidecar brings the Cluster topology up (down when the test ends)
// and starts a write-back sidecar on it with redis.replicas, over docs
// documents of both databases.
func clusterSidecar(t *testing.T, docs, replicas int) (*env, string, *sidecar) {
	t.Helper()
	return topologySidecar(t, "cluster", docs, clusterRedis(replicas))
}

// checkClusterSpread fails the test unless keys are on two or more of the
// Cluster's primaries: that the Cluster was exercised.
func checkClusterSpread(t *testing.T) {
	t.Helper()
	spread := 0
	for _, a := range clusterPrimaries {
		_, port, _ := strings.Cut(a, ":")
		out, _ := exec.Command("redis-cli", "-p", port, "dbsize").Output()
		if n, _ := strconv.Atoi(strings.TrimSpace(string(out))); n > 0 {
			spread++
		}
	}
	if spread < 2 {
		t.Errorf("keys on %d of %d primaries; the cluster was not exercised", spread, len(clusterPrimaries))
	}
}

// killRedis SIGKILLs the redis-server of redis-topology.sh on port.
func killRedis(t *testing.T, port string) {
	t.Helper()
	if err := syscall.Kill(redisPid(t, "127.0.0.1:"+port), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

// redisPid returns the process of the redis-topology.sh server at addr.
func redisPid(t *testing.T, addr string) int {
	t.Helper()
	_, port, _ := strings.Cut(addr, ":")
	b, err := os.ReadFile("/tmp/writeback-redis/" + port + "/pid")
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// killSentinelPrimary SIGKILLs the primary and waits for Sentinel to
// promote a replica; it returns when the kill was sent.
func killSentinelPrimary(t *testing.T) time.Time {
	t.Helper()
	old := sentinelPrimary(t)
	killRedis(t, old)
	killed := time.Now()
	waitFor(t, 30*time.Second, "Sentinel to promote a replica", func() bool { return sentinelPrimary(t) != old })
	return killed
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
	const docs, clients, perClient = 20, 16, 100
	// replicas: 1 — each write WAITs for its slot's replica, on the primary
	// that took it.
	e, _, sc := clusterSidecar(t, docs, 1)
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
	checkClusterSpread(t) // keys really are spread over the cluster's primaries
}

// Durability acceptance 2 (second half): on the Redis Cluster, under a
// running $inc workload, one primary is SIGKILLed; its replica takes over
// its slots and the sidecar follows (ClusterClient reloads the slot map).
// After a flush the database equals the model of acknowledged writes
// (failed requests may or may not have applied).
func TestClusterPrimaryKilled(t *testing.T) {
	const docs = 16
	e, _, sc := clusterSidecar(t, docs, 0)
	load := startIncLoad(e, sc, docs, 17)
	time.Sleep(time.Second)
	killRedis(t, "7001")
	killed := time.Now()
	before := load.ackedCount()
	waitFor(t, 30*time.Second, "writes to succeed again after the primary's replica took over", func() bool { return load.recovered(before + 200) })
	load.finish(t, sc)
	window := time.Duration(0)
	if !load.lastFail.IsZero() {
		window = load.lastFail.Sub(killed)
	}
	t.Logf("cluster primary :7001 killed; %d writes failed, the last %v after the kill; %d acknowledged", load.failed, window.Round(100*time.Millisecond), load.acked)
}

// incLoad is a running $inc workload: 16 clients incrementing n by random
// large amounts on docs documents of both databases, keeping the model of
// what was acknowledged and what failed (may or may not have applied).
type incLoad struct {
	e      *env
	models map[string][]*docModel
	stop   chan struct{}
	wg     sync.WaitGroup

	mu                  sync.Mutex // guards models, acked, failed, firstFail, lastFail
	acked, failed       int
	firstFail, lastFail time.Time
}

// The clients write through sc, or spread over sc and more.
func startIncLoad(e *env, sc *sidecar, docs int, seed uint64, more ...*sidecar) *incLoad {
	scs := append([]*sidecar{sc}, more...)
	l := &incLoad{e: e, stop: make(chan struct{}), models: map[string][]*docModel{}}
	for _, db := range []string{"pg", "maria"} {
		for range docs {
			l.models[db] = append(l.models[db], &docModel{sets: []setOp{{val: "init", acked: true}}})
		}
	}
	for c := range 16 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), seed))
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				db := []string{"pg", "maria"}[rng.IntN(2)]
				id := rng.IntN(docs)
				amt := rng.Int64N(1_000_000) + 1
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := scs[c%len(scs)].c.Patch(ctx, e.coll(db), strconv.Itoa(id+1), map[string]any{"$inc": map[string]any{"n": amt}})
				cancel()
				l.mu.Lock()
				m := l.models[db][id]
				if err == nil {
					l.acked++
					m.acked += amt
				} else {
					l.failed++
					if l.firstFail.IsZero() {
						l.firstFail = time.Now()
					}
					l.lastFail = time.Now()
					m.uncertain = append(m.uncertain, amt)
				}
				l.mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	return l
}

// ackedCount returns how many writes were acknowledged so far.
func (l *incLoad) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked
}

// recovered reports whether more than n writes were acknowledged and none
// failed for the last second.
func (l *incLoad) recovered(n int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acked > n && (l.lastFail.IsZero() || time.Since(l.lastFail) > time.Second)
}

// finish stops the clients, flushes, and checks both databases against
// the model.
func (l *incLoad) finish(t *testing.T, sc *sidecar) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	sc.flush(t)
	for _, db := range []string{"pg", "maria"} {
		got := l.e.rows(db)
		for id, m := range l.models[db] {
			if err := m.check(got[int64(id+1)].N, "init"); err != nil {
				t.Errorf("%s row %d: %v", db, id+1, err)
			}
		}
	}
}
