package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"
)

// The near cache across processes: a holder's copy of a document (a read
// lease in Redis) holds up another sidecar's write to it until the holder
// lets go — at once when it answers the revocation, at its lease's expiry
// when it is paused or dead — and a holder never serves the old value
// afterwards. Collections keep the default nearCache (leaseTTL 2s, hotWindow
// 2s); WRITEBACK_NEAR_CACHE turns it on.

const nearLease = 2 * time.Second

// nearOnly skips a test of the near cache itself in make test's second
// pass, with WRITEBACK_NEAR_CACHE=off (test-near-off): such a test turns
// the near cache on in its own sidecars and members whatever the
// environment says, so it ran, the same, in the first pass.
func nearOnly(t *testing.T) {
	t.Helper()
	if os.Getenv("WRITEBACK_NEAR_CACHE") == "off" {
		t.Skip("a test of the near cache itself: it runs in the pass with the near cache on")
	}
}

// nearPair starts a holder and a writer sidecar with near caches on, and
// makes the holder hold a lease on document 1 of the PostgreSQL collection:
// it returns when the holder served it from its near cache, and the time
// before the read that took the lease was sent (the lease expires in Redis
// no earlier than leased + nearLease).
func nearPair(t *testing.T) (e *env, holder, writer *sidecar, coll string, leased time.Time) {
	t.Helper()
	e = newEnv(t, 1)
	coll = e.coll("pg")
	addrH, addrW := freeAddr(t), freeAddr(t)
	holder = start(t, e.config(addrH, "write-back", ""), addrH, "WRITEBACK_NEAR_CACHE=on")
	writer = start(t, e.config(addrW, "write-back", ""), addrW, "WRITEBACK_NEAR_CACHE=on")
	return e, holder, writer, coll, nearLeaseOn(t, holder, coll, "1")
}

// nearLeaseOn makes holder hold a lease on document id: it returns when
// the holder served it from its near cache, and the time before the read
// that took the lease was sent. The document's s must be init.
func nearLeaseOn(t *testing.T, holder *sidecar, coll, id string) (leased time.Time) {
	t.Helper()
	hits := `writeback_nearcache_hits_total{collection="` + coll + `"}`
	hits0 := metricValue(t, holder.addr, hits)
	// The first read takes the lease — by its fill when it misses in
	// Redis, else by its lease read — and the next ones are near-cache
	// hits.
	leased = time.Now()
	for range 3 {
		if got := nearReadDoc(t, holder, coll, id); got != "init" {
			t.Fatalf("holder read %q of document %s, want init", got, id)
		}
	}
	if n := metricValue(t, holder.addr, hits); n <= hits0 {
		t.Fatalf("%s = %v after three reads of document %s: the holder took no lease", hits, n, id)
	}
	return leased
}

// nearRead reads document 1's s through sidecar s.
func nearRead(t *testing.T, s *sidecar, coll string) string {
	t.Helper()
	return nearReadDoc(t, s, coll, "1")
}

// nearReadDoc reads document id's s through sidecar s.
func nearReadDoc(t *testing.T, s *sidecar, coll, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, _, err := s.c.Get(ctx, coll, id)
	if err != nil {
		t.Fatalf("read of document %s through %s: %v", id, s.addr, err)
	}
	var d struct{ S string }
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	return d.S
}

// nearWrite sets document 1's s through sidecar s and returns when it was
// acknowledged.
func nearWrite(t *testing.T, s *sidecar, coll, v string) time.Time {
	t.Helper()
	at, err := nearWriteDoc(s, coll, "1", v)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

// nearWriteDoc sets document id's s through sidecar s and returns when it
// was acknowledged. It does not fail the test, so that it may run in a
// goroutine of its own.
func nearWriteDoc(s *sidecar, coll, id, v string) (time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := s.c.Patch(ctx, coll, id, map[string]any{"$set": map[string]any{"s": v}}); err != nil {
		return time.Time{}, fmt.Errorf("write of document %s through %s: %w", id, s.addr, err)
	}
	return time.Now(), nil
}

func TestNearHolderLetsGo(t *testing.T) {
	nearOnly(t)
	_, holder, writer, coll, _ := nearPair(t)
	start := time.Now()
	nearWrite(t, writer, coll, "new")
	if d := time.Since(start); d > nearLease/2 {
		t.Errorf("the write took %v: a live holder should let go at once, not at its lease's expiry", d)
	}
	if got := nearRead(t, holder, coll); got != "new" {
		t.Fatalf("holder read %q after the write, want new", got)
	}
}

// TestNearRenewalExtends: a copy being read is served from the near cache
// lease period after lease period, its lease extended in the background
// without reading the value again (outcome "extended", no new grant); an
// extended lease is revoked like any other.
func TestNearRenewalExtends(t *testing.T) {
	nearOnly(t)
	_, holder, writer, coll, _ := nearPair(t)
	metric := func(outcome string) float64 {
		return metricValue(t, holder.addr, `writeback_nearcache_leases_total{collection="`+coll+`",outcome="`+outcome+`"}`)
	}
	misses := `writeback_nearcache_misses_total{collection="` + coll + `"}`
	granted0, extended0, misses0 := metric("granted"), metric("extended"), metricValue(t, holder.addr, misses)
	for end := time.Now().Add(3 * nearLease); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if got := nearRead(t, holder, coll); got != "init" {
			t.Fatalf("holder read %q, want init", got)
		}
	}
	if n := metric("extended") - extended0; n < 2 {
		t.Errorf("%v extensions over three lease periods of reads, want at least 2", n)
	}
	if n := metric("granted") - granted0; n != 0 {
		t.Errorf("%v new grants while the copy was being read: renewals read the value again", n)
	}
	if n := metricValue(t, holder.addr, misses) - misses0; n != 0 {
		t.Errorf("%v near-cache misses while the copy was being read", n)
	}
	start := time.Now()
	nearWrite(t, writer, coll, "new")
	if d := time.Since(start); d > nearLease/2 {
		t.Errorf("the write took %v: the holder of an extended lease should let go at once", d)
	}
	if got := nearRead(t, holder, coll); got != "new" {
		t.Fatalf("holder read %q after the write, want new", got)
	}
}

func TestNearHolderPaused(t *testing.T) {
	nearOnly(t)
	e, holder, writer, coll, leased := nearPair(t)
	nearHolderPaused(t, e, holder, writer, coll, leased)
}

// nearHolderPaused SIGSTOPs holder, which holds a lease on document 1 taken
// at leased, and checks that writer's write of it waits, invisible, until
// that lease expires, and that the holder, SIGCONTed, serves the new value.
func nearHolderPaused(t *testing.T, e *env, holder, writer *sidecar, coll string, leased time.Time) {
	t.Helper()
	stopped := holder.pause()
	t.Logf("the holder's threads all stopped %v after SIGSTOP", stopped)
	resumed := false
	defer func() {
		if !resumed {
			_ = holder.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	type result struct {
		at  time.Time
		err error
	}
	done := make(chan result, 1)
	go func() {
		at, err := nearWriteDoc(writer, coll, "1", "new")
		done <- result{at, err}
	}()
	// While it waits, the write is visible nowhere: the writer's own reads
	// (from Redis) still see the old value.
	time.Sleep(nearLease / 4)
	select {
	case r := <-done:
		// Seen once under a fresh clone's make test, not reproduced since:
		// say what the lease record and both sidecars said.
		nearDiagnose(t, e, coll, holder, writer)
		t.Fatalf("the write ended (%v) %v after the lease was taken, before the paused holder's lease (%v) expired (the holder took %v to stop)", r.err, r.at.Sub(leased), nearLease, stopped)
	default:
	}
	if got := nearRead(t, writer, coll); got != "init" {
		t.Fatalf("writer read %q while its write waited for the holder, want init", got)
	}
	r := <-done
	if r.err != nil {
		nearDiagnose(t, e, coll, holder, writer)
		t.Fatal(r.err)
	}
	at := r.at
	if at.Sub(leased) < nearLease-50*time.Millisecond {
		t.Fatalf("the write was acknowledged %v after the lease was taken, before it expired (%v)", at.Sub(leased), nearLease)
	}
	if d := at.Sub(leased); d > nearLease+3*time.Second {
		t.Errorf("the write took %v after the lease was taken: it should complete soon after the %v lease expires", d, nearLease)
	}
	holder.resume()
	resumed = true
	for i := range 5 {
		if got := nearRead(t, holder, coll); got != "new" {
			t.Fatalf("read %d through the resumed holder: %q, want new", i, got)
		}
	}
	if got := nearRead(t, writer, coll); got != "new" {
		t.Fatalf("writer read %q, want new", got)
	}
}

func TestNearHolderKilled(t *testing.T) {
	nearOnly(t)
	_, holder, writer, coll, leased := nearPair(t)
	holder.kill()
	at := nearWrite(t, writer, coll, "new")
	if d := at.Sub(leased); d > nearLease+time.Second {
		t.Fatalf("the write completed %v after the dead holder took its lease: want within the lease (%v)", d, nearLease)
	}
	if got := nearRead(t, writer, coll); got != "new" {
		t.Fatalf("writer read %q, want new", got)
	}
}

// TestNearHotOnlyAfterRevoking: the adaptive rule. A write that had to
// revoke another sidecar's lease marks the document hot: for the hot
// window nobody is granted a lease on it, so the writes after it wait for
// no holder. A write that revoked nothing (the writer's own copy is no
// holder) leaves no mark: the document stays leased, and the writer's own
// copy is taken again in the background.
func TestNearHotOnlyAfterRevoking(t *testing.T) {
	nearOnly(t)
	_, holder, writer, coll, _ := nearPair(t)
	hot := `writeback_nearcache_leases_total{collection="` + coll + `",outcome="hot"}`
	hits := `writeback_nearcache_hits_total{collection="` + coll + `"}`
	nearWrite(t, writer, coll, "revoking")
	if got := nearRead(t, holder, coll); got != "revoking" {
		t.Fatalf("holder read %q, want revoking", got)
	}
	if n := metricValue(t, holder.addr, hot); n < 1 {
		t.Fatalf("%s = %v after a write that revoked the holder's lease: the document was not marked hot", hot, n)
	}

	// Past the hot window (the default, 2 s): the holder leases it again.
	time.Sleep(2*time.Second + 200*time.Millisecond)
	for range 2 {
		nearRead(t, holder, coll)
	}
	hot0, hits0 := metricValue(t, holder.addr, hot), metricValue(t, holder.addr, hits)
	// The holder writes it itself: nobody else holds a lease.
	nearWrite(t, holder, coll, "own")
	deadline := time.Now().Add(5 * time.Second)
	for {
		if got := nearRead(t, holder, coll); got != "own" {
			t.Fatalf("holder read %q after its own write, want own", got)
		}
		if metricValue(t, holder.addr, hits) > hits0 {
			break // a near-cache hit of its own write: leased again, not hot
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s stayed %v for 5 s after the holder's own write: its copy was not leased again", hits, hits0)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := metricValue(t, holder.addr, hot); n != hot0 {
		t.Fatalf("%s went from %v to %v: a write that revoked nothing marked the document hot", hot, hot0, n)
	}
}

// nearDiagnose logs document 1's lease record and hot mark, the holder's
// near-cache metrics and both sidecars' output.
func nearDiagnose(t *testing.T, e *env, coll string, holder, writer *sidecar) {
	t.Helper()
	nearDiagnoseDoc(t, e, coll, "1", holder, writer)
}

// nearDiagnoseDoc is nearDiagnose for document id.
func nearDiagnoseDoc(t *testing.T, e *env, coll, id string, holder, writer *sidecar) {
	t.Helper()
	ctx := context.Background()
	for _, kind := range []string{"l", "h"} {
		keys, _ := e.redis.Keys(ctx, e.prefix+":*"+kind+":"+coll+":"+id).Result()
		for _, k := range keys {
			ttl, _ := e.redis.PTTL(ctx, k).Result()
			if kind == "l" {
				h, err := e.redis.HGetAll(ctx, k).Result()
				t.Logf("%s: %v %v (ttl %v)", k, h, err, ttl)
			} else {
				t.Logf("%s: hot mark (ttl %v)", k, ttl)
			}
		}
		if len(keys) == 0 {
			t.Logf("no %s:%s:%s key", kind, coll, id)
		}
	}
	t.Logf("holder output:\n%s", holder.out())
	t.Logf("writer output:\n%s", writer.out())
}
