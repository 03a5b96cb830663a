package bg

import (
	"math/rand/v2"
	"sync"
)

// Op adds member X to, or removes it from, one of a member's lists.
type Op struct {
	List List
	X    int32
	Add  bool
}

// Update is what a write action changes in one member's document.
type Update struct {
	M   int32
	Ops []Op
}

// Plan is a write action about to run: who acts on whom, and the updates,
// one per member document, in the order they are made.
type Plan struct {
	Action  Action
	I, J    int32
	Updates []Update
}

// Social is the benchmark's own view of the graph, with which it generates
// only meaningful write actions, as BG does: invitations between members
// that are neither friends nor invited either way, answers to existing
// invitations, thaws of existing friendships. It reserves the pair of
// members of an action while the action runs, so that two threads never act
// on one relationship at once: a relationship's writes then never overlap,
// which the validation relies on.
type Social struct {
	mu      sync.Mutex           // guards friends, pending and busy
	friends []map[int32]struct{} // friends[m]: m's friends
	pending []map[int32]struct{} // pending[m]: the members who invited m
	busy    map[uint64]struct{}  // pairs (pairKey) an action is running on
	chooser *Chooser
}

// NewSocial starts from the initial graph g.
func NewSocial(g Graph, c *Chooser) *Social {
	s := &Social{
		friends: make([]map[int32]struct{}, g.Members),
		pending: make([]map[int32]struct{}, g.Members),
		busy:    map[uint64]struct{}{},
		chooser: c,
	}
	for m := range int32(g.Members) {
		s.friends[m] = set(g.Initial(m, Friends))
		s.pending[m] = set(g.Initial(m, Pending))
	}
	return s
}

func set(xs []int32) map[int32]struct{} {
	s := make(map[int32]struct{}, len(xs))
	for _, x := range xs {
		s[x] = struct{}{}
	}
	return s
}

func pairKey(a, b int32) uint64 {
	if a > b {
		a, b = b, a
	}
	return uint64(a)<<32 | uint64(uint32(b))
}

// attempts bounds the socialites a plan tries before giving up.
const attempts = 20

// Plan reserves a pair for write action a and returns what to do, or false
// when no socialite drawn has a relationship the action applies to (the
// caller runs a read instead). Call Done with the plan when it has run.
func (s *Social) Plan(a Action, r *rand.Rand) (Plan, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range attempts {
		i := s.chooser.Next(r)
		var j int32 = -1
		switch a {
		case InviteFriend:
			j = s.chooser.Next(r)
			if j == i || has(s.friends[i], j) || has(s.pending[i], j) || has(s.pending[j], i) || s.isBusy(i, j) {
				j = -1
			}
		case RejectFriend, AcceptFriend:
			j = s.free(i, s.pending[i])
		case ThawFriendship:
			j = s.free(i, s.friends[i])
		}
		if j < 0 {
			continue
		}
		s.busy[pairKey(i, j)] = struct{}{}
		p := Plan{Action: a, I: i, J: j}
		switch a {
		case InviteFriend:
			p.Updates = []Update{{M: j, Ops: []Op{{Pending, i, true}}}}
		case RejectFriend:
			p.Updates = []Update{{M: i, Ops: []Op{{Pending, j, false}}}}
		case AcceptFriend:
			p.Updates = []Update{{M: i, Ops: []Op{{Pending, j, false}, {Friends, j, true}}}, {M: j, Ops: []Op{{Friends, i, true}}}}
		case ThawFriendship:
			p.Updates = []Update{{M: i, Ops: []Op{{Friends, j, false}}}, {M: j, Ops: []Op{{Friends, i, false}}}}
		}
		return p, true
	}
	return Plan{}, false
}

// free returns a member of xs whose pair with i is not reserved, or -1.
// Map iteration starts at a random element, so the choice is random too.
func (s *Social) free(i int32, xs map[int32]struct{}) int32 {
	for x := range xs {
		if !s.isBusy(i, x) {
			return x
		}
	}
	return -1
}

func (s *Social) isBusy(a, b int32) bool {
	_, ok := s.busy[pairKey(a, b)]
	return ok
}

func has(s map[int32]struct{}, x int32) bool {
	_, ok := s[x]
	return ok
}

// Done releases p's pair; if applied, the graph takes p's updates first.
func (s *Social) Done(p Plan, applied bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if applied {
		for _, u := range p.Updates {
			for _, op := range u.Ops {
				l := s.friends[u.M]
				if op.List == Pending {
					l = s.pending[u.M]
				}
				if op.Add {
					l[op.X] = struct{}{}
				} else {
					delete(l, op.X)
				}
			}
		}
	}
	delete(s.busy, pairKey(p.I, p.J))
}
