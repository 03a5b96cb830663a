package bench

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSampler samples a counter and checks the samples are in time order,
// skip failed reads, and end with the value at Stop.
func TestSampler(t *testing.T) {
	var n atomic.Int64
	s := &Sampler{Every: 10 * time.Millisecond, Read: func() (float64, error) {
		v := n.Add(1)
		if v == 2 {
			return 0, errors.New("a failed read is skipped")
		}
		return float64(v), nil
	}}
	s.Start()
	require.Eventually(t, func() bool { return n.Load() >= 5 }, 5*time.Second, 5*time.Millisecond)
	got := s.Stop()
	require.GreaterOrEqual(t, len(got), 4)
	require.Equal(t, 1.0, got[0].V)
	require.Equal(t, 3.0, got[1].V, "the failed second read left no sample")
	for i := 1; i < len(got); i++ {
		require.GreaterOrEqual(t, got[i].T, got[i-1].T)
		require.Greater(t, got[i].V, got[i-1].V)
	}
	require.Equal(t, float64(n.Load()), got[len(got)-1].V, "Stop takes the last sample")
	require.Equal(t, got, s.Stop(), "a second Stop returns the same samples")
	x, y := XY(got[:2], 0.5)
	require.Equal(t, []float64{got[0].T, got[1].T}, x)
	require.Equal(t, []float64{0.5, 1.5}, y)
}
