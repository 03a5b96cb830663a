package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/buffer"
	"github.com/writeback/writeback/pkg/client"
)

// The in-sync minimum per Cluster primary: with redis.replicas 1 on the
// Cluster of 3 primaries × 1 replica, one primary's replica is frozen
// (SIGSTOP: connected, never acknowledging). Once the sidecar has seen it
// fall out of sync, writes to documents whose partition that primary owns
// are refused at once — 503 unavailable, retry-safe, well within
// replicaTimeout, nothing buffered — while writes to the other primaries'
// documents are acknowledged; once the replica runs again, writes to the
// first primary are acknowledged again. After a flush the store holds
// every acknowledged increment and none of the refused ones.
func TestClusterInSyncPerPrimary(t *testing.T) {
	const docs = 24
	e, addr, sc := clusterSidecar(t, docs, 1)
	ctx := context.Background()
	coll := e.coll("pg")

	// Which primary owns each document's partition (its keys' hash tag).
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: clusterPrimaries})
	t.Cleanup(func() { cc.Close() })
	parts := buffer.New(nil, e.prefix, 16, time.Second)
	owner := map[int]string{} // document id → primary address
	for id := 1; id <= docs; id++ {
		node, err := cc.MasterForKey(ctx, fmt.Sprintf("%s:{%d}:seq", e.prefix, parts.Partition(coll, strconv.Itoa(id))))
		if err != nil {
			t.Fatal(err)
		}
		owner[id] = node.Options().Addr
	}
	victim := owner[1]
	var onVictim, elsewhere []int
	for id := 1; id <= docs; id++ {
		if owner[id] == victim {
			onVictim = append(onVictim, id)
		} else {
			elsewhere = append(elsewhere, id)
		}
	}
	if len(elsewhere) == 0 {
		t.Fatalf("every document's partition is on %s; the test needs some on the other primaries", victim)
	}

	waitFor(t, 15*time.Second, "writeback_redis_replicas_in_sync to read 1 (every primary's replica in sync)", func() bool {
		return metricValue(t, addr, "writeback_redis_replicas_in_sync") == 1
	})
	models := make([]*docModel, docs+1)
	rng := rand.New(rand.NewPCG(3, 41))
	inc := func(id int) (time.Duration, error) {
		amt := rng.Int64N(1_000_000) + 1
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		t0 := time.Now()
		_, err := sc.c.Patch(ctx, coll, strconv.Itoa(id), map[string]any{"$inc": map[string]any{"n": amt}})
		took := time.Since(t0)
		m := models[id]
		var ce *client.Error
		switch {
		case err == nil:
			m.acked += amt
		case errors.As(err, &ce) && ce.StatusCode == 503 && ce.Retry && strings.Contains(ce.Message, "replicas are in sync"):
			// Refused before anything was buffered: must never apply.
		default:
			m.uncertain = append(m.uncertain, amt)
		}
		return took, err
	}
	for id := 1; id <= docs; id++ {
		models[id] = &docModel{sets: []setOp{{val: "init", acked: true}}}
		if _, err := inc(id); err != nil {
			t.Fatalf("document %d with every replica in sync: %v", id, err)
		}
	}

	replica := clusterReplicaOf(t, victim)
	pid := redisPid(t, replica)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	resume := func() {
		if stopped {
			stopped = false
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("resuming the replica %s: %v", replica, err)
			}
		}
	}
	t.Cleanup(resume) // before the cluster goes down
	frozen := time.Now()
	waitFor(t, 20*time.Second, "writeback_redis_replicas_in_sync to read 0 (the least of any primary)", func() bool {
		return metricValue(t, addr, "writeback_redis_replicas_in_sync") == 0
	})
	t.Logf("replica %s of primary %s frozen; out of sync for the sidecar after %v", replica, victim, time.Since(frozen).Round(100*time.Millisecond))

	shortBefore := metricValue(t, addr, "writeback_replica_shortfalls_total")
	for round := range 3 {
		for _, id := range onVictim {
			took, err := inc(id)
			var ce *client.Error
			if !errors.As(err, &ce) || ce.StatusCode != 503 || ce.Code != client.CodeUnavailable || !ce.Retry ||
				!strings.Contains(ce.Message, "only 0 of the 1 required Redis replicas are in sync") {
				t.Errorf("round %d, document %d on %s (its replica frozen): %v; want 503 unavailable, retry-safe, naming the in-sync replicas", round, id, victim, err)
			}
			if took > time.Second {
				t.Errorf("round %d, document %d: refused after %v; a shortfall must answer at once, well within replicaTimeout (2 s)", round, id, took.Round(10*time.Millisecond))
			}
		}
		for _, id := range elsewhere {
			if _, err := inc(id); err != nil {
				t.Errorf("round %d, document %d on %s (replica in sync): %v; the other primaries must keep taking writes", round, id, owner[id], err)
			}
		}
	}
	if got := metricValue(t, addr, "writeback_replica_shortfalls_total") - shortBefore; got != float64(3*len(onVictim)) {
		t.Errorf("writeback_replica_shortfalls_total grew by %v, want %d (one per refused write)", got, 3*len(onVictim))
	}

	resume()
	waitFor(t, 30*time.Second, "writes to the primary whose replica is back to be acknowledged", func() bool {
		_, err := inc(onVictim[0])
		return err == nil
	})
	for _, id := range onVictim {
		if _, err := inc(id); err != nil {
			t.Errorf("document %d after the replica came back: %v", id, err)
		}
	}
	waitFor(t, 15*time.Second, "writeback_redis_replicas_in_sync to read 1 again", func() bool {
		return metricValue(t, addr, "writeback_redis_replicas_in_sync") == 1
	})

	sc.flush(t)
	rows := e.rows("pg")
	uncertain := 0
	for id := 1; id <= docs; id++ {
		uncertain += len(models[id].uncertain)
		if err := models[id].check(rows[int64(id)].N, "init"); err != nil {
			t.Errorf("document %d: %v", id, err)
		}
	}
	t.Logf("%d documents on %s, %d elsewhere; %d writes neither acknowledged nor refused", len(onVictim), victim, len(elsewhere), uncertain)
}

// clusterReplicaOf returns the address of primary's replica as the primary
// itself reports it (INFO replication: its replication link, which the
// test freezes), once the link is online. CLUSTER NODES can still show a
// freshly made Cluster's replicas as masters after their links are up.
func clusterReplicaOf(t *testing.T, primary string) string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: primary})
	defer c.Close()
	var info string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var err error
		if info, err = c.Info(context.Background(), "replication").Result(); err != nil {
			continue
		}
		for _, l := range strings.Split(info, "\n") {
			// slave0:ip=127.0.0.1,port=7004,state=online,offset=…,lag=0
			if !strings.HasPrefix(l, "slave0:") || !strings.Contains(l, "state=online") {
				continue
			}
			var ip, port string
			for _, kv := range strings.Split(strings.TrimSpace(strings.TrimPrefix(l, "slave0:")), ",") {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "ip":
					ip = v
				case "port":
					port = v
				}
			}
			if ip != "" && port != "" {
				return ip + ":" + port
			}
		}
	}
	t.Fatalf("no online replica of %s in its INFO replication within 15s:\n%s", primary, info)
	return ""
}
