package bench

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Series is one line of a line plot (X[i], Y[i]), or one colour of a bar
// chart (Y[i] is the bar of group i; X is unused).
type Series struct {
	Name string
	X, Y []float64
}

// Figure is a plot to draw: a title and axis labels, which should name
// their units ("throughput (ops/s)").
type Figure struct {
	Title, XLabel, YLabel string
	// YFromZero makes the y axis start at 0 (default: fitted to the data).
	YFromZero bool
}

// colour gives a policy the same colour in every plot, and any other name
// one after the policies'.
func colour(name string, i int) color.Color {
	if k := slices.Index(Policies, name); k >= 0 {
		return plotutil.Color(k)
	}
	return plotutil.Color(len(Policies) + i)
}

func newPlot(f Figure) *plot.Plot {
	p := plot.New()
	p.Title.Text = f.Title
	p.X.Label.Text = f.XLabel
	p.Y.Label.Text = f.YLabel
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	if f.YFromZero {
		p.Y.Min = 0
	}
	return p
}

func save(p *plot.Plot, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("saving the plot %s: %w", path, err)
	}
	return nil
}

// Lines draws one line with points per series, a legend naming them, and
// saves it as a PNG at path.
func Lines(path string, f Figure, series []Series) error {
	return LinesWith(path, f, LineOptions{}, series)
}

// Bars draws grouped bars: a group per entry of groups along the x axis,
// within each group a bar per series in a colour of its own, and a legend
// naming the series. Series i's Y[g] is its bar in group g.
func Bars(path string, f Figure, groups []string, series []Series) error {
	p := newPlot(f)
	p.Y.Min = 0
	n := len(series)
	w := vg.Points(min(60, 360/float64(max(1, n*len(groups)))))
	for i, s := range series {
		if len(s.Y) != len(groups) {
			return fmt.Errorf("plot %s: series %s has %d values for %d groups", path, s.Name, len(s.Y), len(groups))
		}
		b, err := plotter.NewBarChart(plotter.Values(s.Y), w)
		if err != nil {
			return fmt.Errorf("plot %s: series %s: %w", path, s.Name, err)
		}
		b.Color = colour(s.Name, i)
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(float64(i)-float64(n-1)/2)
		p.Add(b)
		p.Legend.Add(s.Name, b)
	}
	p.NominalX(groups...)
	// Every group gets a whole unit of the x axis, and the y axis room
	// above the tallest bar for the legend.
	p.X.Min, p.X.Max = -0.5, float64(len(groups))-0.5
	top := 0.0
	for _, s := range series {
		for _, y := range s.Y {
			top = max(top, y)
		}
	}
	p.Y.Max = top * (1.15 + 0.06*float64(n))
	p.Legend.Top, p.Legend.Left = true, false
	return save(p, path)
}
