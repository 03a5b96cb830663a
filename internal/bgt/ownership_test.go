package bgt

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

func TestShare(t *testing.T) {
	for _, tc := range []struct{ parts, live, want int }{
		{64, 1, 64}, {64, 2, 32}, {64, 3, 22}, {16, 0, 16}, {1, 5, 1}, {64, 64, 1}, {10, 4, 3},
	} {
		if got := Share(tc.parts, tc.live); got != tc.want {
			t.Errorf("Share(%d, %d) = %d, want %d", tc.parts, tc.live, got, tc.want)
		}
	}
}

func TestExcess(t *testing.T) {
	for _, tc := range []struct {
		owned []int
		want  int
		drop  []int
	}{
		{[]int{3, 1, 2}, 3, nil},
		{[]int{5, 1, 9, 2}, 2, []int{5, 9}},
		{[]int{4}, 0, []int{4}},
		{nil, 4, nil},
	} {
		if got := Excess(tc.owned, tc.want); !reflect.DeepEqual(got, tc.drop) {
			t.Errorf("Excess(%v, %d) = %v, want %v", tc.owned, tc.want, got, tc.drop)
		}
	}
}

func TestCandidatesCoverAll(t *testing.T) {
	c := Candidates(16, "sidecar-a")
	seen := map[int]bool{}
	for _, p := range c {
		seen[p] = true
	}
	if len(c) != 16 || len(seen) != 16 {
		t.Fatalf("Candidates = %v; want every partition once", c)
	}
}

// TestOwnershipConverges simulates sidecars ticking with the real Share,
// Excess and Candidates against a shared owner table: every partition ends
// up owned, nobody owns more than its share, and a dead sidecar's
// partitions move.
func TestOwnershipConverges(t *testing.T) {
	const parts = 64
	owner := map[int]string{}
	tick := func(id string, live int) {
		want := Share(parts, live)
		var mine []int
		for p, o := range owner {
			if o == id {
				mine = append(mine, p)
			}
		}
		for _, p := range Excess(mine, want) {
			delete(owner, p)
		}
		n := len(mine) - len(Excess(mine, want))
		for _, p := range Candidates(parts, id) {
			if n >= want {
				break
			}
			if _, taken := owner[p]; !taken {
				owner[p] = id
				n++
			}
		}
	}
	ids := []string{"a", "b", "c"}
	for range 4 {
		for _, id := range ids {
			tick(id, len(ids))
		}
	}
	counts := map[string]int{}
	for _, o := range owner {
		counts[o]++
	}
	if len(owner) != parts {
		t.Fatalf("%d of %d partitions owned", len(owner), parts)
	}
	for id, n := range counts {
		if n > Share(parts, len(ids)) {
			t.Errorf("%s owns %d > share", id, n)
		}
	}
	// c dies: its leases expire.
	for p, o := range owner {
		if o == "c" {
			delete(owner, p)
		}
	}
	for range 2 {
		for _, id := range ids[:2] {
			tick(id, 2)
		}
	}
	if len(owner) != parts {
		t.Fatalf("after c died, %d of %d partitions owned", len(owner), parts)
	}
	_ = time.Second
}

func TestPickRoundRobin(t *testing.T) {
	lists := [][]string{{"a1", "a2", "a3"}, {"b1"}, {}, {"d1", "d2"}}
	got := Pick([]int{0, 1, 2, 3}, lists, 5)
	var names []string
	for _, r := range got {
		names = append(names, fmt.Sprintf("%d:%s", r.Part, r.Member))
	}
	want := []string{"0:a1", "1:b1", "3:d1", "0:a2", "3:d2"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("Pick = %v, want %v", names, want)
	}
	if n := len(Pick([]int{0, 1, 2, 3}, lists, 100)); n != 6 {
		t.Fatalf("Pick with room for all = %d docs, want 6", n)
	}
}
