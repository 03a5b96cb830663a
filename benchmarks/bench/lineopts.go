package bench

import (
	"fmt"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// LineOptions adjust a line plot beyond its Figure.
type LineOptions struct {
	// XLog draws the x axis in log scale (base 2 ticks read best with
	// XTicks), for x values such as thread or worker counts 1, 4, 16.
	XLog bool
	// XTicks, if set, are the only labelled x ticks (the x values run,
	// say), printed with %g.
	XTicks []float64
	// YMax, if positive, is the top of the y axis (100 for percentages,
	// leaving the legend room above the lines with LegendBottom).
	YMax float64
	// LegendBottom and LegendRight move the legend from the top left.
	LegendBottom, LegendRight bool
}

// LinesWith is Lines with options: one line with points per series, a
// legend naming them, saved as a PNG at path.
func LinesWith(path string, f Figure, o LineOptions, series []Series) error {
	p := newPlot(f)
	for i, s := range series {
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("plot %s: series %s has %d x and %d y values", path, s.Name, len(s.X), len(s.Y))
		}
		xys := make(plotter.XYs, len(s.X))
		for j := range s.X {
			xys[j].X, xys[j].Y = s.X[j], s.Y[j]
			if o.XLog && s.X[j] <= 0 {
				return fmt.Errorf("plot %s: series %s has x = %g on a log scale", path, s.Name, s.X[j])
			}
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return fmt.Errorf("plot %s: series %s: %w", path, s.Name, err)
		}
		c := colour(s.Name, i)
		l.Color, l.Width = c, vg.Points(1.5)
		l.Dashes = plotutil.Dashes(i)
		pts.Color, pts.Shape = c, plotutil.Shape(i)
		p.Add(l, pts)
		p.Legend.Add(s.Name, l, pts)
	}
	if o.XLog {
		p.X.Scale = plot.LogScale{}
	}
	if len(o.XTicks) > 0 {
		ticks := make(plot.ConstantTicks, len(o.XTicks))
		lo, hi := math.Inf(1), math.Inf(-1)
		for i, x := range o.XTicks {
			ticks[i] = plot.Tick{Value: x, Label: fmt.Sprintf("%g", x)}
			lo, hi = math.Min(lo, x), math.Max(hi, x)
		}
		p.X.Tick.Marker = ticks
		// Some room beside the outermost points.
		if o.XLog {
			p.X.Min, p.X.Max = math.Min(p.X.Min, lo/1.2), math.Max(p.X.Max, hi*1.2)
		} else {
			pad := (hi - lo) * 0.05
			p.X.Min, p.X.Max = math.Min(p.X.Min, lo-pad), math.Max(p.X.Max, hi+pad)
		}
	}
	if f.YFromZero {
		p.Y.Min = 0
	}
	if o.YMax > 0 {
		p.Y.Max = o.YMax
	}
	p.Legend.Top, p.Legend.Left = !o.LegendBottom, !o.LegendRight
	return save(p, path)
}
