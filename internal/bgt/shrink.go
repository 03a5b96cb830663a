package bgt

import "time"

// shrinkMemory is how long rounds stay smaller than one that outlived the
// batch timeout before they may grow back to its size.
const shrinkMemory = time.Minute

// shrink is how much smaller than configured the rounds of a partition (or
// of a session queue) are, after a round of it outlived the batch timeout:
// a batch too big for the store to apply in time would otherwise fail the
// same way at every retry, and nothing would be applied again (a slow
// store, a cold one, documents with thousands of buffered changes, sessions
// with thousands of statements). Each timeout halves the round; each round
// that succeeds doubles it again, but not back to the size that timed out
// until shrinkMemory has passed.
type shrink struct {
	div    int       // the round takes 1/div of the configured batch (at least one of everything)
	failed int       // the divisor of the last round that timed out
	until  time.Time // until then the divisor stays above failed
}

// shrinks holds the shrink of every key (partition, queue) whose rounds
// are smaller than configured. Its owner guards it.
type shrinks[K comparable] struct {
	m map[K]shrink
	// minimal reports that a round with divisor div takes one of
	// everything: it cannot be smaller.
	minimal func(div int) bool
}

func newShrinks[K comparable](minimal func(div int) bool) shrinks[K] {
	return shrinks[K]{m: map[K]shrink{}, minimal: minimal}
}

// divisor returns the divisor of a round of keys: the largest of theirs.
func (s shrinks[K]) divisor(keys ...K) int {
	div := 1
	for _, k := range keys {
		if sh, ok := s.m[k]; ok {
			div = max(div, sh.div)
		}
	}
	return div
}

// resize records the outcome of a round of keys taken with divisor div:
// halve after a timeout, double back after a success (see shrink). It
// returns the divisor of the next rounds after a timeout, div otherwise.
func (s shrinks[K]) resize(keys []K, div int, timedOut, ok bool) int {
	now := time.Now()
	if timedOut {
		next := div
		if !s.minimal(div) {
			next = 2 * div
		}
		for _, k := range keys {
			s.m[k] = shrink{div: next, failed: div, until: now.Add(shrinkMemory)}
		}
		return next
	}
	if !ok {
		return div
	}
	for _, k := range keys {
		sh, found := s.m[k]
		if !found {
			continue
		}
		remember := now.Before(sh.until)
		if sh.div > 1 && (!remember || sh.div/2 > sh.failed) {
			sh.div /= 2
		}
		if sh.div == 1 && !remember {
			delete(s.m, k)
			continue
		}
		s.m[k] = sh
	}
	return div
}
