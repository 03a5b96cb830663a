package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/lease"
	"github.com/writeback/writeback/internal/metrics"
)

// beginAt begins a session whose start (its age for the wound-wait rule)
// is ms, so that tests choose who is older.
func (w *world) beginAt(t *testing.T, ms int64) string {
	t.Helper()
	id, err := w.svc.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.rdb.HSet(context.Background(), w.svc.Keys().Record(id), "_", ms).Err(); err != nil {
		t.Fatal(err)
	}
	return id
}

// leaseKey is the lease record, entry and wait queue of a test key of
// queue f/1.
func (w *world) leaseKey(key string) lease.Key {
	return w.svc.Keys().LeaseKey(w.svc.Keys().Partition("f/1"), key)
}

// commitKey commits session id setting key (queue f/1) to v.
func (w *world) commitKey(id, key, v string) error {
	_, err := w.svc.Commit(context.Background(), id, CommitRequest{Queue: "f/1", Cache: []CacheChange{{Key: key, Set: json.RawMessage(v)}}})
	return err
}

// waitUntil polls cond until it holds or 5 s pass.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (w *world) waiters(t *testing.T, key string) []lease.Waiter {
	t.Helper()
	ws, err := lease.Waiters(context.Background(), w.rdb, w.leaseKey(key))
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// Three sessions queue for the X lease another session holds; each is
// granted in arrival order when the one before it commits, and only then.
func TestSessionWaitGrantsFIFO(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.LeaseWait, c.LeaseLifetime = 10*time.Second, 10*time.Second })
	ctx := context.Background()
	const key = "k:1:a"
	holder := w.beginAt(t, 1000)
	if _, err := w.svc.Read(ctx, holder, key, true); err != nil {
		t.Fatal(err)
	}
	ids := []string{w.beginAt(t, 2000), w.beginAt(t, 3000), w.beginAt(t, 4000)}
	granted := make(chan string, len(ids))
	for i, id := range ids {
		go func() {
			if _, err := w.svc.Read(ctx, id, key, true); err != nil {
				t.Errorf("waiter %d: %v", i, err)
			}
			granted <- id
		}()
		waitUntil(t, "the waiter to queue", func() bool { return len(w.waiters(t, key)) == i+1 })
	}
	if err := w.commitKey(holder, key, `{"v":"h"}`); err != nil {
		t.Fatal(err)
	}
	for i, want := range ids {
		select {
		case got := <-granted:
			if got != want {
				t.Fatalf("grant %d went to %s, want %s (arrival order)", i, got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("grant %d never came", i)
		}
		held, err := lease.Held(ctx, w.rdb, w.leaseKey(key))
		if err != nil {
			t.Fatal(err)
		}
		if len(held) != 1 || held[0].Holder != want || held[0].Mode != lease.Exclusive {
			t.Fatalf("after grant %d the key's leases are %+v; want only %s's X", i, held, want)
		}
		if n := len(w.waiters(t, key)); n != len(ids)-i-1 {
			t.Fatalf("after grant %d, %d waiters remain; want %d", i, n, len(ids)-i-1)
		}
		if err := w.commitKey(want, key, `{"v":"`+want+`"}`); err != nil {
			t.Fatalf("commit of waiter %d: %v", i, err)
		}
	}
	w.checkWaits(t, 3, 0)
}

// checkWaits compares the service's wait metrics with the waits granted
// and timed out.
func (w *world) checkWaits(t *testing.T, granted, timedOut int) {
	t.Helper()
	g := testutil.ToFloat64(w.svc.m.LeaseWaits.WithLabelValues(metrics.WaitGranted))
	o := testutil.ToFloat64(w.svc.m.LeaseWaits.WithLabelValues(metrics.WaitTimeout))
	n := testutil.CollectAndCount(w.svc.m.LeaseWaitSeconds)
	if int(g) != granted || int(o) != timedOut || n != 1 {
		t.Errorf("wait metrics: %v granted, %v timed out; want %d and %d, and the wait histogram", g, o, granted, timedOut)
	}
}

// Two sessions each hold one key for update and ask for the other's: the
// older wounds the younger and commits; the younger, which waits for the
// older, is aborted with a 409; nobody hangs.
func TestSessionWoundBreaksCycle(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.LeaseWait, c.LeaseLifetime = 10*time.Second, 10*time.Second })
	ctx := context.Background()
	older, younger := w.beginAt(t, 1000), w.beginAt(t, 2000)
	for id, key := range map[string]string{older: "k:1:a", younger: "k:1:b"} {
		if _, err := w.svc.Read(ctx, id, key, true); err != nil {
			t.Fatal(err)
		}
	}
	both := func(id string) error {
		other := map[string]string{older: "k:1:b", younger: "k:1:a"}[id]
		if _, err := w.svc.Read(ctx, id, other, true); err != nil {
			return err
		}
		_, err := w.svc.Commit(ctx, id, CommitRequest{Queue: "f/1", Cache: []CacheChange{
			{Key: "k:1:a", Set: json.RawMessage(`{"v":"` + id + `"}`)}, {Key: "k:1:b", Set: json.RawMessage(`{"v":"` + id + `"}`)}}})
		return err
	}
	start := time.Now()
	errs := make(chan error, 1)
	go func() { errs <- both(younger) }()
	waitUntil(t, "the younger session to wait", func() bool { return len(w.waiters(t, "k:1:a")) == 1 })
	if err := both(older); err != nil {
		t.Fatalf("the older session: %v; it wounds the younger and commits", err)
	}
	select {
	case err := <-errs:
		var ae *AbortedError
		if !errors.As(err, &ae) {
			t.Fatalf("the younger session: %v; want a 409 (AbortedError)", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the younger session hangs")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the cycle took %s to break; the wound should break it at once", d)
	}
	v, err := w.svc.Read(ctx, "", "k:1:b", false)
	if err != nil || string(v) != `{"v":"`+older+`"}` {
		t.Errorf("k:1:b = %s (%v); want the older session's value", v, err)
	}
}

// A waiter whose wait bound passes is aborted (409) and leaves no entry in
// the key's wait queue; its bound never outlasts its own first lease.
func TestSessionWaitBound(t *testing.T) {
	ctx := context.Background()
	t.Run("leaseWait", func(t *testing.T) {
		w := newWorld(t, func(c *Config) { c.LeaseWait, c.LeaseLifetime = 300*time.Millisecond, 10*time.Second })
		holder, waiter := w.beginAt(t, 1000), w.beginAt(t, 2000)
		if _, err := w.svc.Read(ctx, holder, "k:1:a", true); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err := w.svc.Read(ctx, waiter, "k:1:a", false)
		var ae *AbortedError
		if !errors.As(err, &ae) || ae.Waited <= 0 || ae.Conflict != lease.SharedOnExclusive {
			t.Fatalf("the waiter got %v; want a 409 after waiting (s_on_x)", err)
		}
		if d := time.Since(start); d < 250*time.Millisecond || d > 2*time.Second {
			t.Errorf("the waiter gave up after %s; want about the 300ms lease wait", d)
		}
		if n, _ := w.rdb.Exists(ctx, w.leaseKey("k:1:a").Wait).Result(); n != 0 {
			t.Errorf("the wait queue is left behind: %+v", w.waiters(t, "k:1:a"))
		}
		if _, err := w.svc.Read(ctx, waiter, "k:1:b", false); !errors.Is(err, ErrUnknownSession) {
			t.Errorf("the timed-out session still reads (%v); it is aborted", err)
		}
		if err := w.commitKey(holder, "k:1:a", `{"v":1}`); err != nil {
			t.Errorf("the holder's commit: %v", err)
		}
		w.checkWaits(t, 0, 1)
	})
	t.Run("own first lease", func(t *testing.T) {
		w := newWorld(t, func(c *Config) { c.LeaseWait, c.LeaseLifetime = 5*time.Second, 400*time.Millisecond })
		// An older holder that keeps its lease (a lease set directly, far
		// from expiry), so only the waiter's own budget can end its wait.
		k := w.leaseKey("k:1:a")
		if err := lease.Set(ctx, w.rdb, k, lease.Lease{Holder: "h", Mode: lease.Exclusive, Expires: time.Now().Add(time.Minute), Start: 1}); err != nil {
			t.Fatal(err)
		}
		waiter := w.beginAt(t, 2000)
		if _, err := w.svc.Read(ctx, waiter, "k:1:b", false); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err := w.svc.Read(ctx, waiter, "k:1:a", true)
		var ae *AbortedError
		if !errors.As(err, &ae) {
			t.Fatalf("the waiter got %v; want a 409", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("the waiter waited %s, past its own 400ms lease", d)
		}
		if ws := w.waiters(t, "k:1:a"); len(ws) != 0 {
			t.Errorf("waiters left behind: %+v", ws)
		}
	})
}

// A holder that dies (never commits nor aborts) keeps its waiters out only
// until its lease expires: then the first waiter is granted.
func TestSessionWaitOutlivesCrashedHolder(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.LeaseWait, c.LeaseLifetime = 5*time.Second, 400*time.Millisecond })
	ctx := context.Background()
	dead, waiter := w.beginAt(t, 1000), w.beginAt(t, 2000)
	if _, err := w.svc.Read(ctx, dead, "k:1:a", true); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := w.svc.Read(ctx, waiter, "k:1:a", true); err != nil {
		t.Fatalf("the waiter: %v; want the lease once the dead holder's expired", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 3*time.Second {
		t.Errorf("the waiter was granted after %s; want about the holder's 400ms lease", d)
	}
	if err := w.commitKey(waiter, "k:1:a", `{"v":2}`); err != nil {
		t.Errorf("the waiter's commit: %v", err)
	}
	if ws := w.waiters(t, "k:1:a"); len(ws) != 0 {
		t.Errorf("waiters left behind: %+v", ws)
	}
}

// A commit that writes a key an older session holds for update waits for
// it (and then commits after it); one that writes a key a younger session
// holds wounds it.
func TestSessionCommitWaitsOrWounds(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.LeaseWait, c.LeaseLifetime = 10*time.Second, 10*time.Second })
	ctx := context.Background()
	older, younger := w.beginAt(t, 1000), w.beginAt(t, 2000)
	if _, err := w.svc.Read(ctx, older, "k:1:a", true); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.commitKey(younger, "k:1:a", `{"v":"younger"}`) }()
	waitUntil(t, "the younger commit to wait", func() bool { return len(w.waiters(t, "k:1:a")) == 1 })
	if err := w.commitKey(older, "k:1:a", `{"v":"older"}`); err != nil {
		t.Fatalf("the older commit: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the younger commit, after waiting: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the younger commit hangs")
	}
	if v, err := w.svc.Read(ctx, "", "k:1:a", false); err != nil || string(v) != `{"v":"younger"}` {
		t.Errorf("k:1:a = %s (%v); the younger commit comes last", v, err)
	}

	older, younger = w.beginAt(t, 3000), w.beginAt(t, 4000)
	if _, err := w.svc.Read(ctx, younger, "k:1:b", true); err != nil {
		t.Fatal(err)
	}
	if err := w.commitKey(older, "k:1:b", `{"v":"older"}`); err != nil {
		t.Fatalf("the older commit on a younger X: %v; it wounds it", err)
	}
	var ae *AbortedError
	if err := w.commitKey(younger, "k:1:b", `{"v":"younger"}`); !errors.As(err, &ae) || ae.Reason != ReasonVoided {
		t.Errorf("the wounded session's commit: %v; want a 409 (voided)", err)
	}
}

// TestBeginReadAllOneRoundTrip: a session that begins in a multi-read
// creates its record, notes its leased keys, takes their leases and reads
// the peeked entries in one round trip; the peeked keys are neither noted
// nor leased. A session that exists notes first, then reads: two.
func TestBeginReadAllOneRoundTrip(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.commitSet(t, "k:1:a", `{"v":"a"}`)
	w.commitSet(t, "k:1:p", `{"v":"p"}`)
	w.commitSet(t, "k:2:q", `{"v":"q"}`)
	// Loaded, as by the sidecar's first multi-read (a NOSCRIPT costs that
	// one a round trip more).
	if err := readAllScript.Load(ctx, w.rdb).Err(); err != nil {
		t.Fatal(err)
	}
	rt := &roundTrips{}
	w.rdb.AddHook(rt)
	before := rt.n.Load()
	id, vals, peeked, err := w.svc.BeginReadAll(ctx, Reads{Keys: []string{"k:1:a"}, Peek: []string{"k:1:p", "k:2:q", "k:1:p"}, ForUpdate: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := rt.n.Load() - before; n != 1 {
		t.Errorf("a beginning multi-read of hits made %d round trips, want 1", n)
	}
	if len(vals) != 1 || string(vals[0]) != `{"v":"a"}` {
		t.Errorf("values %q, want the leased key's", vals)
	}
	if len(peeked) != 3 || string(peeked[0]) != `{"v":"p"}` || string(peeked[1]) != `{"v":"q"}` || string(peeked[2]) != `{"v":"p"}` {
		t.Errorf("peeked %q, want p, q, p in the order asked", peeked)
	}
	read, start, err := w.svc.record(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(read) != 1 || read["k:1:a"] != "X" || start <= 0 {
		t.Errorf("record %v (start %d), want only k:1:a under X and the session's start", read, start)
	}
	if ls, err := lease.Held(ctx, w.rdb, w.leaseKey("k:1:a")); err != nil || len(ls) != 1 || ls[0].Holder != id || ls[0].Mode != lease.Exclusive {
		t.Errorf("k:1:a's leases %+v (%v), want the session's X", ls, err)
	}
	if ls, err := lease.Held(ctx, w.rdb, w.leaseKey("k:1:p")); err != nil || len(ls) != 0 {
		t.Errorf("a peeked key has leases %+v (%v), want none", ls, err)
	}

	before = rt.n.Load()
	vals, peeked, err = w.svc.ReadAll(ctx, id, Reads{Keys: []string{"k:1:b"}, Peek: []string{"k:2:q"}})
	if err != nil {
		t.Fatal(err)
	}
	if n := rt.n.Load() - before; n != 3 {
		// note, reads; k:1:b misses: its fill
		t.Errorf("a multi-read in a session that exists, one miss, made %d round trips, want 3", n)
	}
	if string(vals[0]) != `{"v":0}` || string(peeked[0]) != `{"v":"q"}` {
		t.Errorf("values %q peeked %q", vals, peeked)
	}
	if err := w.commitKey(id, "k:1:a", `{"v":"a2"}`); err != nil {
		t.Fatal(err)
	}

	// Outside a session, keys and peeks are both plain reads.
	vals, peeked, err = w.svc.ReadAll(ctx, "", Reads{Keys: []string{"k:1:a"}, Peek: []string{"k:1:p"}})
	if err != nil || string(vals[0]) != `{"v":"a2"}` || string(peeked[0]) != `{"v":"p"}` {
		t.Errorf("outside a session: %q %q %v", vals, peeked, err)
	}
	if _, _, err := w.svc.ReadAll(ctx, "", Reads{Peek: []string{"nomapping:x"}}); !errors.Is(err, ErrNoMapping) {
		t.Errorf("an unmapped peek: %v, want ErrNoMapping", err)
	}
}

// TestBeginReadWaitsAsOneWaiter: a session whose first read, in the round
// trip that begins it, must wait for an older session's X lease queues
// once, with the deadline its read computed, is granted when the holder
// commits, and leaves no waiter behind.
func TestBeginReadWaitsAsOneWaiter(t *testing.T) {
	w := newWorld(t, func(c *Config) { c.LeaseWait, c.LeaseLifetime = 5*time.Second, 5*time.Second })
	ctx := context.Background()
	holder := w.beginAt(t, 1000)
	if _, err := w.svc.Read(ctx, holder, "k:1:a", true); err != nil {
		t.Fatal(err)
	}
	type result struct {
		vals []json.RawMessage
		err  error
	}
	done := make(chan result, 1)
	go func() {
		_, vals, _, err := w.svc.BeginReadAll(ctx, Reads{Keys: []string{"k:1:a"}, ForUpdate: true})
		done <- result{vals, err}
	}()
	var ws []lease.Waiter
	waitUntil(t, "the beginning session to queue", func() bool { ws = w.waiters(t, "k:1:a"); return len(ws) > 0 })
	time.Sleep(50 * time.Millisecond) // its polls must not queue it again
	if ws = w.waiters(t, "k:1:a"); len(ws) != 1 {
		t.Fatalf("waiters %+v, want the one session once", ws)
	}
	if left := time.Until(time.UnixMilli(ws[0].Deadline)); left < 4*time.Second || left > 6*time.Second {
		t.Errorf("the waiter's deadline is %s away, want about the 5s lease wait", left)
	}
	if err := w.commitKey(holder, "k:1:a", `{"v":1}`); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || string(r.vals[0]) != `{"v":1}` {
			t.Fatalf("the beginning session read %q, %v; want the holder's commit", r.vals, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the beginning session was not granted after the holder committed")
	}
	if ws := w.waiters(t, "k:1:a"); len(ws) != 0 {
		t.Errorf("waiters left behind: %+v", ws)
	}
}

// TestBeginReadAfterScriptsLost: a beginning multi-read on a Redis that
// lost its scripts (a restart) loads them and still notes, leases and
// reads.
func TestBeginReadAfterScriptsLost(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.commitSet(t, "k:1:a", `{"v":"a"}`)
	if err := w.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	id, vals, peeked, err := w.svc.BeginReadAll(ctx, Reads{Keys: []string{"k:1:a", "k:1:b"}, Peek: []string{"k:1:a"}})
	if err != nil {
		t.Fatal(err)
	}
	if string(vals[0]) != `{"v":"a"}` || string(vals[1]) != `{"v":0}` || string(peeked[0]) != `{"v":"a"}` {
		t.Errorf("values %q peeked %q", vals, peeked)
	}
	read, _, err := w.svc.record(ctx, id)
	if err != nil || read["k:1:a"] != "S" || read["k:1:b"] != "S" {
		t.Errorf("record %v (%v), want both keys under S", read, err)
	}
	for _, k := range []string{"k:1:a", "k:1:b"} {
		if ls, err := lease.Held(ctx, w.rdb, w.leaseKey(k)); err != nil || len(ls) != 1 || ls[0].Holder != id {
			t.Errorf("%s's leases %+v (%v), want the session's S", k, ls, err)
		}
	}
}

// scriptRuns counts the runs of one script sent to Redis.
type scriptRuns struct {
	sha string
	n   atomic.Int64
}

func (h *scriptRuns) count(cmds ...redis.Cmder) {
	for _, c := range cmds {
		if a := c.Args(); len(a) > 1 && a[0] == "evalsha" && a[1] == h.sha {
			h.n.Add(1)
		}
	}
}
func (h *scriptRuns) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scriptRuns) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.count(cmd); return next(ctx, cmd) }
}
func (h *scriptRuns) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.count(cmds...); return next(ctx, cmds) }
}

// TestReadAllOneScriptPerPartition: a multi-read's leased keys are read by
// one script run per partition, each key as a read of its own would: its
// value, and the session's lease on it.
func TestReadAllOneScriptPerPartition(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	other := ""
	for q := 2; other == ""; q++ {
		if w.svc.keys.Partition(fmt.Sprintf("f/%d", q)) != w.svc.keys.Partition("f/1") {
			other = strconv.Itoa(q)
		}
	}
	keys := []string{"k:1:a", "k:" + other + ":x", "k:1:b", "k:1:c"}
	for _, k := range keys {
		w.commitSet(t, k, `{"v":"`+k+`"}`)
	}
	if err := readAllScript.Load(ctx, w.rdb).Err(); err != nil {
		t.Fatal(err)
	}
	runs := &scriptRuns{sha: readAllScript.Hash()}
	w.rdb.AddHook(runs)
	id, vals, _, err := w.svc.BeginReadAll(ctx, Reads{Keys: append(keys, "k:1:a")})
	if err != nil {
		t.Fatal(err)
	}
	if n := runs.n.Load(); n != 2 {
		t.Errorf("a multi-read of keys in 2 partitions ran the read script %d times, want 2", n)
	}
	for i, k := range append(keys, "k:1:a") {
		if string(vals[i]) != `{"v":"`+k+`"}` {
			t.Errorf("value %d is %s, want %s's", i, vals[i], k)
		}
	}
	for _, k := range keys {
		p := w.svc.keys.Partition("f/" + strings.Split(k, ":")[1])
		if ls, err := lease.Held(ctx, w.rdb, w.svc.keys.LeaseKey(p, k)); err != nil || len(ls) != 1 || ls[0].Holder != id || ls[0].Mode != lease.Shared {
			t.Errorf("%s's leases %+v (%v), want the session's S", k, ls, err)
		}
	}

	// Redis loses its scripts: the next multi-read loads the one it runs.
	if err := w.rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if vals, err := w.svc.ReadMany(ctx, id, keys, false); err != nil || string(vals[3]) != `{"v":"k:1:c"}` {
		t.Fatalf("a multi-read after the scripts were lost: %q, %v", vals, err)
	}
	if ok, err := w.rdb.ScriptExists(ctx, readAllScript.Hash()).Result(); err != nil || !ok[0] {
		t.Errorf("the multi-read script is not loaded again after a multi-read (%v, %v)", ok, err)
	}
}
