package rscript

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/testenv"
)

func client(t *testing.T) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// TestRunAllLoadsAndWaits runs scripts Redis has never seen (so that the
// first EVALSHA answers NOSCRIPT) in one round trip, and checks that each
// ran exactly once, and that a replica requirement the server cannot meet
// is reported — for every call — without failing the calls themselves.
func TestRunAllLoadsAndWaits(t *testing.T) {
	ctx := context.Background()
	rdb := client(t)
	key := testenv.UniqueName(t, "rscript")
	t.Cleanup(func() { rdb.Del(context.Background(), key) })
	// A body of its own: no other test has loaded it.
	sc := redis.NewScript("-- " + key + "\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])")
	calls := []Call{{Script: sc, Keys: []string{key}, Args: []any{1}}, {Script: sc, Keys: []string{key}, Args: []any{10}}}

	replies, errs, repls := Durable{Client: rdb}.RunAll(ctx, calls)
	for i := range calls {
		if errs[i] != nil || repls[i] != nil {
			t.Fatalf("call %d: err %v, replicas %v", i, errs[i], repls[i])
		}
	}
	if replies[0] != int64(1) || replies[1] != int64(11) {
		t.Fatalf("replies %v, want [1 11]: each call ran once, in order", replies)
	}

	// This Redis has no replicas: a requirement of one times out.
	d := Durable{Client: rdb, Replicas: 1, Timeout: 50 * time.Millisecond}
	_, errs, repls = d.RunAll(ctx, calls)
	for i := range calls {
		var re *ReplicationError
		if errs[i] != nil || !errors.As(repls[i], &re) || re.Got != 0 || re.Want != 1 {
			t.Fatalf("call %d with a replica required: err %v, replicas %v; want a ReplicationError 0 of 1", i, errs[i], repls[i])
		}
	}
	if v, _ := rdb.Get(ctx, key).Int(); v != 22 {
		t.Fatalf("the key holds %d, want 22: the calls ran even though the replicas did not confirm", v)
	}
}

// TestOwnership takes, renews and releases an ownership lease, and checks
// that another instance can take it only once it is free.
func TestOwnership(t *testing.T) {
	ctx := context.Background()
	rdb := client(t)
	key := testenv.UniqueName(t, "owner")
	t.Cleanup(func() { rdb.Del(context.Background(), key) })
	step := func(name string, got bool, err error, want bool) {
		t.Helper()
		if err != nil || got != want {
			t.Fatalf("%s: %v %v, want %v", name, got, err, want)
		}
	}
	ok, err := Acquire(ctx, rdb, key, "a", time.Minute)
	step("a takes the free lease", ok, err, true)
	ok, err = Acquire(ctx, rdb, key, "b", time.Minute)
	step("b is refused while a holds it", ok, err, false)
	ok, err = Acquire(ctx, rdb, key, "a", time.Minute)
	step("a renews", ok, err, true)
	if err := Release(ctx, rdb, key, "b"); err != nil {
		t.Fatal(err)
	}
	ok, err = Acquire(ctx, rdb, key, "b", time.Minute)
	step("b's release of a lease it does not hold changes nothing", ok, err, false)
	if err := Release(ctx, rdb, key, "a"); err != nil {
		t.Fatal(err)
	}
	ok, err = Acquire(ctx, rdb, key, "b", time.Minute)
	step("b takes the lease a released", ok, err, true)
}

// TestHeartbeat counts live instances and forgets those whose lifetime ran
// out.
func TestHeartbeat(t *testing.T) {
	ctx := context.Background()
	rdb := client(t)
	key := testenv.UniqueName(t, "sidecars")
	t.Cleanup(func() { rdb.Del(context.Background(), key) })
	if n, err := Heartbeat(ctx, rdb, key, "a", 50*time.Millisecond); err != nil || n != 1 {
		t.Fatalf("first heartbeat: %d %v", n, err)
	}
	if n, err := Heartbeat(ctx, rdb, key, "b", time.Minute); err != nil || n != 2 {
		t.Fatalf("second instance: %d %v", n, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := Heartbeat(ctx, rdb, key, "b", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's 50 ms lifetime ran out 5 s ago but %d instances are live", n)
		}
		time.Sleep(20 * time.Millisecond) // polling the condition
	}
}
