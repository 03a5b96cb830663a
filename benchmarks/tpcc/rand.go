package tpcc

import (
	"math/rand/v2"
	"strconv"
)

// syllables build customer last names (clause 4.3.2.3).
var syllables = [10]string{"BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING"}

// LastName is the last name of number n in 0..999.
func LastName(n int) string {
	return syllables[n/100] + syllables[(n/10)%10] + syllables[n%10]
}

// constants are NURand's C values (clause 2.1.6): one set for the load and
// one for the run, whose C for C_LAST differs from the load's by a delta the
// specification allows (clause 2.1.6.1).
type constants struct {
	cLast, cID, olIID int
}

func newConstants(r *rand.Rand) (load, run constants) {
	load = constants{cLast: r.IntN(256), cID: r.IntN(1024), olIID: r.IntN(8192)}
	for {
		run = constants{cLast: r.IntN(256), cID: r.IntN(1024), olIID: r.IntN(8192)}
		d := run.cLast - load.cLast
		if d < 0 {
			d = -d
		}
		if d >= 65 && d <= 119 && d != 96 && d != 112 {
			return load, run
		}
	}
}

// nurand is NURand(A, x, y) = (((random(0, A) | random(x, y)) + C) % (y - x + 1)) + x.
func nurand(r *rand.Rand, a, c, x, y int) int {
	return (((r.IntN(a+1) | (x + r.IntN(y-x+1))) + c) % (y - x + 1)) + x
}

// between returns a uniform integer in [lo, hi].
func between(r *rand.Rand, lo, hi int) int { return lo + r.IntN(hi-lo+1) }

const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// astring is a random alphanumeric string of length lo..hi.
func astring(r *rand.Rand, lo, hi int) string {
	b := make([]byte, between(r, lo, hi))
	for i := range b {
		b[i] = alnum[r.IntN(len(alnum))]
	}
	return string(b)
}

// nstring is a random numeric string of length n.
func nstring(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('0' + r.IntN(10))
	}
	return string(b)
}

// zip is a zip code: 4 random digits and "11111" (clause 4.3.2.7).
func zip(r *rand.Rand) string { return nstring(r, 4) + "11111" }

// data is I_DATA or S_DATA: 26..50 characters, 10 % of them containing
// "ORIGINAL" (clause 4.3.3.1).
func data(r *rand.Rand) string {
	s := astring(r, 26, 50)
	if r.IntN(10) == 0 {
		at := r.IntN(len(s) - 8)
		s = s[:at] + "ORIGINAL" + s[at+8:]
	}
	return s
}

func itoa(i int) string { return strconv.Itoa(i) }
