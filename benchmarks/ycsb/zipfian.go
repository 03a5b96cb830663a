package ycsb

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Chooser picks a record number in [0, n) with a caller-owned random
// source, so one Chooser serves every client goroutine without locking.
type Chooser interface {
	Next(r *rand.Rand) int64
}

// NewChooser returns the chooser of a distribution over n records:
// "zipfian" (YCSB's scrambled zipfian, constant 0.99) or "uniform".
func NewChooser(distribution string, n int64) (Chooser, error) {
	if n <= 0 {
		return nil, fmt.Errorf("ycsb: %d records; need at least one", n)
	}
	switch distribution {
	case "zipfian":
		return NewScrambledZipfian(n), nil
	case "uniform":
		return Uniform(n), nil
	}
	return nil, fmt.Errorf("ycsb: unknown distribution %q; use zipfian or uniform", distribution)
}

// Uniform picks every record with the same probability.
type Uniform int64

// Next implements Chooser.
func (u Uniform) Next(r *rand.Rand) int64 { return r.Int64N(int64(u)) }

// These are YCSB's (core/src/main/java/site/ycsb/generator): the scrambled
// generator draws from a zipfian over ten billion items, whose zeta is
// precomputed, and hashes the draw onto the record range. The hash scatters
// the popular items over the key space instead of piling them at its start,
// and because the item space is fixed the popularity of the hottest record
// does not depend on how many records are loaded.
const (
	zipfianConstant = 0.99
	zipfianItems    = 10_000_000_000
	zipfianZetan    = 26.46902820178302 // zeta(zipfianItems+1, 0.99), YCSB's ZETAN
)

// ScrambledZipfian is YCSB's ScrambledZipfianGenerator over [0, n).
type ScrambledZipfian struct {
	n     int64
	items float64 // of the underlying zipfian: zipfianItems+1, as YCSB's (0, ITEM_COUNT) range
	theta float64
	alpha float64
	zetan float64
	eta   float64
	half  float64 // 1 + 0.5^theta: below it (times zetan) the draw is item 1
}

// NewScrambledZipfian returns the generator for n records.
func NewScrambledZipfian(n int64) *ScrambledZipfian {
	theta := zipfianConstant
	items := float64(zipfianItems + 1)
	zeta2 := 1 + math.Pow(0.5, theta) // zeta(2, theta)
	return &ScrambledZipfian{
		n:     n,
		items: items,
		theta: theta,
		alpha: 1 / (1 - theta),
		zetan: zipfianZetan,
		eta:   (1 - math.Pow(2/items, 1-theta)) / (1 - zeta2/zipfianZetan),
		half:  1 + math.Pow(0.5, theta),
	}
}

// Next implements Chooser.
func (z *ScrambledZipfian) Next(r *rand.Rand) int64 {
	return int64(fnvHash64(z.zipf(r)) % uint64(z.n))
}

// zipf is ZipfianGenerator.nextLong(items) with base 0 (Gray et al.,
// "Quickly generating billion-record synthetic databases", SIGMOD 1994).
func (z *ScrambledZipfian) zipf(r *rand.Rand) int64 {
	u := r.Float64()
	uz := u * z.zetan
	if uz < 1 {
		return 0
	}
	if uz < z.half {
		return 1
	}
	return int64(z.items * math.Pow(z.eta*u-z.eta+1, z.alpha))
}

// fnvHash64 is YCSB's Utils.fnvhash64: FNV-1a over the value's eight bytes,
// low byte first, then Java's Math.abs of the signed result.
func fnvHash64(v int64) uint64 {
	const (
		offset = 0xCBF29CE484222325
		prime  = 1099511628211
	)
	h := uint64(offset)
	for range 8 {
		h ^= uint64(v & 0xff)
		h *= prime
		v >>= 8
	}
	s := int64(h)
	if s < 0 {
		s = -s // Math.abs; -MinInt64 stays negative in Java and here alike
	}
	return uint64(s) & math.MaxInt64 // keep MinInt64 in range instead of Java's negative remainder
}
