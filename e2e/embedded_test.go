package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The embedded member (pkg/writeback) paused and killed as a process of its
// own (e2e/embedmember, an application linking it): it is one more member
// of the near cache's protocol, so a paused or dead one holds other
// members' writes to the documents it leased up for at most its lease, a
// resumed one never serves its old copy, and one killed at any point —
// running the appliers, between buffering a write and acknowledging it —
// loses no acknowledged write.

var (
	embedOnce   sync.Once
	embedBinary string
	embedErr    error
)

// embedmember builds e2e/embedmember once, next to the sidecar binary and
// with the same flags (the race detector unless WRITEBACK_E2E_NORACE).
func embedmember(t *testing.T) string {
	t.Helper()
	embedOnce.Do(func() {
		embedBinary = filepath.Join(filepath.Dir(binary), "embedmember")
		args := []string{"build", "-race", "-o", embedBinary, "./embedmember"}
		if os.Getenv("WRITEBACK_E2E_NORACE") != "" {
			args = []string{"build", "-o", embedBinary, "./embedmember"}
		}
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			embedErr = fmt.Errorf("building e2e/embedmember: %v\n%s", err, out)
		}
	})
	if embedErr != nil {
		t.Fatal(embedErr)
	}
	return embedBinary
}

// startEmbedded runs an embedded member named id with the sidecars'
// configuration file cfg, its near cache on, the test's front door on
// addr; with appliers it runs them. mayDie as in startArmed; envs are extra
// environment variables (WRITEBACK_FAULTS=…).
func startEmbedded(t *testing.T, cfg, addr, id string, appliers, mayDie bool, envs ...string) *sidecar {
	t.Helper()
	args := []string{embedmember(t), "-config", cfg, "-listen", addr, "-id", id}
	if appliers {
		args = append(args, "-appliers")
	}
	return launchCmd(t, addr, mayDie, args, append([]string{"WRITEBACK_NEAR_CACHE=on"}, envs...)...)
}

// embeddedPair starts a writer sidecar (running the appliers) and an
// embedded member (not running them), near caches on, on docs documents.
func embeddedPair(t *testing.T, docs int) (e *env, member, writer *sidecar, coll, cfg string) {
	t.Helper()
	e = newEnv(t, docs)
	coll = e.coll("pg")
	addrM, addrW := freeAddr(t), freeAddr(t)
	cfg = e.config(addrW, "write-back", "")
	writer = start(t, cfg, addrW, "WRITEBACK_NEAR_CACHE=on")
	member = startEmbedded(t, cfg, addrM, e.prefix+"-embedded", false, false)
	return e, member, writer, coll, cfg
}

// TestNearHolderPaused with an embedded member as the holder: a sidecar's
// write of a document the paused member leased is acknowledged after the
// lease expires, not before, and is invisible until then; the resumed
// member serves the new value.
func TestEmbeddedHolderPaused(t *testing.T) {
	nearOnly(t)
	e, member, writer, coll, _ := embeddedPair(t, 1)
	leased := nearLeaseOn(t, member, coll, "1")
	nearHolderPaused(t, e, member, writer, coll, leased)
}

// An embedded member SIGKILLed while it holds a lease: a sidecar's write
// completes within the lease; the member restarted (same instance id, as
// an application with a fixed Options.InstanceID) reads the new value and
// leases it again.
func TestEmbeddedHolderKilled(t *testing.T) {
	nearOnly(t)
	e, member, writer, coll, cfg := embeddedPair(t, 1)
	leased := nearLeaseOn(t, member, coll, "1")
	member.kill()
	at := nearWrite(t, writer, coll, "new")
	if d := at.Sub(leased); d > nearLease+3*time.Second {
		nearDiagnose(t, e, coll, member, writer)
		t.Fatalf("the write completed %v after the dead member took its lease: want soon after the lease (%v) expires", d, nearLease)
	}
	if got := nearRead(t, writer, coll); got != "new" {
		t.Fatalf("writer read %q, want new", got)
	}
	again := startEmbedded(t, cfg, member.addr, e.prefix+"-embedded", false, false)
	for i := range 3 {
		if got := nearRead(t, again, coll); got != "new" {
			t.Fatalf("read %d through the restarted member: %q, want new", i, got)
		}
	}
}

// An embedded member that holds leases on several documents is paused,
// sidecar writes to all of them start waiting for it, and it is SIGKILLed
// while they wait: each write is acknowledged after its document's lease
// expired (not before, and not never), and a restarted member reads every
// new value.
func TestEmbeddedHolderKilledWhileWritersWait(t *testing.T) {
	nearOnly(t)
	const docs = 4
	e, member, writer, coll, cfg := embeddedPair(t, docs)
	leased := make([]time.Time, docs)
	for i := range docs {
		leased[i] = nearLeaseOn(t, member, coll, strconv.Itoa(i+1))
	}
	t.Logf("the member's threads all stopped %v after SIGSTOP", member.pause())
	type result struct {
		at  time.Time
		err error
	}
	done := make([]chan result, docs)
	for i := range docs {
		done[i] = make(chan result, 1)
		go func() {
			at, err := nearWriteDoc(writer, coll, strconv.Itoa(i+1), "new")
			done[i] <- result{at, err}
		}()
	}
	// Kill it while they wait. (The member renews its leases in the
	// background, so a lease may outlive leased+nearLease, never fall short
	// of it: the bounds below hold either way.)
	time.Sleep(nearLease / 4)
	member.kill() // SIGKILL works on a stopped process
	killed := time.Now()
	for i := range docs {
		r := <-done[i]
		if r.err != nil {
			nearDiagnoseDoc(t, e, coll, strconv.Itoa(i+1), member, writer)
			t.Fatal(r.err)
		}
		d := r.at.Sub(leased[i])
		t.Logf("document %d: acknowledged %v after its lease was taken, %v after the kill", i+1, d.Round(time.Millisecond), r.at.Sub(killed).Round(time.Millisecond))
		if d < nearLease-50*time.Millisecond {
			nearDiagnoseDoc(t, e, coll, strconv.Itoa(i+1), member, writer)
			t.Errorf("the write of document %d was acknowledged %v after the lease was taken, before it expired (%v)", i+1, d, nearLease)
		}
		if d > nearLease+3*time.Second {
			t.Errorf("the write of document %d took %v after the lease was taken: it should complete soon after the %v lease expires", i+1, d, nearLease)
		}
	}
	again := startEmbedded(t, cfg, member.addr, e.prefix+"-embedded", false, false)
	for i := range docs {
		if got := nearReadDoc(t, again, coll, strconv.Itoa(i+1)); got != "new" {
			t.Fatalf("the restarted member read %q of document %d, want new", got, i+1)
		}
	}
}

// TestCrashRecovery with an embedded member running the appliers as the
// process that is SIGKILLed — 16 times, at random moments and at armed
// fault points (before and after the store commit, between buffering and
// acknowledging a write) — and restarted, while half the clients write
// through it (reading first, so that it holds leases when it dies) and half
// through a sidecar that stays up (and so waits for the dead member's
// leases). No write through the sidecar fails; after the member's restart
// and a flush both databases equal the model of acknowledged writes, and
// the member and the sidecar read what the databases hold.
func TestEmbeddedCrashRecovery(t *testing.T) {
	nearOnly(t)
	const docs, clients = 12, 8
	e := newEnv(t, docs)
	addrM, addrS := freeAddr(t), freeAddr(t)
	cfg := e.config(addrS, "write-back", "")
	id := e.prefix + "-embedded"
	cr := newCrashingWith(t, func(mayDie bool, envs ...string) *sidecar {
		return startEmbedded(t, cfg, addrM, id, true, mayDie, envs...)
	})
	side := start(t, cfg, addrS, "WRITEBACK_NEAR_CACHE=on")
	cr.drain = side
	var sideFailed atomic.Int64
	var sideErrMu sync.Mutex
	var sideErr error
	models, final := crashWorkload(t, e, cr, docs, clients, 16, func(c int, current func() *sidecar) crashOps {
		if c%2 == 1 {
			return sidecarOps{httpOps{func() *sidecar { return side }}, func(err error) {
				sideFailed.Add(1)
				sideErrMu.Lock()
				sideErr = err
				sideErrMu.Unlock()
			}}
		}
		return &memberOps{httpOps{current}, rand.New(rand.NewPCG(uint64(c), 7))}
	})
	if n := sideFailed.Load(); n > 0 {
		t.Errorf("%d writes through the sidecar, which stayed up, failed (the last: %v): a dead member's lease must hold writes up for at most leaseTTL", n, sideErr)
	}
	// The sidecar's writes met the member's leases (else the test says
	// nothing about them).
	var revoked float64
	for _, db := range []string{"pg", "maria"} {
		l := `{collection="` + e.coll(db) + `"}`
		n := metricValue(t, side.addr, "writeback_nearcache_revocations_sent_total"+l)
		revoked += n
		t.Logf("%s: the sidecar revoked leases %v times and waited %.2f s in %v writes", db, n,
			metricValue(t, side.addr, "writeback_nearcache_write_wait_seconds_sum"+l), metricValue(t, side.addr, "writeback_nearcache_write_wait_seconds_count"+l))
	}
	if revoked == 0 {
		t.Errorf("no write through the sidecar revoked a lease: the member held none where the sidecar wrote")
	}
	hits := `writeback_nearcache_hits_total{collection="` + e.coll("pg") + `"}`
	for _, db := range []string{"pg", "maria"} {
		got := e.rows(db)
		for id, m := range models[db] {
			r := got[int64(id+1)]
			if err := m.check(r.N, r.S.String); err != nil {
				t.Errorf("%s row %d: %v", db, id+1, err)
			}
			// Three reads through the member: the first takes a lease (by
			// its fill on a miss in Redis), the others are near-cache hits;
			// all see what the database holds.
			for _, s := range []*sidecar{final, final, final, side} {
				raw, _, err := s.c.Get(context.Background(), e.coll(db), strconv.Itoa(id+1))
				if err != nil {
					t.Fatal(err)
				}
				var doc struct {
					N int64  `json:"n"`
					S string `json:"s"`
				}
				_ = json.Unmarshal(raw, &doc)
				if doc.N != r.N || doc.S != r.S.String {
					t.Errorf("%s row %d: %s reads %+v, database has n=%d s=%q", db, id+1, s.addr, doc, r.N, r.S.String)
				}
			}
		}
	}
	if n := metricValue(t, final.addr, hits); n < 1 {
		t.Errorf("%s = %v after three reads of each document through the member: it took no lease", hits, n)
	}
}

// sidecarOps writes through a sidecar that is never killed: onErr hears of
// every failure, none of which is expected.
type sidecarOps struct {
	httpOps
	onErr func(error)
}

func (o sidecarOps) inc(ctx context.Context, coll string, id int, amt int64) error {
	err := o.httpOps.inc(ctx, coll, id, amt)
	if err != nil {
		o.onErr(err)
	}
	return err
}

func (o sidecarOps) set(ctx context.Context, coll string, id int, val string) error {
	err := o.httpOps.set(ctx, coll, id, val)
	if err != nil {
		o.onErr(err)
	}
	return err
}

// memberOps writes through the current embedded member, reading the
// document first half the time so that the member leases it (its own
// writes keep its copy leased): a kill leaves leases behind for the
// sidecar's writes to wait out. The read's outcome is not the model's.
type memberOps struct {
	httpOps
	rng *rand.Rand // one client's: not shared
}

func (o *memberOps) read(ctx context.Context, coll string, id int) {
	if o.rng.IntN(2) == 0 {
		_, _, _ = o.current().c.Get(ctx, coll, strconv.Itoa(id))
	}
}

func (o *memberOps) inc(ctx context.Context, coll string, id int, amt int64) error {
	o.read(ctx, coll, id)
	return o.httpOps.inc(ctx, coll, id, amt)
}

func (o *memberOps) set(ctx context.Context, coll string, id int, val string) error {
	o.read(ctx, coll, id)
	return o.httpOps.set(ctx, coll, id, val)
}
