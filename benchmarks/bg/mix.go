package bg

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/writeback/writeback/benchmarks/bench"
)

// Action is one of BG's seven social actions.
type Action uint8

const (
	ViewProfile    Action = iota // a member's profile, friend count and pending count
	ListFriends                  // the profiles of up to ListLimit of a member's friends
	ListPending                  // the profiles of up to ListLimit members who invited a member
	InviteFriend                 // i invites j: i joins j's pending
	RejectFriend                 // i rejects j's invitation: j leaves i's pending
	AcceptFriend                 // i accepts j's invitation: j leaves i's pending, each joins the other's friends
	ThawFriendship               // i and j stop being friends
	numActions
)

// ListLimit is how many profiles List Friends and List Pending Friends
// show, as in the paper ("10 out of 100").
const ListLimit = 10

var actionNames = [numActions]string{"view-profile", "list-friends", "list-pending", "invite", "reject", "accept", "thaw"}

func (a Action) String() string { return actionNames[a] }

// Write reports whether the action changes the graph.
func (a Action) Write() bool { return a >= InviteFriend }

// Mix is a workload of the paper's Table 4: how often each action runs, in
// hundred-thousandths.
type Mix struct {
	Name    string // "90", "99", "99.9": the percentage of reads
	Weights [numActions]int
}

// Mixes are the paper's Table 4.
var Mixes = []Mix{
	{"90", [numActions]int{80000, 5000, 5000, 4000, 2000, 2000, 2000}},
	{"99", [numActions]int{89000, 5000, 5000, 400, 200, 200, 200}},
	{"99.9", [numActions]int{89900, 5000, 5000, 40, 20, 20, 20}},
}

// ParseMixes parses "90,99,99.9" into mixes of Mixes, in the order given.
func ParseMixes(s string) ([]Mix, error) {
	var out []Mix
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSuffix(strings.TrimSpace(name), "%")
		if name == "" {
			continue
		}
		found := false
		for _, m := range Mixes {
			if m.Name == name {
				out, found = append(out, m), true
			}
		}
		if !found {
			return nil, fmt.Errorf("bg: unknown mix %q; use some of 90,99,99.9 (the percentage of reads)", name)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bg: no mix given; use some of 90,99,99.9")
	}
	return out, nil
}

// Pick draws an action.
func (m Mix) Pick(r *rand.Rand) Action {
	n := r.IntN(100000)
	for a, w := range m.Weights {
		if n < w {
			return Action(a)
		}
		n -= w
	}
	return ViewProfile
}

// ParseThreads parses "1,4,16" into increasing thread counts.
func ParseThreads(s string) ([]int, error) {
	out, err := bench.ParseInts("--threads", s, 4096)
	if err != nil {
		return nil, fmt.Errorf("bg: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bg: no thread count given in --threads")
	}
	for i := 1; i < len(out); i++ {
		if out[i] <= out[i-1] {
			return nil, fmt.Errorf("bg: --threads must increase (a ramp), but %d follows %d", out[i], out[i-1])
		}
	}
	return out, nil
}

// Chooser picks members with BG's skew, "30 % of members serve as
// socialites or referenced members by 70 % of actions": a fixed random
// 30 % of the members is chosen uniformly with probability 0.7, the rest
// uniformly otherwise.
type Chooser struct {
	perm []int32 // a permutation of the members; its first hot are the hot ones
	hot  int
}

// NewChooser returns a chooser over n members, its hot set drawn from seed.
func NewChooser(n int, seed uint64) *Chooser {
	r := rand.New(rand.NewPCG(seed, 0x6267))
	perm := make([]int32, n)
	for i := range perm {
		perm[i] = int32(i)
	}
	r.Shuffle(n, func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	return &Chooser{perm: perm, hot: max(1, n*3/10)}
}

// Next draws a member.
func (c *Chooser) Next(r *rand.Rand) int32 {
	if r.IntN(10) < 7 || c.hot == len(c.perm) {
		return c.perm[r.IntN(c.hot)]
	}
	return c.perm[c.hot+r.IntN(len(c.perm)-c.hot)]
}
