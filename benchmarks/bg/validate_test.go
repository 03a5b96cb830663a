package bg

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestGraph(t *testing.T) {
	g := Graph{Members: 20, Friends: 4, Pending: 2}
	require.NoError(t, g.Validate())
	for m := range int32(g.Members) {
		for _, l := range []List{Friends, Pending} {
			init := g.Initial(m, l)
			n := 0
			for x := range int32(g.Members) {
				if g.Initially(m, l, x) {
					n++
					require.Contains(t, init, x, "%d %s", m, l)
				}
			}
			require.Equal(t, len(init), n)
		}
		for _, x := range g.Initial(m, Pending) {
			require.False(t, g.Initially(m, Friends, x), "an invitation from a friend")
			require.False(t, g.Initially(x, Pending, m), "invitations both ways between %d and %d", m, x)
			require.True(t, g.Initially(x, Friends, m) == g.Initially(m, Friends, x))
		}
	}
	require.Equal(t, []int32{1, 19, 2, 18}, g.Initial(0, Friends))
	require.Equal(t, []int32{3, 4}, g.Initial(0, Pending))
	require.ErrorContains(t, Graph{Members: 7, Friends: 4, Pending: 1}.Validate(), "too few")
	require.ErrorContains(t, Graph{Members: 70, Friends: 3}.Validate(), "even")
	m, err := ParseID(ID(1234))
	require.NoError(t, err)
	require.Equal(t, int32(1234), m)
	_, err = ParseID("x12")
	require.Error(t, err)
}

// TestValidate is the mutation check of the validator: reads that miss a
// completed write, show one that had not started, or list members wrongly
// are flagged; reads overlapping a write may show it or not.
func TestValidate(t *testing.T) {
	g := Graph{Members: 20, Friends: 4, Pending: 2}
	// Member 0: friends 1 19 2 18, pending 3 4. From 10 ms to 20 ms, 5
	// joins 0's friends (accept: 5 leaves nothing, it was not pending);
	// from 30 to 40 ms, 1 leaves them; from 50 to 60 ms, 3's invitation
	// is rejected.
	changes := []Change{
		{M: 0, X: 5, List: Friends, Add: true, Start: ms(10), End: ms(20)},
		{M: 0, X: 1, List: Friends, Add: false, Start: ms(30), End: ms(40)},
		{M: 0, X: 3, List: Pending, Add: false, Start: ms(50), End: ms(60)},
	}
	view := func(s, e int, f, p int32) Read {
		return Read{Action: ViewProfile, M: 0, Start: ms(s), End: ms(e), Friends: f, Pending: p}
	}
	list := func(s, e int, f int32, listed ...int32) Read {
		return Read{Action: ListFriends, M: 0, Start: ms(s), End: ms(e), Friends: f, Pending: -1, Listed: listed}
	}
	cases := []struct {
		name  string
		read  Read
		stale string // "" when the read is fine
	}{
		{"before any write", view(0, 5, 4, 2), ""},
		{"misses the completed add", view(25, 26, 4, 2), "friends count 4, but the acknowledged writes make it 5"},
		{"shows the completed add", view(25, 26, 5, 2), ""},
		{"overlapping the add, without it", view(15, 16, 4, 2), ""},
		{"overlapping the add, with it", view(15, 16, 5, 2), ""},
		{"overlapping the add from before it", view(5, 12, 5, 2), ""},
		{"shows the add before it started", view(1, 5, 5, 2), "friends count 5, but the acknowledged writes make it 4"},
		{"overlapping the removal", view(35, 36, 5, 2), ""},
		{"overlapping the removal, with it", view(35, 36, 4, 2), ""},
		{"misses the removal", view(45, 46, 5, 2), "friends count 5, but the acknowledged writes make it 4"},
		{"misses the rejection", view(65, 70, 4, 2), "pending count 2, but the acknowledged writes make it 1"},
		{"after everything", view(65, 70, 4, 1), ""},
		{"lists the complete list", list(45, 46, 4, 19, 2, 18, 5), ""},
		{"lists a removed friend", list(45, 46, 4, 1, 2, 18, 5), "listed m0000001 among its friends, which no acknowledged write allows"},
		{"omits the new friend", list(25, 26, 5, 1, 19, 2, 18, 6), "listed m0000006 among its friends"},
		{"omits a friend from a complete list", list(45, 46, 3, 19, 2, 18), "friends count 3"},
		{"lists a friend twice", list(45, 46, 4, 19, 2, 2, 5), "listed m0000002 twice"},
		{"lists fewer than it counts", list(45, 46, 4, 19, 2, 5), "listed 3 of 4 friends, not 4"},
		{"overlapping list may show the removed friend", list(35, 36, 5, 1, 19, 2, 18, 5), ""},
		{"overlapping list may leave it out", list(35, 36, 4, 19, 2, 18, 5), ""},
		{"complete list without an uncertain member", list(15, 16, 4, 1, 19, 2, 18), ""},
		{"complete list after the add", list(25, 26, 5, 1, 19, 2, 18, 5), ""},
		{"complete list without a certain member", list(35, 36, 4, 1, 19, 2, 18), "left m0000005 out of its friends (4 listed)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.read.Mix = 1
			v := Validate(g, &History{Changes: changes, Reads: []Read{tc.read}}, 5)
			require.Equal(t, 1, v.Reads)
			require.Len(t, v.ByMix, 2)
			require.Equal(t, Counts{Reads: 1, Stale: v.Stale}, v.ByMix[1])
			if tc.stale == "" {
				require.Zero(t, v.Stale, "%v", v.Samples)
				return
			}
			require.Equal(t, 1, v.Stale)
			require.Len(t, v.Samples, 1)
			require.Contains(t, v.Samples[0], tc.stale)
			require.True(t, strings.HasPrefix(v.Samples[0], tc.read.Action.String()+" of m0000000 from "), v.Samples[0])
		})
	}
}

func TestCheckFinal(t *testing.T) {
	g := Graph{Members: 8, Friends: 2, Pending: 1}
	changes := []Change{
		{M: 0, X: 4, List: Pending, Add: true, Start: ms(1), End: ms(2)},
		{M: 0, X: 4, List: Pending, Add: false, Start: ms(3), End: ms(4)},
		{M: 0, X: 5, List: Friends, Add: true, Start: ms(5), End: ms(6)},
	}
	stored := map[int32]Stored{}
	for m := range int32(g.Members) {
		stored[m] = Stored{Friends: g.Initial(m, Friends), Pending: g.Initial(m, Pending)}
	}
	stored[0] = Stored{Friends: []int32{5, 1, 7}, Pending: []int32{2}}
	bad, diffs := CheckFinal(g, changes, stored, 5)
	require.Zero(t, bad, "%v", diffs)

	stored[0] = Stored{Friends: []int32{1, 7}, Pending: []int32{2, 4}}
	delete(stored, 3)
	stored[6] = Stored{Friends: []int32{7, 5, 7}, Pending: []int32{0}}
	bad, diffs = CheckFinal(g, changes, stored, 5)
	require.Equal(t, 4, bad)
	require.Equal(t, []string{
		"m0000000's friends: holds [] that it should not and lacks [m0000005]",
		"m0000000's pending: holds [m0000004] that it should not and lacks []",
		"m0000003 is missing from the store",
		"m0000006's friends: m0000007 appears twice",
	}, diffs)
}
