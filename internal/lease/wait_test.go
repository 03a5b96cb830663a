package lease

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// requestCase is one request against a key's leases and wait queue; times
// are relative to now (live: +1 min, dead: -1 s).
type requestCase struct {
	name  string
	w     Waiter
	held  []Lease
	queue []Waiter
	want  Judgement
}

func requestCases(now time.Time) []requestCase {
	live, dead := now.Add(time.Minute), now.Add(-time.Second)
	dl, past := now.Add(time.Minute).UnixMilli(), now.Add(-time.Second).UnixMilli()
	x := func(h string, start int64) Lease {
		return Lease{Holder: h, Mode: Exclusive, Expires: live, Start: start}
	}
	me := func(m Mode, start int64) Waiter { return Waiter{ID: "a", Mode: m, Start: start, Deadline: dl} }
	q := func(id string, m Mode, start int64) Waiter {
		return Waiter{ID: id, Mode: m, Start: start, Deadline: dl}
	}
	return []requestCase{
		{"free key", me(Exclusive, 5), nil, nil, Judgement{Verdict: Granted, Mode: Exclusive}},
		{"younger S waits for an older X", me(Shared, 5), []Lease{x("h", 1)}, nil, Judgement{Verdict: Wait, Conflict: SharedOnExclusive}},
		{"younger X waits for an older X", me(Exclusive, 5), []Lease{x("h", 1)}, nil, Judgement{Verdict: Wait, Conflict: ExclusiveOnX}},
		{"older S wounds a younger X", me(Shared, 1), []Lease{x("h", 5)}, nil, Judgement{Verdict: Granted, Mode: Shared, Void: []string{"h"}}},
		{"older X wounds a younger X", me(Exclusive, 1), []Lease{x("h", 5)}, nil, Judgement{Verdict: Granted, Mode: Exclusive, Void: []string{"h"}}},
		{"starts in µs keep every digit", me(Exclusive, 1764000000000001), []Lease{x("h", 1764000000000002)}, []Waiter{q("b", Shared, 1764000000000003)},
			Judgement{Verdict: Wait, Conflict: Queued}},
		{"µs: a younger X by one µs waits", me(Exclusive, 1764000000000002), []Lease{x("h", 1764000000000001)}, nil,
			Judgement{Verdict: Wait, Conflict: ExclusiveOnX}},
		{"same start: the smaller id is older", me(Exclusive, 5), []Lease{x("h", 5)}, nil, Judgement{Verdict: Granted, Mode: Exclusive, Void: []string{"h"}}},
		{"an X of unknown age is waited for", me(Exclusive, 1), []Lease{x("h", 0)}, nil, Judgement{Verdict: Wait, Conflict: ExclusiveOnX}},
		{"X on golden S is refused, whatever the age", me(Exclusive, 1),
			[]Lease{{Holder: "h", Mode: Shared, Golden: true, Expires: live, Start: 5}}, nil, Judgement{Verdict: Refused, Conflict: ExclusiveOnGolden}},
		{"X voids an older S (Table 1)", me(Exclusive, 5),
			[]Lease{{Holder: "h", Mode: Shared, Expires: live, Start: 1}}, nil, Judgement{Verdict: Granted, Mode: Exclusive, Void: []string{"h"}}},
		{"an expired X is no obstacle", me(Exclusive, 5), []Lease{{Holder: "h", Mode: Exclusive, Expires: dead, Start: 1}}, nil,
			Judgement{Verdict: Granted, Mode: Exclusive}},
		{"queued behind an earlier waiter, even a younger one", me(Exclusive, 1), nil, []Waiter{q("b", Exclusive, 9)},
			Judgement{Verdict: Wait, Conflict: Queued}},
		{"S behind S waiters is granted", me(Shared, 5), nil, []Waiter{q("b", Shared, 1)}, Judgement{Verdict: Granted, Mode: Shared}},
		{"S behind an X waiter waits", me(Shared, 5), nil, []Waiter{q("b", Exclusive, 1)}, Judgement{Verdict: Wait, Conflict: Queued}},
		{"the head of the queue is granted once free", me(Exclusive, 5), nil, []Waiter{me(Exclusive, 5), q("b", Exclusive, 1)},
			Judgement{Verdict: Granted, Mode: Exclusive}},
		{"a waiter past its deadline is ignored", me(Exclusive, 5), nil, []Waiter{{ID: "b", Mode: Exclusive, Start: 1, Deadline: past}},
			Judgement{Verdict: Granted, Mode: Exclusive}},
		{"out of time", Waiter{ID: "a", Mode: Exclusive, Start: 5, Deadline: past}, []Lease{x("h", 1)}, nil,
			Judgement{Verdict: TimedOut, Conflict: ExclusiveOnX}},
		{"an X holder reads again past the waiters", me(Shared, 5), []Lease{x("a", 5)}, []Waiter{q("b", Exclusive, 1)},
			Judgement{Verdict: Granted, Mode: Exclusive}},
	}
}

func TestRequest(t *testing.T) {
	now := time.UnixMilli(1_000_000_000)
	for _, tc := range requestCases(now) {
		t.Run(tc.name, func(t *testing.T) {
			got := Request(tc.w, tc.held, tc.queue, now.UnixMilli())
			if got.Verdict != tc.want.Verdict || got.Mode != tc.want.Mode || got.Conflict != tc.want.Conflict || !slices.Equal(got.Void, tc.want.Void) {
				t.Errorf("Request = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestLuaMatchesRequest runs every case through lease_request on a real
// Redis: the same judgement, the voided leases gone, the requester's lease
// set when granted, and the requester queued exactly when it waits.
func TestLuaMatchesRequest(t *testing.T) {
	rdb := redisClient(t)
	ctx := context.Background()
	c := NewClient(rdb)
	for _, tc := range requestCases(time.Now()) {
		t.Run(tc.name, func(t *testing.T) {
			k := testKey(t, rdb)
			k.Wait = k.Lease + ":w"
			t.Cleanup(func() { rdb.Del(context.Background(), k.Wait) })
			for _, l := range tc.held {
				if err := Set(ctx, rdb, k, l); err != nil {
					t.Fatal(err)
				}
			}
			for i, w := range tc.queue {
				rdb.ZAdd(ctx, k.Wait, redisZ(float64(i+1), w.Member()))
			}
			got, err := c.Request(ctx, k, tc.w, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if got.Verdict != tc.want.Verdict || got.Mode != tc.want.Mode || got.Conflict != tc.want.Conflict || !slices.Equal(got.Void, tc.want.Void) {
				t.Fatalf("Lua = %+v, want %+v", got, tc.want)
			}
			after, err := Held(ctx, rdb, k)
			if err != nil {
				t.Fatal(err)
			}
			if got.Verdict == Granted && !slices.ContainsFunc(after, func(l Lease) bool { return l.Holder == tc.w.ID }) {
				t.Errorf("granted, but the record holds no lease of the requester: %+v", after)
			}
			// The record expires with its last lease (the request knows
			// them without reading them again), or is gone with none.
			last := time.Time{}
			for _, l := range after {
				if l.Expires.After(last) {
					last = l.Expires
				}
			}
			if ttl := rdb.PTTL(ctx, k.Lease).Val(); len(after) == 0 && ttl != -2*time.Nanosecond {
				t.Errorf("a record without leases is kept (TTL %v)", ttl)
			} else if len(after) > 0 && ttl < time.Until(last) {
				t.Errorf("the record expires in %v, before its last lease (%v)", ttl, time.Until(last))
			}
			for _, l := range after {
				if slices.Contains(got.Void, l.Holder) {
					t.Errorf("voided lease of %s still held", l.Holder)
				}
				if l.Holder == tc.w.ID && got.Verdict == Granted && (l.Mode != got.Mode || l.Start != tc.w.Start) {
					t.Errorf("the requester holds %+v, want mode %v start %d", l, got.Mode, tc.w.Start)
				}
			}
			ws, err := Waiters(ctx, rdb, k)
			if err != nil {
				t.Fatal(err)
			}
			queued := slices.ContainsFunc(ws, func(w Waiter) bool { return w == tc.w })
			if queued != (got.Verdict == Wait) {
				t.Errorf("requester queued = %v after a %v", queued, got.Verdict)
			}
			if slices.ContainsFunc(ws, func(w Waiter) bool { return w.Deadline < time.Now().UnixMilli() }) {
				t.Errorf("a waiter past its deadline is still queued: %+v", ws)
			}
		})
	}
}

func redisZ(score float64, member string) redis.Z { return redis.Z{Score: score, Member: member} }
