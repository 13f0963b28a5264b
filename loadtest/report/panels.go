package report

import (
	"fmt"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Panel is one panel of PanelsSVG: one or more lines over a shared x
// axis, for the lab's tools that chart something other than a report's
// rows (the catalogue sweep charts idle cost against catalogue size).
type Panel struct {
	Title  string
	YLabel string
	Lines  []Line
}

// Line is one labelled line of a Panel, its points in x order.
type Line struct {
	Label  string
	Points []Point
}

// Point is one point of a Line.
type Point struct{ X, Y float64 }

// PanelsSVG draws the panels side by side, in the lab's charts' fonts and
// colours, over one x axis labelled xLabel: a log scale with logX (whose
// points must then have x > 0). Each y axis starts at 0, so that a flat
// line reads as flat.
func PanelsSVG(xLabel string, logX bool, panels []Panel) ([]byte, error) {
	if len(panels) == 0 {
		return nil, fmt.Errorf("panels chart: no panels")
	}
	plots := make([]*plot.Plot, len(panels))
	for i, pn := range panels {
		p, err := linePanel(pn, xLabel, logX)
		if err != nil {
			return nil, err
		}
		plots[i] = p
	}
	w := vg.Length(320 * len(panels))
	return renderSVG(w, 280, func(dc draw.Canvas) {
		tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: 24, PadTop: 2, PadBottom: 2, PadLeft: 2, PadRight: 8}
		canvases := plot.Align([][]*plot.Plot{plots}, tiles, dc)
		for i, p := range plots {
			p.Draw(canvases[0][i])
		}
	})
}

// linePanel is one panel of PanelsSVG.
func linePanel(pn Panel, xLabel string, logX bool) (*plot.Plot, error) {
	p := newPlot(pn.Title)
	p.X.Label.Text, p.Y.Label.Text = xLabel, pn.YLabel
	p.Y.Tick.Marker = plainTicks{}
	if logX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	} else {
		p.X.Tick.Marker = plainTicks{}
	}
	top := 0.0
	for i, ln := range pn.Lines {
		xys := make(plotter.XYs, len(ln.Points))
		for j, pt := range ln.Points {
			if logX && pt.X <= 0 {
				return nil, fmt.Errorf("panel %q: x %v on a log scale", pn.Title, pt.X)
			}
			xys[j] = plotter.XY{X: pt.X, Y: pt.Y}
			top = max(top, pt.Y)
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("panel %q: %w", pn.Title, err)
		}
		col := groupColors[i%len(groupColors)]
		line.Color, line.Width = col, 1.5
		points.Color, points.Shape = col, draw.CircleGlyph{}
		p.Add(line, points)
		if ln.Label != "" {
			p.Legend.Add(ln.Label, line, points)
		}
	}
	p.Y.Min, p.Y.Max = 0, math.Max(1, top)*1.15
	p.Legend.Top, p.Legend.Left = true, true
	return p, nil
}
