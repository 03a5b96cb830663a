package ycsb

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestChoosersStayInRange(t *testing.T) {
	for _, tc := range []struct {
		dist string
		n    int64
	}{
		{"zipfian", 1},
		{"zipfian", 7},
		{"zipfian", 100_000},
		{"uniform", 1},
		{"uniform", 100_000},
	} {
		t.Run(tc.dist, func(t *testing.T) {
			c, err := NewChooser(tc.dist, tc.n)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(1, 2))
			for range 100_000 {
				if v := c.Next(r); v < 0 || v >= tc.n {
					t.Fatalf("Next() = %d, want [0, %d)", v, tc.n)
				}
			}
		})
	}
}

func TestUnknownDistribution(t *testing.T) {
	if _, err := NewChooser("latest", 10); err == nil {
		t.Fatal("NewChooser(latest) succeeded")
	}
}

// The scrambled zipfian must be skewed like YCSB's: with θ = 0.99 over its
// fixed item space, the hottest record gets about 1/zetan ≈ 3.8 % of the
// draws, the second about 1.9 %, and the hot records are scattered over the
// key space rather than at its start.
func TestScrambledZipfianSkew(t *testing.T) {
	const n, draws = 100_000, 1_000_000
	z := NewScrambledZipfian(n)
	r := rand.New(rand.NewPCG(3, 4))
	counts := make([]int, n)
	for range draws {
		counts[z.Next(r)]++
	}
	byCount := make([]int64, n)
	for i := range byCount {
		byCount[i] = int64(i)
	}
	slices.SortFunc(byCount, func(a, b int64) int { return counts[b] - counts[a] })
	top := float64(counts[byCount[0]]) / draws
	if top < 0.034 || top > 0.042 {
		t.Errorf("hottest record got %.2f%% of the draws, want about 3.8%%", 100*top)
	}
	second := float64(counts[byCount[1]]) / draws
	if second < 0.016 || second > 0.022 {
		t.Errorf("second hottest record got %.2f%% of the draws, want about 1.9%%", 100*second)
	}
	hot := 0
	for _, rec := range byCount[:10] {
		if rec < n/10 {
			hot++
		}
	}
	if hot > 5 {
		t.Errorf("%d of the 10 hottest records are in the first tenth of the keys; the scrambling does not scatter them", hot)
	}
}

// Uniform draws must spread evenly: 1 000 000 draws over 100 records give
// each about 10 000 (a binomial standard deviation of 99.5); every count
// within ±5 % (±5 σ) and a chi-square statistic (99 degrees of freedom,
// mean 99, sd 14) below 160.
func TestUniformSpread(t *testing.T) {
	const n, draws = 100, 1_000_000
	c, err := NewChooser("uniform", n)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 8))
	counts := make([]int, n)
	for range draws {
		counts[c.Next(r)]++
	}
	want := float64(draws) / n
	chi2 := 0.0
	for rec, got := range counts {
		if d := float64(got) - want; d > 0.05*want || d < -0.05*want {
			t.Errorf("record %d drawn %d times, want %.0f ± 5 %%", rec, got, want)
		}
		chi2 += (float64(got) - want) * (float64(got) - want) / want
	}
	if chi2 > 160 {
		t.Errorf("chi-square %.1f over 99 degrees of freedom; the draws are not uniform", chi2)
	}
}

// The zipfian's ranks must follow YCSB's law, P(item k) = 1/k^0.99 / zetan
// over its ten billion items: the hottest k records take about
// zeta(k, 0.99) / zetan of the draws — 3.8 % for k = 1, 11 % for 10, 20 %
// for 100, 29 % for 1 000 (1 % of the records; a uniform draw gives them
// 1 %). Hashing the items onto 100 000 records only adds to a record's
// count (other items land on it), so the shares may run up to a fifth
// over, never more than noise under.
func TestScrambledZipfianRanks(t *testing.T) {
	const n, draws = 100_000, 1_000_000
	z := NewScrambledZipfian(n)
	r := rand.New(rand.NewPCG(9, 10))
	counts := make([]int, n)
	for range draws {
		counts[z.Next(r)]++
	}
	slices.SortFunc(counts, func(a, b int) int { return b - a })
	const zetan = 26.46902820178302 // YCSB's zeta(1e10+1, 0.99)
	zeta, got := 0.0, 0
	for k := 1; k <= 1000; k++ {
		zeta += 1 / math.Pow(float64(k), ZipfianConstant)
		got += counts[k-1]
		if k != 1 && k != 10 && k != 100 && k != 1000 {
			continue
		}
		want := zeta / zetan
		share := float64(got) / draws
		t.Logf("hottest %d: %.2f %% of the draws, law %.2f %%", k, 100*share, 100*want)
		if share < 0.97*want || share > 1.2*want {
			t.Errorf("the hottest %d records took %.2f %% of the draws; YCSB's law gives %.2f %%", k, 100*share, 100*want)
		}
	}
}

// One chooser serves every client goroutine (go test -race: go-ycsb's
// generator is not safe for concurrent use on its own).
func TestScrambledZipfianConcurrent(t *testing.T) {
	z := NewScrambledZipfian(1000)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 10_000 {
				if v := z.Next(r); v < 0 || v >= 1000 {
					t.Errorf("Next() = %d", v)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestRandomValue(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 6, 7, 100, 1000} {
		v := RandomValue(r, n)
		if len(v) != n {
			t.Fatalf("len(RandomValue(%d)) = %d", n, len(v))
		}
		for _, b := range []byte(v) {
			if !strings.ContainsRune(printable, rune(b)) {
				t.Fatalf("RandomValue returned %q, which is not printable", b)
			}
		}
	}
}

func TestKeyOrder(t *testing.T) {
	if Key(9) >= Key(10) || Key(99_999) >= Key(100_000) {
		t.Error("keys do not sort like record numbers")
	}
	if Key(42) != "user0000000042" {
		t.Errorf("Key(42) = %q", Key(42))
	}
}

func TestModel(t *testing.T) {
	m := NewModel(3)
	m.Ack(1, 0, "a")
	m.Ack(1, 0, "b")
	m.Fail(1, 1, "x")
	m.Ack(2, 2, "c")
	m.Fail(2, 2, "d")
	for _, tc := range []struct {
		name string
		rec  int64
		row  Row
		bad  int
	}{
		{"last acknowledged", 1, Row{"b", "anything", "anything"}, -1},
		{"older acknowledged", 1, Row{"a", "", ""}, 0},
		{"failed update maybe applied", 2, Row{"", "", "d"}, -1},
		{"failed update maybe not applied", 2, Row{"", "", "c"}, -1},
		{"neither", 2, Row{"", "", "e"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := m.Check(tc.rec, tc.row); got != tc.bad {
				t.Errorf("Check = %d, want %d", got, tc.bad)
			}
		})
	}
	if got := m.Len(); got != 3 {
		t.Errorf("Len = %d, want 3", got)
	}
}

func TestLatencies(t *testing.T) {
	l := merge([][]time.Duration{{5, 1, 3}, {2, 4}, nil})
	if !slices.IsSorted(l) || len(l) != 5 {
		t.Fatalf("merge = %v", l)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{50, 3}, {99, 5}, {100, 5}, {20, 1}, {21, 2}} {
		if got := l.Percentile(tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := Latencies(nil).Percentile(50); got != 0 {
		t.Errorf("p50 of nothing = %v", got)
	}
}
