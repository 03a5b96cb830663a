package bg

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Change is one acknowledged change of one relationship: X joined or left
// M's list, by a write that started at Start and was acknowledged at End
// (durations on the run's clock).
type Change struct {
	M, X       int32
	List       List
	Add        bool
	Start, End time.Duration
}

// Read is what one read action observed: the counts of the member's lists
// (-1 when the action does not show one) and, for the two list actions,
// the ids it listed (of Friends for List Friends, of Pending for List
// Pending Friends). Mix is the index of the mix it ran in.
type Read struct {
	Action           Action
	M                int32
	Start, End       time.Duration
	Mix              int
	Friends, Pending int32
	Listed           []int32
}

// History is the log of a run: every acknowledged change and every read.
type History struct {
	Changes []Change
	Reads   []Read
}

// Validation is the outcome of BG's validation of a history.
type Validation struct {
	Reads   int      `json:"reads"`             // reads checked
	Stale   int      `json:"stale"`             // reads that showed a value no acknowledged write allows
	ByMix   []Counts `json:"by_mix"`            // the same per mix (index of Read.Mix)
	Samples []string `json:"samples,omitempty"` // the first stale reads, explained
}

// Counts are reads checked and stale reads.
type Counts struct {
	Reads int `json:"reads"`
	Stale int `json:"stale"`
}

// StalePct is the percentage of stale reads.
func (v Validation) StalePct() float64 {
	if v.Reads == 0 {
		return 0
	}
	return 100 * float64(v.Stale) / float64(v.Reads)
}

type rel struct {
	m int32
	l List
}

// timelines are, per list of a member, per other member, the changes of
// that relationship ordered by start. The actions reserve the pair of
// members they act on, so a relationship's changes never overlap in time.
type timelines map[rel]map[int32][]Change

func index(changes []Change) timelines {
	t := timelines{}
	for _, c := range changes {
		k := rel{c.M, c.List}
		if t[k] == nil {
			t[k] = map[int32][]Change{}
		}
		t[k][c.X] = append(t[k][c.X], c)
	}
	for _, byX := range t {
		for _, cs := range byX {
			sort.Slice(cs, func(i, j int) bool { return cs[i].Start < cs[j].Start })
		}
	}
	return t
}

// allowed reports which memberships a read running from rs to re may
// observe for a relationship that started as init and changed by cs: the
// state after the last change acknowledged before the read started, and
// that of every change overlapping the read (it may or may not show).
func allowed(cs []Change, init bool, rs, re time.Duration) (canIn, canOut bool) {
	v := init
	for _, c := range cs {
		switch {
		case c.End < rs:
			v = c.Add
		case c.Start <= re:
			if c.Add {
				canIn = true
			} else {
				canOut = true
			}
		}
	}
	if v {
		canIn = true
	} else {
		canOut = true
	}
	return canIn, canOut
}

// Validate checks every read of h against the acknowledged changes of h,
// starting from the graph g, and explains up to samples stale reads.
func Validate(g Graph, h *History, samples int) Validation {
	t := index(h.Changes)
	var v Validation
	for _, r := range h.Reads {
		for len(v.ByMix) <= r.Mix {
			v.ByMix = append(v.ByMix, Counts{})
		}
		v.Reads++
		v.ByMix[r.Mix].Reads++
		if why := checkRead(g, t, r); why != "" {
			v.Stale++
			v.ByMix[r.Mix].Stale++
			if len(v.Samples) < samples {
				v.Samples = append(v.Samples, fmt.Sprintf("%s of %s from %.6fs to %.6fs: %s", r.Action, ID(r.M), r.Start.Seconds(), r.End.Seconds(), why))
			}
		}
	}
	return v
}

func checkRead(g Graph, t timelines, r Read) string {
	check := func(l List, count int32, listed []int32) string {
		if count < 0 {
			return ""
		}
		byX := t[rel{r.M, l}]
		initN := g.Friends
		if l == Pending {
			initN = g.Pending
		}
		lo, hi := initN, initN
		for x, cs := range byX {
			init := g.Initially(r.M, l, x)
			if init {
				lo--
				hi--
			}
			in, out := allowed(cs, init, r.Start, r.End)
			if in {
				hi++
				if !out {
					lo++
				}
			}
		}
		if int(count) < lo || int(count) > hi {
			if lo == hi {
				return fmt.Sprintf("%s count %d, but the acknowledged writes make it %d", l, count, lo)
			}
			return fmt.Sprintf("%s count %d, but the acknowledged writes allow only %d to %d", l, count, lo, hi)
		}
		if listed == nil {
			return ""
		}
		if want := min(int(count), ListLimit); len(listed) != want {
			return fmt.Sprintf("listed %d of %d %s, not %d", len(listed), count, l, want)
		}
		seen := make(map[int32]bool, len(listed))
		for _, x := range listed {
			if seen[x] {
				return fmt.Sprintf("listed %s twice among its %s", ID(x), l)
			}
			seen[x] = true
			in := g.Initially(r.M, l, x)
			if cs, ok := byX[x]; ok {
				in, _ = allowed(cs, in, r.Start, r.End)
			}
			if !in {
				return fmt.Sprintf("listed %s among its %s, which no acknowledged write allows", ID(x), l)
			}
		}
		if int(count) > ListLimit {
			return ""
		}
		// The whole list was shown: it must hold every member that is
		// certainly in it.
		must := func(x int32) string {
			if !seen[x] {
				return fmt.Sprintf("left %s out of its %s (%d listed), but the acknowledged writes put it there", ID(x), l, len(listed))
			}
			return ""
		}
		for _, x := range g.Initial(r.M, l) {
			if _, ok := byX[x]; !ok {
				if why := must(x); why != "" {
					return why
				}
			}
		}
		for x, cs := range byX {
			if in, out := allowed(cs, g.Initially(r.M, l, x), r.Start, r.End); in && !out {
				if why := must(x); why != "" {
					return why
				}
			}
		}
		return ""
	}
	switch r.Action {
	case ViewProfile:
		if why := check(Friends, r.Friends, nil); why != "" {
			return why
		}
		return check(Pending, r.Pending, nil)
	case ListFriends:
		return check(Friends, r.Friends, r.Listed)
	case ListPending:
		return check(Pending, r.Pending, r.Listed)
	}
	return fmt.Sprintf("%s is not a read", r.Action)
}

// Stored is a member's two lists as a store holds them.
type Stored struct {
	Friends, Pending []int32
}

// CheckFinal compares the lists of every member in stored with what the
// acknowledged changes, applied in order to g, leave, and describes up to
// samples differences. It returns how many lists differ.
func CheckFinal(g Graph, changes []Change, stored map[int32]Stored, samples int) (bad int, diffs []string) {
	t := index(changes)
	report := func(s string) {
		bad++
		if len(diffs) < samples {
			diffs = append(diffs, s)
		}
	}
	for m := range int32(g.Members) {
		st, ok := stored[m]
		if !ok {
			report(fmt.Sprintf("%s is missing from the store", ID(m)))
			continue
		}
		for _, l := range []List{Friends, Pending} {
			got := st.Friends
			if l == Pending {
				got = st.Pending
			}
			want := set(g.Initial(m, l))
			for x, cs := range t[rel{m, l}] {
				if cs[len(cs)-1].Add {
					want[x] = struct{}{}
				} else {
					delete(want, x)
				}
			}
			if diff := setDiff(got, want); diff != "" {
				report(fmt.Sprintf("%s's %s: %s", ID(m), l, diff))
			}
		}
	}
	return bad, diffs
}

func setDiff(got []int32, want map[int32]struct{}) string {
	seen := map[int32]bool{}
	var extra, missing []string
	for _, x := range got {
		if seen[x] {
			return fmt.Sprintf("%s appears twice", ID(x))
		}
		seen[x] = true
		if _, ok := want[x]; !ok {
			extra = append(extra, ID(x))
		}
	}
	for x := range want {
		if !seen[x] {
			missing = append(missing, ID(x))
		}
	}
	if len(extra) == 0 && len(missing) == 0 {
		return ""
	}
	slices.Sort(extra)
	slices.Sort(missing)
	return fmt.Sprintf("holds %v that it should not and lacks %v", extra, missing)
}
