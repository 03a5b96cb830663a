package bench

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParsePolicies(t *testing.T) {
	got, err := ParsePolicies("write-back, database")
	require.NoError(t, err)
	require.Equal(t, []string{Database, WriteBack}, got, "the order of Policies, not of the flag")
	got, err = ParsePolicies("all")
	require.NoError(t, err)
	require.Equal(t, Policies, got)
	_, err = ParsePolicies("write-behind")
	require.ErrorContains(t, err, `unknown policy "write-behind"`)
	_, err = ParsePolicies(" , ")
	require.ErrorContains(t, err, "no policy given")
	p, ok := Sidecar(WriteBackRESP)
	require.True(t, ok)
	require.Equal(t, WriteBack, p)
	_, ok = Sidecar(DatabaseAsync)
	require.False(t, ok)
}

func TestAsyncDSN(t *testing.T) {
	d, err := AsyncDSN("postgres", "postgres://postgres@127.0.0.1:5432/writeback?sslmode=disable")
	require.NoError(t, err)
	require.Equal(t, "postgres://postgres@127.0.0.1:5432/writeback?sslmode=disable&synchronous_commit=off", d)
	d, err = AsyncDSN("mongodb", "mongodb://127.0.0.1:27017")
	require.NoError(t, err)
	require.Equal(t, "mongodb://127.0.0.1:27017/?journal=false&w=1", d)
	d, err = AsyncDSN("mysql", "root@tcp(127.0.0.1:3306)/writeback")
	require.NoError(t, err)
	require.Equal(t, "root@tcp(127.0.0.1:3306)/writeback", d)
	_, err = AsyncDSN("postgres", "host=x")
	require.ErrorContains(t, err, "not a URL")
	_, err = AsyncDSN("sqlite", "x")
	require.ErrorContains(t, err, "no asynchronous commit")
}

func TestTable(t *testing.T) {
	var tb Table
	tb.Header = []string{"policy", "ops/s"}
	tb.Add("database", 16317.4)
	tb.Add("write-back", 0.5)
	s := tb.String()
	require.Contains(t, s, "16317")
	require.Contains(t, s, "0.5\n")
	require.Equal(t, 3, strings.Count(s, "\n"))
	require.Equal(t, "2.81×", Ratio(2.81, 1))
	require.Equal(t, "-", Ratio(1, 0))
}

// TestPlots draws a line plot and a bar chart and checks that they are
// PNG images of the size Save was asked for.
func TestPlots(t *testing.T) {
	dir := t.TempDir()
	f := Figure{Title: "t", XLabel: "threads", YLabel: "throughput (ops/s)", YFromZero: true}
	lines := filepath.Join(dir, "lines.png")
	require.NoError(t, Lines(lines, f, []Series{
		{Name: Database, X: []float64{1, 2, 4}, Y: []float64{10, 20, 25}},
		{Name: WriteBack, X: []float64{1, 2, 4}, Y: []float64{30, 55, 90}},
	}))
	bars := filepath.Join(dir, "sub", "bars.png")
	require.NoError(t, Bars(bars, f, []string{"A", "B"}, []Series{
		{Name: Database, Y: []float64{10, 20}},
		{Name: WriteBack, Y: []float64{30, 40}},
	}))
	for _, p := range []string{lines, bars} {
		fh, err := os.Open(p)
		require.NoError(t, err)
		img, err := png.Decode(fh)
		fh.Close()
		require.NoError(t, err, p)
		require.Greater(t, img.Bounds().Dx(), 500, p)
	}
	require.ErrorContains(t, Lines(lines, f, []Series{{Name: "x", X: []float64{1}, Y: nil}}), "1 x and 0 y")
	require.ErrorContains(t, Bars(bars, f, []string{"A"}, []Series{{Name: "x", Y: []float64{1, 2}}}), "2 values for 1 groups")
}
