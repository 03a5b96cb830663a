package bg

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// List names one of a member's two lists of member ids.
type List uint8

const (
	Friends List = iota // the member's friends
	Pending             // the members whose invitations the member has not answered
)

func (l List) String() string {
	if l == Friends {
		return "friends"
	}
	return "pending"
}

// Graph is the initial social graph: Members members, numbered 0..Members-1,
// each with Friends friends and Pending pending invitations. Friendships
// form a ring lattice (member m is a friend of the Friends/2 members on
// either side of it, modulo Members) and member m has invitations from the
// Pending members just beyond its friends on the right. No member both
// invites and is invited by another, and nobody invites a friend, so every
// relationship starts in a state BG's actions can move on from.
type Graph struct {
	Members, Friends, Pending int
}

// Validate says what is wrong with the graph's sizes, in one sentence.
func (g Graph) Validate() error {
	switch {
	case g.Friends < 0 || g.Friends%2 != 0:
		return fmt.Errorf("bg: --friends must be even and not negative, not %d: friendships form a ring lattice", g.Friends)
	case g.Pending < 0:
		return fmt.Errorf("bg: --pending must not be negative, not %d", g.Pending)
	case g.Members > 1<<30:
		return errors.New("bg: at most 2^30 members")
	case g.Members <= g.Friends+2*g.Pending+1:
		return fmt.Errorf("bg: %d members are too few for %d friends and %d pending invitations each; use more than %d", g.Members, g.Friends, g.Pending, g.Friends+2*g.Pending+1)
	}
	return nil
}

// dist is (x - m) modulo the number of members.
func (g Graph) dist(m, x int32) int {
	d := (int(x) - int(m)) % g.Members
	if d < 0 {
		d += g.Members
	}
	return d
}

// Initially reports whether x is in m's list l in the initial graph.
func (g Graph) Initially(m int32, l List, x int32) bool {
	d := g.dist(m, x)
	h := g.Friends / 2
	if l == Friends {
		return d >= 1 && d <= h || d >= g.Members-h && d > 0
	}
	return d > h && d <= h+g.Pending
}

// Initial is m's list l in the initial graph, in the order it is loaded.
func (g Graph) Initial(m int32, l List) []int32 {
	n := g.Members
	var out []int32
	h := g.Friends / 2
	if l == Friends {
		out = make([]int32, 0, g.Friends)
		for k := 1; k <= h; k++ {
			out = append(out, int32((int(m)+k)%n), int32((int(m)-k+n)%n))
		}
		return out
	}
	out = make([]int32, 0, g.Pending)
	for k := h + 1; k <= h+g.Pending; k++ {
		out = append(out, int32((int(m)+k)%n))
	}
	return out
}

// ID is the document id of member m: "m" and seven or more digits, so that
// ids sort as their numbers do.
func ID(m int32) string { return fmt.Sprintf("m%07d", m) }

// ParseID is the member number of an id made by ID.
func ParseID(id string) (int32, error) {
	n, err := strconv.ParseInt(strings.TrimPrefix(id, "m"), 10, 32)
	if err != nil || !strings.HasPrefix(id, "m") {
		return 0, fmt.Errorf("bg: %q is not a member id", id)
	}
	return int32(n), nil
}

// ProfileFields are the profile's fields, in the order of the table's
// columns: what View Profile shows besides the two counts.
var ProfileFields = []string{"username", "pw", "firstname", "lastname", "gender", "dob", "jdate", "ldate", "address", "email", "tel", "about"}

// Profile is member m's profile, a few hundred bytes of text that depend
// only on m and seed, in the order of ProfileFields.
func Profile(m int32, seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, uint64(m)))
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + r.IntN(26))
		}
		return string(b)
	}
	date := func(y0 int) string {
		return fmt.Sprintf("%04d-%02d-%02d", y0+r.IntN(30), 1+r.IntN(12), 1+r.IntN(28))
	}
	first, last := word(8), word(10)
	return []string{
		"user" + strconv.Itoa(int(m)),
		word(12),
		first,
		last,
		[]string{"F", "M", "X"}[r.IntN(3)],
		date(1950),
		date(1995),
		date(1995),
		fmt.Sprintf("%d %s street, %s", 1+r.IntN(9999), word(10), word(12)),
		first + "." + last + "@example.com",
		fmt.Sprintf("+1-%03d-%03d-%04d", r.IntN(1000), r.IntN(1000), r.IntN(10000)),
		word(40) + " " + word(60) + " " + word(50),
	}
}
