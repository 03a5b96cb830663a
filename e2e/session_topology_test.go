package e2e

import (
	"context"
	"testing"
	"time"
)

// The bank workload on a Redis Cluster of 3 primaries × 1 replica, with
// replicas: 1 (every commit WAITs for its slot's replica): a commit, a pop
// and a dead letter each run on their queue partition's slot; reads of
// other partitions validate on theirs.
func TestSessionCluster(t *testing.T) {
	topologyUp(t, "cluster")
	b := newBank(t, "pg", 6, 8, 1000)
	addr := freeAddr(t)
	path := b.config(addr, "", "")
	rewriteRedis(t, path, clusterRedis(1))
	sc := start(t, path, addr)
	waitFor(t, 15*time.Second, "writeback_redis_replicas_in_sync to read 1 (every primary's replica in sync)", func() bool {
		return metricValue(t, addr, "writeback_redis_replicas_in_sync") == 1
	})
	var st bankStats
	const minTransfers = 100
	model := bankRun(t, b, sc, 16, 5*time.Second, false, &st, minTransfers, 0)
	checkBank(t, b, sc, model)
	t.Logf("cluster: %d transfers committed, %d aborted and retried; %d audits consistent", st.transfers.Load(), st.aborts.Load(), st.audits.Load())
	if st.transfers.Load() < minTransfers {
		t.Errorf("only %d transfers", st.transfers.Load())
	}
	checkClusterSpread(t)
}

// Two sidecars split the queue partitions between them; when one is
// SIGKILLed, the other takes its partitions over once their ownership
// leases expire and applies the sessions committed through the dead one.
func TestSessionTwoSidecarsTakeOver(t *testing.T) {
	b := newBank(t, "maria", 8, 4, 1000)
	addrA, addrB := freeAddr(t), freeAddr(t)
	a := start(t, b.config(addrA, "", ""), addrA)
	bb := start(t, b.config(addrB, "", ""), addrB)
	owned := func(sc *sidecar) int {
		st, err := sc.c.Queues(context.Background())
		if err != nil {
			return -1
		}
		return len(st.OwnedPartitions)
	}
	waitFor(t, 15*time.Second, "the sidecars to split the 16 queue partitions", func() bool {
		na, nb := owned(a), owned(bb)
		return na > 0 && nb > 0 && na+nb == 16
	})
	// Stop the appliers' progress from hiding anything: commit through
	// both, then kill B while its queues still hold sessions.
	model := map[[2]int]int64{}
	for i := range 200 {
		sc := []*sidecar{a, bb}[i%2]
		br, from := i%b.branches, i%b.accounts
		to := (from + 1) % b.accounts
		b.blindTransfer(t, sc, br, from, to, 1)
		model[[2]int{br, from}]--
		model[[2]int{br, to}]++
	}
	bb.kill()
	killed := time.Now()
	for i := range 100 {
		br, from := i%b.branches, (i+1)%b.accounts
		to := (from + 2) % b.accounts
		b.blindTransfer(t, a, br, from, to, 2)
		model[[2]int{br, from}] -= 2
		model[[2]int{br, to}] += 2
	}
	waitFor(t, 15*time.Second, "the survivor to own all 16 queue partitions", func() bool { return owned(a) == 16 })
	took := time.Since(killed)
	// Its own appliers, not a flush, drain everything.
	waitFor(t, 15*time.Second, "the survivor's appliers to apply every session", func() bool {
		st, err := a.c.Queues(context.Background())
		return err == nil && st.PendingSessions == 0
	})
	t.Logf("the survivor owned all 16 queue partitions %v after the kill (owner lease 1.5s)", took.Round(10*time.Millisecond))
	checkBank(t, b, a, model)
}
