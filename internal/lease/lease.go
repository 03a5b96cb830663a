// Package lease owns the leases of Design 2 (the paper's Table 1) and the
// I leases that protect cache fills (the IQ framework): the compatibility
// rules as a pure function, Decide, and their twin in Lua, which the
// session scripts include so that a lease is granted, voided or found
// expired in the same atomic step as the cache change it guards.
//
// A session whose request Table 1 refuses waits for the lease, bounded,
// in a FIFO queue per key, under the wound-wait rule (wait.go: Request and
// lease_request); only an X on a golden S is refused at once, and the
// caller aborts and retries with Backoff. I leases never wait. Every lease
// has a finite lifetime. A lease found expired is
// dropped, and its key's cache entry with it: the holder may have died half
// way through changing it. The package knows nothing of queues or stores.
package lease

import (
	"sort"
	"time"

	"github.com/writeback/writeback/internal/jitter"
)

// Mode is the kind of a lease.
type Mode byte

const (
	// Shared: a session read the key and its commit depends on the value.
	Shared Mode = 'S'
	// Exclusive: a session is about to change the key (or read it for
	// update).
	Exclusive Mode = 'X'
	// Inhibit: a reader that missed is computing the key's value and may
	// install it only if the lease survives until then.
	Inhibit Mode = 'I'
)

func (m Mode) String() string {
	switch m {
	case Shared:
		return "S"
	case Exclusive:
		return "X"
	case Inhibit:
		return "I"
	}
	return "?"
}

// Outcome is what Table 1 says of one requested lease against one lease
// held by someone else.
type Outcome int

const (
	// Grant: the two leases coexist.
	Grant Outcome = iota
	// GrantVoid: the request is granted and the held lease is voided; its
	// holder finds out at its next step (an X wounds a non-golden S; an X
	// voids an I, so a fill computed before the change is not installed).
	GrantVoid
	// Refuse: the requester aborts and retries with backoff (or, for an I
	// lease, reads through without filling).
	Refuse
)

func (o Outcome) String() string {
	return [...]string{"grant", "grant+void", "refuse"}[o]
}

// Compat is Table 1 of the paper, extended with the I lease: the outcome
// of requesting req while another holder holds held (golden: a validated S
// lease).
//
//	requested \ held   S            golden S     X       I
//	S                  grant        grant        refuse  grant
//	X                  grant+void   refuse       refuse  grant+void
//	I                  grant        grant        refuse  refuse
//
// The S and X cells are the paper's. An I lease is a filler's: only one
// filler per key (I on I refuses; the other readers back off, then read
// through), none while a writer holds X (its value is about to change), and
// an X voids it like the IQ framework's Q lease, so that a value computed
// before the change is never installed after it. S and I coexist: a session
// may read a value that a filler is installing.
func Compat(req, held Mode, golden bool) Outcome {
	switch req {
	case Shared:
		if held == Exclusive {
			return Refuse
		}
		return Grant
	case Exclusive:
		switch {
		case held == Exclusive, held == Shared && golden:
			return Refuse
		default:
			return GrantVoid
		}
	case Inhibit:
		if held == Exclusive || held == Inhibit {
			return Refuse
		}
		return Grant
	}
	return Refuse
}

// Lease is one lease held on a key.
type Lease struct {
	Holder  string // a session id, or "i:<token>" for an I lease
	Mode    Mode
	Golden  bool // an S lease of a validated session: no X may void it
	Expires time.Time
	// Start is the holding session's start (any unit and clock, the same
	// for every session; the sidecars use µs): the older session wins a
	// conflict (wait.go). 0 for an I lease; a lease without one is never
	// wounded.
	Start int64
}

// Conflict names why a request was refused, as a bounded metric label.
type Conflict string

// Conflicts.
const (
	NoConflict        Conflict = ""
	SharedOnExclusive Conflict = "s_on_x"        // a read met a writer
	ExclusiveOnX      Conflict = "x_on_x"        // two writers
	ExclusiveOnGolden Conflict = "x_on_golden_s" // a writer met a validated reader
	InhibitBusy       Conflict = "i_busy"        // a filler met another filler or a writer
)

// Decision is what a request for a lease on one key does.
type Decision struct {
	// Grant: the requester holds the lease (or a stronger one it already
	// held) after the step.
	Grant bool
	// Mode is the lease the requester ends up with: an X it held stays an
	// X when it asks for an S.
	Mode Mode
	// Conflict says why not, when Grant is false.
	Conflict Conflict
	// Void lists the holders whose leases the grant voids, sorted.
	Void []string
	// Expired lists the holders whose leases had expired, sorted: they are
	// dropped whatever the outcome.
	Expired []string
	// DeleteEntry: an expired S or X lease was found, so the key's cache
	// entry may be half-updated by a holder that died; it is deleted before
	// anything else happens. An expired I lease guards no change and
	// deletes nothing.
	DeleteEntry bool
}

// Decide applies Compat to a request by holder for mode req on a key whose
// leases are held, at time now. The requester's own lease does not conflict
// with its request: an S becomes an X (an upgrade, subject to the others'
// leases), and an X satisfies an S. When several leases refuse, the
// conflict named is an X's if there is one. The Lua function lease_decide
// is its twin; TestLuaMatchesDecide holds them together.
func Decide(holder string, req Mode, held []Lease, now time.Time) Decision {
	d := Decision{Grant: true, Mode: req}
	refusedByX := false
	for _, l := range held {
		if !l.Expires.After(now) {
			d.Expired = append(d.Expired, l.Holder)
			if l.Mode != Inhibit {
				d.DeleteEntry = true
			}
			continue
		}
		if l.Holder == holder {
			if l.Mode == Exclusive {
				d.Mode = Exclusive
			}
			continue
		}
		switch Compat(req, l.Mode, l.Golden) {
		case Refuse:
			d.Grant = false
			refusedByX = refusedByX || l.Mode == Exclusive
		case GrantVoid:
			d.Void = append(d.Void, l.Holder)
		}
	}
	if !d.Grant {
		d.Void, d.Mode = nil, 0
		switch {
		case req == Inhibit:
			d.Conflict = InhibitBusy
		case req == Shared:
			d.Conflict = SharedOnExclusive
		case refusedByX:
			d.Conflict = ExclusiveOnX
		default:
			d.Conflict = ExclusiveOnGolden
		}
	}
	sort.Strings(d.Void)
	sort.Strings(d.Expired)
	return d
}

// SortKeys returns keys sorted and without duplicates: the order in which a
// session requests its X leases, so that two sessions wanting overlapping
// keys meet on the first shared key instead of each holding what the other
// wants.
func SortKeys(keys []string) []string {
	out := append([]string(nil), keys...)
	sort.Strings(out)
	n := 0
	for i, k := range out {
		if i == 0 || k != out[n-1] {
			out[n] = k
			n++
		}
	}
	return out[:n]
}

// Backoff is the pause before retry number n (1-based) of a refused lease
// (jitter.Backoff), so that sessions that collided do not collide again in
// lockstep.
func Backoff(base, limit time.Duration, n int) time.Duration { return jitter.Backoff(base, limit, n) }
