// Package jitter spreads delays and lifetimes at random, so that clients
// that collided do not retry in lockstep and cache entries filled together
// do not expire together.
package jitter

import (
	"math/rand/v2"
	"time"
)

// Backoff is the pause before retry number n (1-based): base doubling up to
// limit, then a random point in its upper half, [d/2, d] — never past
// limit, never under half of the doubled delay.
func Backoff(base, limit time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// TTL spreads a lifetime by ±10 %.
func TTL(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d)/5+1)) - d/10
}
