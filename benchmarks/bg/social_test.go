package bg

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMixes(t *testing.T) {
	for _, m := range Mixes {
		sum, reads := 0, 0
		for a, w := range m.Weights {
			sum += w
			if !Action(a).Write() {
				reads += w
			}
		}
		require.Equal(t, 100000, sum, m.Name)
		require.Equal(t, m.Name, map[int]string{90000: "90", 99000: "99", 99900: "99.9"}[reads])
	}
	got, err := ParseMixes("99.9, 90%")
	require.NoError(t, err)
	require.Equal(t, []string{"99.9", "90"}, []string{got[0].Name, got[1].Name})
	_, err = ParseMixes("95")
	require.ErrorContains(t, err, `unknown mix "95"`)
	th, err := ParseThreads("1, 4,16")
	require.NoError(t, err)
	require.Equal(t, []int{1, 4, 16}, th)
	for _, bad := range []string{"4,2", "0", "x", ""} {
		_, err := ParseThreads(bad)
		require.Error(t, err, bad)
	}
	// The chooser's hot 30 % get about 70 % of the draws.
	c := NewChooser(1000, 1)
	hot := map[int32]bool{}
	for _, m := range c.perm[:c.hot] {
		hot[m] = true
	}
	r := rand.New(rand.NewPCG(1, 2))
	n := 0
	for range 100000 {
		if hot[c.Next(r)] {
			n++
		}
	}
	require.InDelta(t, 70000, n, 1500)
}

// TestSocial checks that the generator only plans meaningful actions, never
// two on one pair at once, and keeps its graph consistent.
func TestSocial(t *testing.T) {
	g := Graph{Members: 40, Friends: 4, Pending: 2}
	s := NewSocial(g, NewChooser(g.Members, 3))
	r := rand.New(rand.NewPCG(3, 4))
	var open []Plan
	for k := range 5000 {
		a := Action(int(InviteFriend) + k%4)
		p, ok := s.Plan(a, r)
		if !ok {
			continue
		}
		i, j := p.I, p.J
		require.NotEqual(t, i, j)
		for _, o := range open {
			require.NotEqual(t, pairKey(o.I, o.J), pairKey(i, j), "two actions on one pair at once")
		}
		switch a {
		case InviteFriend:
			require.False(t, has(s.friends[i], j) || has(s.pending[i], j) || has(s.pending[j], i), "%d invites %d", i, j)
		case RejectFriend, AcceptFriend:
			require.True(t, has(s.pending[i], j))
		case ThawFriendship:
			require.True(t, has(s.friends[i], j))
		}
		open = append(open, p)
		if len(open) == 8 { // finish the oldest, applied or (every 7th) failed
			s.Done(open[0], k%7 != 0)
			open = open[1:]
		}
	}
	for _, p := range open {
		s.Done(p, true)
	}
	require.Empty(t, s.busy)
	for m := range int32(g.Members) {
		for x := range s.friends[m] {
			require.True(t, has(s.friends[x], m), "friendship %d-%d one way", m, x)
			require.False(t, has(s.pending[m], x), "%d both friend and inviter of %d", x, m)
		}
		for x := range s.pending[m] {
			require.False(t, has(s.pending[x], m), "%d and %d invite each other", m, x)
		}
	}
}
