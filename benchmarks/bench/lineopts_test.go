package bench

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLinesWith draws a log-x plot with explicit ticks and a bottom-right
// legend, and checks it is a PNG; a non-positive x on a log scale and
// mismatched lengths are errors.
func TestLinesWith(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sweep.png")
	f := Figure{Title: "t", XLabel: "appliers", YLabel: "applied (%)", YFromZero: true}
	o := LineOptions{XLog: true, XTicks: []float64{1, 4, 16}, YMax: 100, LegendBottom: true, LegendRight: true}
	require.NoError(t, LinesWith(path, f, o, []Series{
		{Name: "workload A", X: []float64{1, 4, 16}, Y: []float64{90, 95, 99}},
		{Name: "workload B", X: []float64{1, 4, 16}, Y: []float64{97, 98, 99.5}},
	}))
	fh, err := os.Open(path)
	require.NoError(t, err)
	defer fh.Close()
	img, err := png.Decode(fh)
	require.NoError(t, err)
	require.Greater(t, img.Bounds().Dx(), 500)
	require.ErrorContains(t, LinesWith(path, f, o, []Series{{Name: "x", X: []float64{0, 1}, Y: []float64{1, 2}}}), "log scale")
	require.ErrorContains(t, LinesWith(path, f, LineOptions{}, []Series{{Name: "x", X: []float64{1}}}), "1 x and 0 y")
}
