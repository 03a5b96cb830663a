package lease

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writeback/writeback/internal/testenv"
)

// held is one column of Table 1: the lease someone else holds.
type held struct {
	name   string
	mode   Mode
	golden bool
}

var columns = []held{
	{"S", Shared, false},
	{"golden S", Shared, true},
	{"X", Exclusive, false},
	{"I", Inhibit, false},
}

// table1 is the paper's Table 1 (rows S and X, columns S and X) with the
// golden S column of its text and the I lease of the IQ framework.
var table1 = []struct {
	req  Mode
	want []Outcome // per column of columns
}{
	{Shared, []Outcome{Grant, Grant, Refuse, Grant}},
	{Exclusive, []Outcome{GrantVoid, Refuse, Refuse, GrantVoid}},
	{Inhibit, []Outcome{Grant, Grant, Refuse, Refuse}},
}

func TestCompatEveryCell(t *testing.T) {
	for _, row := range table1 {
		for i, col := range columns {
			t.Run(row.req.String()+" on "+col.name, func(t *testing.T) {
				if got := Compat(row.req, col.mode, col.golden); got != row.want[i] {
					t.Errorf("Compat(%v, %s) = %v, want %v", row.req, col.name, got, row.want[i])
				}
			})
		}
	}
}

func TestDecide(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	live, dead := now.Add(time.Second), now.Add(-time.Millisecond)
	cases := []struct {
		name   string
		holder string
		req    Mode
		held   []Lease
		want   Decision
	}{
		{"free key", "a", Shared, nil, Decision{Grant: true, Mode: Shared}},
		{"S beside S", "a", Shared, []Lease{{Holder: "b", Mode: Shared, Expires: live}}, Decision{Grant: true, Mode: Shared}},
		{"S on X aborts", "a", Shared, []Lease{{Holder: "b", Mode: Exclusive, Expires: live}}, Decision{Conflict: SharedOnExclusive}},
		{"X wounds S", "a", Exclusive, []Lease{{Holder: "c", Mode: Shared, Expires: live}, {Holder: "b", Mode: Shared, Expires: live}},
			Decision{Grant: true, Mode: Exclusive, Void: []string{"b", "c"}}},
		{"X on golden S aborts", "a", Exclusive, []Lease{{Holder: "b", Mode: Shared, Golden: true, Expires: live}}, Decision{Conflict: ExclusiveOnGolden}},
		{"X on X aborts", "a", Exclusive, []Lease{{Holder: "b", Mode: Exclusive, Expires: live}}, Decision{Conflict: ExclusiveOnX}},
		{"X names the X when a golden S refuses too", "a", Exclusive,
			[]Lease{{Holder: "b", Mode: Shared, Golden: true, Expires: live}, {Holder: "c", Mode: Exclusive, Expires: live}},
			Decision{Conflict: ExclusiveOnX}},
		{"a refused X voids nothing", "a", Exclusive,
			[]Lease{{Holder: "b", Mode: Shared, Expires: live}, {Holder: "c", Mode: Exclusive, Expires: live}},
			Decision{Conflict: ExclusiveOnX}},
		{"X voids a filler", "a", Exclusive, []Lease{{Holder: "i:t", Mode: Inhibit, Expires: live}}, Decision{Grant: true, Mode: Exclusive, Void: []string{"i:t"}}},
		{"upgrade own S to X", "a", Exclusive, []Lease{{Holder: "a", Mode: Shared, Expires: live}}, Decision{Grant: true, Mode: Exclusive}},
		{"upgrade blocked by golden S", "a", Exclusive,
			[]Lease{{Holder: "a", Mode: Shared, Expires: live}, {Holder: "b", Mode: Shared, Golden: true, Expires: live}},
			Decision{Conflict: ExclusiveOnGolden}},
		{"own X satisfies S", "a", Shared, []Lease{{Holder: "a", Mode: Exclusive, Expires: live}}, Decision{Grant: true, Mode: Exclusive}},
		{"one filler only", "i:u", Inhibit, []Lease{{Holder: "i:t", Mode: Inhibit, Expires: live}}, Decision{Conflict: InhibitBusy}},
		{"no fill under X", "i:u", Inhibit, []Lease{{Holder: "b", Mode: Exclusive, Expires: live}}, Decision{Conflict: InhibitBusy}},
		{"fill beside S", "i:u", Inhibit, []Lease{{Holder: "b", Mode: Shared, Golden: true, Expires: live}}, Decision{Grant: true, Mode: Inhibit}},
		{"expired X is dropped and deletes the entry", "a", Shared, []Lease{{Holder: "b", Mode: Exclusive, Expires: dead}},
			Decision{Grant: true, Mode: Shared, Expired: []string{"b"}, DeleteEntry: true}},
		{"expired S deletes the entry too", "a", Exclusive, []Lease{{Holder: "b", Mode: Shared, Golden: true, Expires: now}},
			Decision{Grant: true, Mode: Exclusive, Expired: []string{"b"}, DeleteEntry: true}},
		{"expired I deletes nothing", "i:u", Inhibit, []Lease{{Holder: "i:t", Mode: Inhibit, Expires: dead}},
			Decision{Grant: true, Mode: Inhibit, Expired: []string{"i:t"}}},
		{"own expired S is not held", "a", Exclusive, []Lease{{Holder: "a", Mode: Shared, Expires: dead}},
			Decision{Grant: true, Mode: Exclusive, Expired: []string{"a"}, DeleteEntry: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Decide(tc.holder, tc.req, tc.held, now)
			if got.Grant != tc.want.Grant || got.Mode != tc.want.Mode || got.Conflict != tc.want.Conflict ||
				!slices.Equal(got.Void, tc.want.Void) || !slices.Equal(got.Expired, tc.want.Expired) || got.DeleteEntry != tc.want.DeleteEntry {
				t.Errorf("Decide = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestSortKeys(t *testing.T) {
	got := SortKeys([]string{"b", "a", "c", "a", "b"})
	if !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("SortKeys = %v", got)
	}
}

func TestBackoff(t *testing.T) {
	for n := 1; n < 12; n++ {
		d := Backoff(time.Millisecond, 50*time.Millisecond, n)
		if d < 0 || d > 50*time.Millisecond {
			t.Errorf("Backoff(%d) = %v, outside [0, 50ms]", n, d)
		}
	}
}

func redisClient(t *testing.T) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func testKey(t *testing.T, rdb *redis.Client) Key {
	t.Helper()
	return testKeys(t, rdb, 1)[0]
}

// testKeys returns n keys sharing one hash tag.
func testKeys(t *testing.T, rdb *redis.Client, n int) []Key {
	t.Helper()
	tag := "{" + testenv.UniqueName(t, "lease") + "}"
	var keys []Key
	for i := range n {
		k := Key{Lease: fmt.Sprintf("%s:l:%d", tag, i), Entry: fmt.Sprintf("%s:c:%d", tag, i)}
		t.Cleanup(func() { rdb.Del(context.Background(), k.Lease, k.Entry) })
		keys = append(keys, k)
	}
	return keys
}

// TestLuaMatchesDecide runs every cell of Table 1, live and expired, through
// the Lua library against a real Redis and compares it with Decide.
func TestLuaMatchesDecide(t *testing.T) {
	rdb := redisClient(t)
	ctx := context.Background()
	c := NewClient(rdb)
	for _, row := range table1 {
		for _, col := range columns {
			for _, expired := range []bool{false, true} {
				name := row.req.String() + " on " + col.name
				if expired {
					name += " (expired)"
				}
				t.Run(name, func(t *testing.T) {
					k := testKey(t, rdb)
					rdb.Set(ctx, k.Entry, `{"v":1}`, time.Minute)
					other := "b"
					if col.mode == Inhibit {
						other = "i:other"
					}
					exp := time.Now().Add(time.Minute)
					if expired {
						exp = time.Now().Add(-time.Second)
					}
					l := Lease{Holder: other, Mode: col.mode, Golden: col.golden, Expires: exp}
					if err := Set(ctx, rdb, k, l); err != nil {
						t.Fatal(err)
					}
					holder := "a"
					if row.req == Inhibit {
						holder = "i:mine"
					}
					want := Decide(holder, row.req, []Lease{l}, time.Now())
					ok, conflict, err := c.Acquire(ctx, k, holder, row.req, time.Second)
					if err != nil {
						t.Fatal(err)
					}
					if ok != want.Grant || conflict != want.Conflict {
						t.Fatalf("Lua: granted %v (%q), Decide: %+v", ok, conflict, want)
					}
					after, err := Held(ctx, rdb, k)
					if err != nil {
						t.Fatal(err)
					}
					holders := map[string]Lease{}
					for _, l := range after {
						holders[l.Holder] = l
					}
					_, otherKept := holders[other]
					wantKept := !slices.Contains(want.Void, other) && !slices.Contains(want.Expired, other)
					if otherKept != wantKept {
						t.Errorf("the other's lease kept = %v, want %v (decision %+v)", otherKept, wantKept, want)
					}
					if mine, held := holders[holder]; held != want.Grant || (held && mine.Mode != want.Mode) {
						t.Errorf("requester holds %+v (held %v), want granted %v mode %v", mine, held, want.Grant, want.Mode)
					}
					n, _ := rdb.Exists(ctx, k.Entry).Result()
					if (n == 0) != want.DeleteEntry {
						t.Errorf("entry exists = %v, want deleted = %v", n == 1, want.DeleteEntry)
					}
				})
			}
		}
	}
}

func TestValidateMakesGoldenAndGoldenRefusesX(t *testing.T) {
	rdb := redisClient(t)
	ctx := context.Background()
	c := NewClient(rdb)
	k := testKey(t, rdb)
	if ok, _, err := c.Acquire(ctx, k, "reader", Shared, time.Minute); err != nil || !ok {
		t.Fatalf("S: %v %v", ok, err)
	}
	if i, err := c.Validate(ctx, []Key{k}, "reader"); err != nil || i != -1 {
		t.Fatalf("validate = %d, %v", i, err)
	}
	ok, conflict, err := c.Acquire(ctx, k, "writer", Exclusive, time.Minute)
	if err != nil || ok || conflict != ExclusiveOnGolden {
		t.Fatalf("X on golden S: granted %v conflict %q err %v", ok, conflict, err)
	}
	if err := c.Release(ctx, []Key{k}, "reader"); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := c.Acquire(ctx, k, "writer", Exclusive, time.Minute); err != nil || !ok {
		t.Fatalf("X after release: %v %v", ok, err)
	}
}

func TestValidateFailsAfterWound(t *testing.T) {
	rdb := redisClient(t)
	ctx := context.Background()
	c := NewClient(rdb)
	keys := testKeys(t, rdb, 2)
	k1, k2 := keys[0], keys[1]
	for _, k := range []Key{k1, k2} {
		if ok, _, err := c.Acquire(ctx, k, "reader", Shared, time.Minute); err != nil || !ok {
			t.Fatal(ok, err)
		}
	}
	// A writer wounds the reader on the second key.
	if ok, _, err := c.Acquire(ctx, k2, "writer", Exclusive, time.Minute); err != nil || !ok {
		t.Fatal(ok, err)
	}
	i, err := c.Validate(ctx, []Key{k1, k2}, "reader")
	if err != nil || i != 1 {
		t.Fatalf("validate = %d, %v; want 1 (the voided key)", i, err)
	}
	// Nothing became golden: the writer's X stays, the S on k1 stays plain.
	ls, _ := Held(ctx, rdb, k1)
	for _, l := range ls {
		if l.Golden {
			t.Errorf("a failed validation left %+v golden", l)
		}
	}
}

func TestExpiredLeaseDeletesEntryAndRecordOutlivesIt(t *testing.T) {
	rdb := redisClient(t)
	ctx := context.Background()
	c := NewClient(rdb)
	k := testKey(t, rdb)
	rdb.Set(ctx, k.Entry, `{"half":"updated"}`, time.Minute)
	if ok, _, err := c.Acquire(ctx, k, "dead-writer", Exclusive, 50*time.Millisecond); err != nil || !ok {
		t.Fatal(ok, err)
	}
	// The record must outlive the lease by the entry's lifetime.
	if ttl := rdb.PTTL(ctx, k.Lease).Val(); ttl < 50*time.Second {
		t.Errorf("lease record TTL %v, want at least the entry's remaining minute", ttl)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		ok, _, err := c.Acquire(ctx, k, "reader", Shared, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the expired X never gave way")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := rdb.Exists(ctx, k.Entry).Val(); n != 0 {
		t.Error("the entry guarded by an expired X lease was not deleted")
	}
}
