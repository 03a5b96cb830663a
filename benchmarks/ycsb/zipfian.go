package ycsb

import (
	"fmt"
	mathrand "math/rand"
	"math/rand/v2"
	"sync"

	"github.com/pingcap/go-ycsb/pkg/generator"
)

// Chooser picks a record number in [0, n) with a caller-owned random
// source, so one Chooser serves every client goroutine.
type Chooser interface {
	Next(r *rand.Rand) int64
}

// Distributions are the names NewChooser knows, in the order the
// benchmarks run them.
var Distributions = []string{"uniform", "zipfian"}

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

// ZipfianConstant is YCSB's default zipfian constant (θ).
const ZipfianConstant = generator.ZipfianConstant

// ScrambledZipfian is YCSB's ScrambledZipfianGenerator over [0, n), as
// go-ycsb ports it (github.com/pingcap/go-ycsb/pkg/generator): a zipfian
// over ten billion items with YCSB's precomputed zeta, hashed (FNV-1a) onto
// the record range. The hash scatters the popular items over the key space
// instead of piling them at its start, and because the item space is fixed
// the popularity of the hottest record does not depend on how many records
// are loaded.
//
// go-ycsb's generator takes a math/rand (v1) source and records its last
// value on every draw, so it is not safe for concurrent use: Next lends it
// the caller's math/rand/v2 source under a mutex. An uncontended lock
// costs tens of nanoseconds, nothing beside an operation's round trip.
type ScrambledZipfian struct {
	mu  sync.Mutex
	gen *generator.ScrambledZipfian
	src v2Source
	rnd *mathrand.Rand // over src
}

// NewScrambledZipfian returns the generator for n records.
func NewScrambledZipfian(n int64) *ScrambledZipfian {
	z := &ScrambledZipfian{gen: generator.NewScrambledZipfian(0, n-1, ZipfianConstant)}
	z.rnd = mathrand.New(&z.src)
	return z
}

// Next implements Chooser.
func (z *ScrambledZipfian) Next(r *rand.Rand) int64 {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.src.r = r
	v := z.gen.Next(z.rnd)
	z.src.r = nil
	return v
}

// v2Source is a math/rand Source drawing from a math/rand/v2 generator.
type v2Source struct{ r *rand.Rand }

func (s *v2Source) Int63() int64    { return s.r.Int64() }
func (s *v2Source) Uint64() uint64  { return s.r.Uint64() }
func (s *v2Source) Seed(seed int64) {}
