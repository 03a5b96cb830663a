package ycsb

import (
	"slices"
	"time"
)

// Latencies are the durations of measured operations, sorted ascending.
// Sorting every sample is exact and cheap at benchmark volumes (a few
// million samples).
type Latencies []time.Duration

// merge sorts the samples of every client into one Latencies.
func merge(parts [][]time.Duration) Latencies {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	all := make([]time.Duration, 0, n)
	for _, p := range parts {
		all = append(all, p...)
	}
	slices.Sort(all)
	return all
}

// Percentile returns the p-th percentile (0 < p ≤ 100, nearest rank), 0
// when there are no samples.
func (l Latencies) Percentile(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	i := int(float64(len(l))*p/100+0.999999999) - 1
	return l[min(max(i, 0), len(l)-1)]
}

// Mean returns the mean, 0 when there are no samples.
func (l Latencies) Mean() time.Duration {
	if len(l) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range l {
		sum += d
	}
	return sum / time.Duration(len(l))
}

// Max returns the largest sample, 0 when there are none.
func (l Latencies) Max() time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[len(l)-1]
}
