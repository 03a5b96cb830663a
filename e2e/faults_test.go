package e2e

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The fault suite's outages under load, each checked against the model of
// acknowledged writes (incLoad: failed requests may or may not have
// applied, acknowledged ones must all be there exactly once).

// A standalone Redis (AOF, fsync always) SIGKILLed for 3 s under load and
// restarted from its AOF: writes fail while it is down — the sidecar stays
// up and healthy — and resume by themselves; nothing acknowledged is lost.
func TestRedisOutageUnderLoad(t *testing.T) {
	const docs = 16
	e := newEnv(t, docs)
	rs := startPrivateRedis(t)
	rs.args = []string{"--appendonly", "yes", "--appendfsync", "always"}
	rs.kill()
	rs.start()
	addr := freeAddr(t)
	sc := start(t, e.configOn(rs, addr, "write-back", ""), addr)
	load := startIncLoad(e, sc, docs, 31)
	time.Sleep(time.Second)
	rs.kill()
	down := time.Now()
	time.Sleep(3 * time.Second)
	if sc.exited() {
		t.Fatalf("the sidecar exited while Redis was down:\n%s", sc.out())
	}
	rs.start()
	before := load.ackedCount()
	waitFor(t, 30*time.Second, "writes to be acknowledged again after Redis returned", func() bool { return load.recovered(before + 200) })
	load.finish(t, sc)
	t.Logf("Redis down for %v: %d writes failed, the last %v after the kill; %d acknowledged",
		3*time.Second, load.failed, load.lastFail.Sub(down).Round(100*time.Millisecond), load.acked)
}

// MariaDB away for 15 s under load (its connections cut by a proxy):
// writes to cached documents keep being acknowledged, the appliers back
// off and resume, nothing is dead-lettered or lost. (PostgreSQL's outage
// is TestStoreOutageLosesNothing.)
func TestMariaDBOutageUnderLoad(t *testing.T) {
	const docs = 16
	e := newEnv(t, docs)
	px := e.proxyStore("maria")
	addr := freeAddr(t)
	sc := start(t, e.config(addr, "write-back", ""), addr)
	ctx := context.Background()
	for _, db := range []string{"pg", "maria"} {
		for id := 1; id <= docs; id++ {
			getDoc(t, sc.c, e.coll(db), strconv.Itoa(id)) // cached: writes need no store read
		}
	}
	load := startIncLoad(e, sc, docs, 37)
	time.Sleep(time.Second)
	px.cut()
	waitFor(t, 10*time.Second, "/readyz to report MariaDB down", func() bool { return sc.c.Readyz(ctx) != nil })
	failedBefore := func() int { load.mu.Lock(); defer load.mu.Unlock(); return load.failed }()
	time.Sleep(15 * time.Second)
	ackedDuring := load.ackedCount()
	px.restore(t)
	st, err := sc.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending == 0 {
		t.Error("nothing pending after 15 s of MariaDB outage under writes")
	}
	load.finish(t, sc)
	if st, _ := sc.c.Status(ctx); st.DeadLetters != 0 {
		t.Errorf("%d dead letters after a store outage: transient errors must never dead-letter", st.DeadLetters)
	}
	t.Logf("MariaDB away 15 s: %d writes acknowledged by then, %d failed during the outage", ackedDuring, load.failed-failedBefore)
}

// A sidecar SIGSTOPped for three ownership leases while it owns partitions:
// the other sidecar takes them over and applies; when the paused one
// resumes it must notice it lost them and apply nothing twice or out of
// order (exactly once is checked by the model).
func TestSidecarPausedPastOwnerLease(t *testing.T) {
	const docs = 16
	e := newEnv(t, docs)
	addrA, addrB := freeAddr(t), freeAddr(t)
	a := start(t, e.config(addrA, "write-back", ""), addrA)
	b := start(t, e.config(addrB, "write-back", ""), addrB)
	load := startIncLoad(e, a, docs, 41, b)
	time.Sleep(2 * time.Second)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second) // ownerLease is 1.5 s
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if a.exited() || b.exited() {
		t.Fatalf("a sidecar exited:\n%s\n%s", a.out(), b.out())
	}
	load.finish(t, b)
	t.Logf("paused 5 s: %d writes acknowledged, %d failed (those through the paused sidecar time out)", load.acked, load.failed)
}
