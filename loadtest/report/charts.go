package report

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/loadtest/results"
)

// The charts are SVG drawn with gonum/plot: they scale to any width on the
// lab page and in report.md, and their text stays searchable.

// chart names one chart file of a report, for report.md and the lab page.
type chart struct {
	File     string `json:"file"`
	Kind     string `json:"kind"` // summary, throughput, p99 or answers
	Scenario string `json:"scenario,omitempty"`
	Title    string `json:"title"`
}

const (
	chartSummary    = "summary"
	chartThroughput = "throughput"
	chartP99        = "p99"
	chartAnswers    = "answers"
)

var (
	colorOversold = color.RGBA{R: 0xb0, G: 0x00, B: 0x20, A: 0xff} // the pages' --bad
	colorStock    = color.RGBA{R: 0x11, G: 0x11, B: 0x11, A: 0xff}
	// groupColors tell tables apart (scenarios, or one scenario at several
	// concurrencies); none is red, which means oversold.
	groupColors = []color.Color{
		color.RGBA{R: 0x39, G: 0x69, B: 0xac, A: 0xff},
		color.RGBA{R: 0x11, G: 0xa5, B: 0x79, A: 0xff},
		color.RGBA{R: 0xf2, G: 0xb7, B: 0x01, A: 0xff},
		color.RGBA{R: 0x7f, G: 0x3c, B: 0x8d, A: 0xff},
		color.RGBA{R: 0x00, G: 0x86, B: 0x95, A: 0xff},
		color.RGBA{R: 0x80, G: 0xba, B: 0x5a, A: 0xff},
		color.RGBA{R: 0x6b, G: 0x7a, B: 0x8f, A: 0xff},
		color.RGBA{R: 0xa5, G: 0xaa, B: 0x99, A: 0xff},
	}
)

// stageStyle gives each stage the same colour and marker in every chart,
// by its place in the evolution; the marker tells lines apart without
// colour.
func stageStyle(stage string) (color.Color, draw.GlyphDrawer) {
	i := max(0, slices.Index(inventory.Stages, stage))
	glyphs := []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{},
		draw.RingGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{}, draw.PlusGlyph{}}
	return groupColors[i%len(groupColors)], glyphs[i%len(glyphs)]
}

// answerClasses are the stacks of the answers chart, bottom up.
var answerClasses = []struct {
	label string
	color color.Color
	count func(r results.Row) int
}{
	{"201", color.RGBA{R: 0x0a, G: 0x6b, B: 0x2e, A: 0xff}, func(r results.Row) int { return r.Created }},
	{"409", color.RGBA{R: 0x8d, G: 0x99, B: 0xae, A: 0xff}, func(r results.Row) int { return r.SoldOut + r.Conflicts }},
	{"429", color.RGBA{R: 0xf2, G: 0xb7, B: 0x01, A: 0xff}, func(r results.Row) int { return r.TooMany }},
	{"503", color.RGBA{R: 0xe6, G: 0x83, B: 0x10, A: 0xff}, func(r results.Row) int { return r.Overloaded }},
	{"5xx", colorOversold, func(r results.Row) int { return r.ServerErrors }},
	{"other 4xx", color.RGBA{R: 0x7f, G: 0x3c, B: 0x8d, A: 0xff}, func(r results.Row) int { return r.Other4xx }},
	{"no answer", color.RGBA{R: 0x22, G: 0x22, B: 0x22, A: 0xff}, func(r results.Row) int { return r.Timeouts + r.NetErrors }},
}

// newPlot is plot.New in the pages' sans-serif face, at sizes that stay
// readable when the chart is scaled to a page column.
func newPlot(title string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	sans := func(size vg.Length, f *font.Font) { f.Variant, f.Size = "Sans", size }
	sans(13, &p.Title.TextStyle.Font)
	sans(11, &p.X.Label.TextStyle.Font)
	sans(11, &p.Y.Label.TextStyle.Font)
	sans(10, &p.X.Tick.Label.Font)
	sans(10, &p.Y.Tick.Label.Font)
	sans(10, &p.Legend.TextStyle.Font)
	p.Title.Padding = 6
	return p
}

// plainTicks are gonum's default ticks labelled as a reader writes
// numbers: 250, not 250.00. With bare set, the ticks carry no labels, for
// panels that share the scale of the one beside them.
type plainTicks struct{ bare bool }

func (t plainTicks) Ticks(min, max float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'f', -1, 64)
			if t.bare {
				ticks[i].Label = ""
			}
		}
	}
	return ticks
}

// renderSVG draws onto a w × h point canvas and returns the SVG.
func renderSVG(w, h vg.Length, paint func(dc draw.Canvas)) ([]byte, error) {
	c := vgsvg.New(w, h)
	paint(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// groupLabel names a table in a chart's legend.
func groupLabel(g []results.Row, sweeping bool) string {
	if sweeping {
		return fmt.Sprintf("%s @%d", g[0].Scenario, g[0].Workers)
	}
	return g[0].Scenario
}

// stagesOf lists the stages of rows in run order.
func stagesOf(rows []results.Row) []string {
	var out []string
	for _, r := range rows {
		if !slices.Contains(out, r.Stage) {
			out = append(out, r.Stage)
		}
	}
	return out
}

// slantTickLabels slants p's x tick labels by 30°, each ending at its
// tick. Stage names are about as wide as a stage's slot in a summary panel
// (redis-atomic beside redis-stream), so level they touch, and overlap in a
// browser that draws them in a wider font than Liberation Sans; slanted,
// neighbours sit 30 points apart across their baselines, nearly three
// times a label's height.
func slantTickLabels(p *plot.Plot) {
	p.X.Tick.Label.Rotation = math.Pi / 6
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YTop
}

// summaryChart is the one-glance chart of a report: per stage, the units
// sold against the stock, the oversold part in red, beside the answered
// buyers per second. Each table of the report (a scenario, or a scenario at
// one concurrency) is one bar in every stage's cluster.
func summaryChart(rep Report) ([]byte, error) {
	groups := rep.tableGroups()
	stages := stagesOf(rep.Rows)
	if len(groups) == 0 || len(stages) == 0 {
		return nil, fmt.Errorf("summary chart: no rows")
	}
	sweeping := len(rep.Settings.Sweep) > 0
	const w, h = 960, 270 // the slanted stage names take 30 of the height
	panelW := vg.Length(w/2) - 60
	bars := summaryBars{stages: stages, groups: len(groups), slot: 0.8 / float64(len(groups))} // slot: of one stage's unit of x
	bars.width = panelW / vg.Length(len(stages)) * vg.Length(bars.slot)
	bars.oversold = slices.ContainsFunc(rep.Rows, func(r results.Row) bool { return r.Oversold > 0 })
	sold, rate := summaryPanel("Units sold vs stock (oversold in red)", "units", stages), summaryPanel("Answered buyers per second (201 + 409)", "answered/s", stages)

	top, topRate := float64(rep.Settings.Stock), 0.0
	for gi, g := range groups {
		gTop, gRate, err := bars.add(sold, rate, gi, g, groupLabel(g, sweeping))
		if err != nil {
			return nil, err
		}
		top, topRate = max(top, gTop), max(topRate, gRate)
	}
	if rep.Settings.Stock > 0 {
		line, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: float64(rep.Settings.Stock)}, {X: float64(len(stages)) - 0.5, Y: float64(rep.Settings.Stock)}})
		if err != nil {
			return nil, err
		}
		line.Color, line.Width, line.Dashes = colorStock, 1.2, []vg.Length{4, 3}
		sold.Add(line)
		sold.Legend.Add(fmt.Sprintf("stock %d", rep.Settings.Stock), line)
	}
	// Head room above the tallest bar keeps the legend off the bars.
	sold.Y.Min, sold.Y.Max = 0, math.Max(1, top)*1.45
	rate.Y.Min, rate.Y.Max = 0, math.Max(1, topRate)*1.1
	sold.X.Min, sold.X.Max = -0.5, float64(len(stages))-0.5
	rate.X.Min, rate.X.Max = -0.5, float64(len(stages))-0.5
	sold.Legend.Top, sold.Legend.Left = true, true
	sold.Legend.Padding = 2
	sold.Legend.YOffs = -4

	return renderSVG(w, h, func(dc draw.Canvas) {
		tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: 24, PadTop: 2, PadBottom: 2, PadLeft: 2, PadRight: 8}
		canvases := plot.Align([][]*plot.Plot{{sold, rate}}, tiles, dc)
		sold.Draw(canvases[0][0])
		rate.Draw(canvases[0][1])
	})
}

// summaryPanel is one panel of the summary chart: a bar per stage.
func summaryPanel(title, yLabel string, stages []string) *plot.Plot {
	p := newPlot(title)
	p.NominalX(stages...)
	slantTickLabels(p)
	p.Y.Label.Text = yLabel
	p.Y.Tick.Marker = plainTicks{}
	return p
}

// summaryBars places each table's bars side by side within a stage's
// slot of the summary chart.
type summaryBars struct {
	stages   []string
	groups   int
	slot     float64
	width    vg.Length
	oversold bool // some row oversold: the red bars appear
}

// add draws group gi's bars on both panels and returns the most it sold
// and answered per second.
func (b summaryBars) add(sold, rate *plot.Plot, gi int, g []results.Row, label string) (top, topRate float64, err error) {
	base, over, thr := make(plotter.Values, len(b.stages)), make(plotter.Values, len(b.stages)), make(plotter.Values, len(b.stages))
	for _, r := range g {
		i := slices.Index(b.stages, r.Stage)
		if r.Verdict == results.Skipped {
			continue
		}
		base[i] = float64(min(r.Sold, r.InitialStock))
		over[i] = float64(r.Oversold)
		thr[i] = r.Throughput
		top = max(top, float64(r.Sold))
		topRate = max(topRate, r.Throughput)
	}
	xmin := (float64(gi) - float64(b.groups-1)/2) * b.slot
	col := groupColors[gi%len(groupColors)]
	bb, err := plotter.NewBarChart(base, b.width)
	if err != nil {
		return 0, 0, err
	}
	bb.XMin, bb.Color, bb.LineStyle.Width = xmin, col, 0
	t, err := plotter.NewBarChart(thr, b.width)
	if err != nil {
		return 0, 0, err
	}
	t.XMin, t.Color, t.LineStyle.Width = xmin, col, 0
	sold.Add(bb)
	rate.Add(t)
	sold.Legend.Add(label, bb)
	// Red appears only where something was oversold, so a chart without
	// red is itself the verdict "nothing oversold".
	if b.oversold {
		o, err := plotter.NewBarChart(over, b.width)
		if err != nil {
			return 0, 0, err
		}
		o.StackOn(bb)
		o.Color, o.LineStyle.Width = colorOversold, 0
		sold.Add(o)
		if gi == b.groups-1 {
			sold.Legend.Add("oversold", o)
		}
	}
	return top, topRate, nil
}

// concurrencyAxis sets x as a log₂ axis of buyers in flight, ticked at
// the sweep's levels.
func concurrencyAxis(p *plot.Plot, levels []int) {
	p.X.Scale = plot.LogScale{}
	var ticks plot.ConstantTicks
	for _, l := range levels {
		ticks = append(ticks, plot.Tick{Value: float64(l), Label: strconv.Itoa(l)})
	}
	p.X.Tick.Marker = ticks
	p.X.Label.Text = "buyers in flight"
	if len(levels) > 0 {
		p.X.Min, p.X.Max = float64(levels[0])/1.3, float64(levels[len(levels)-1])*1.3
	}
}

// lineChart draws one line per stage of value over the sweep's levels.
func lineChart(title, yLabel string, logY bool, levels []int, byStage map[string][]results.Row, stages []string, value func(r results.Row) float64) ([]byte, error) {
	p := newPlot(title)
	concurrencyAxis(p, levels)
	p.Y.Label.Text = yLabel
	top, bottom := 0.0, math.Inf(1)
	for _, stage := range stages {
		var xys plotter.XYs
		for _, r := range byStage[stage] {
			if v := value(r); r.Verdict != results.Skipped && r.Requests > 0 && (!logY || v > 0) {
				xys = append(xys, plotter.XY{X: float64(r.Workers), Y: v})
				top, bottom = max(top, v), min(bottom, v)
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, s, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		col, glyph := stageStyle(stage)
		l.Color, l.Width = col, 1.6
		s.Color, s.Shape, s.Radius = col, glyph, 3.2
		p.Add(l, s)
		p.Legend.Add(stage, l, s)
	}
	p.Legend.Top, p.Legend.Left = true, true
	if logY && !math.IsInf(bottom, 1) {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Min, p.Y.Max = bottom/1.5, top*6 // room for the legend
	} else {
		p.Y.Min, p.Y.Max = 0, math.Max(1, top)*1.5
		p.Y.Tick.Marker = plainTicks{}
	}
	p.Legend.Padding = 2
	return renderSVG(480, 300, func(dc draw.Canvas) { p.Draw(dc) })
}

// answersChart stacks the answers of each stage at each level: one small
// panel per stage, one bar per level, so a stage's drift from 201/409 to
// 429/503/5xx as the crowd grows reads left to right.
func answersChart(title string, levels []int, byStage map[string][]results.Row, stages []string) ([]byte, error) {
	var plots []*plot.Plot
	top := 1.0
	// One legend for all panels, drawn beside them.
	legend := plot.NewLegend()
	legend.TextStyle.Font.Variant, legend.TextStyle.Font.Size = "Sans", 10
	legend.Top, legend.Left = true, true
	legend.Padding = 3
	for _, stage := range stages {
		p := newPlot(stage)
		names := make([]string, len(levels))
		for i, l := range levels {
			names[i] = strconv.Itoa(l)
		}
		p.NominalX(names...)
		p.X.Label.Text = "in flight"
		var below *plotter.BarChart
		for ci, class := range answerClasses {
			vs := make(plotter.Values, len(levels))
			for _, r := range byStage[stage] {
				if i := slices.Index(levels, r.Workers); i >= 0 && r.Verdict != results.Skipped {
					vs[i] = float64(class.count(r))
				}
			}
			b, err := plotter.NewBarChart(vs, 16)
			if err != nil {
				return nil, err
			}
			b.Color, b.LineStyle.Width = class.color, 0
			if below != nil {
				b.StackOn(below)
			}
			p.Add(b)
			if len(plots) == 0 {
				legend.Add(answerClasses[ci].label, b)
			}
			below = b
		}
		for i := range levels {
			top = max(top, below.BarHeight(i))
		}
		plots = append(plots, p)
	}
	if len(plots) == 0 {
		return nil, fmt.Errorf("answers chart: no stage")
	}
	for i, p := range plots {
		p.Y.Min, p.Y.Max = 0, top*1.05
		p.Y.Tick.Marker = plainTicks{bare: i > 0} // one scale, read off the first panel
		if i == 0 {
			p.Y.Label.Text = "requests"
		}
	}
	const panelW, h, legendW = 150, 300, 90
	w := vg.Length(panelW*len(plots)) + legendW
	head := newPlot(title)
	return renderSVG(w, h, func(dc draw.Canvas) {
		// The title across the top, the legend on the right, the panels
		// aligned between them.
		titleH := head.Title.TextStyle.Height(title) + 8
		dc.FillText(head.Title.TextStyle, vg.Point{X: dc.Center().X, Y: dc.Max.Y - 2}, title)
		body := dc
		body.Max.Y -= titleH
		body.Max.X -= legendW
		tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: 6, PadLeft: 2, PadRight: 2, PadBottom: 2}
		canvases := plot.Align([][]*plot.Plot{plots}, tiles, body)
		for i, p := range plots {
			p.Draw(canvases[0][i])
		}
		side := dc
		side.Min.X = dc.Max.X - legendW + 6
		side.Max.Y -= titleH
		legend.Draw(side)
	})
}

// WriteCharts draws the report's charts into dir and lists them in rep:
// the summary always; with a sweep, per scenario, answered/s and p99
// against buyers in flight and the stacked answers.
func WriteCharts(dir string, rep *Report) error {
	write := func(c chart, svg []byte, err error) error {
		if err != nil {
			return fmt.Errorf("%s chart: %w", c.Kind, err)
		}
		if err := os.WriteFile(filepath.Join(dir, c.File), svg, 0o644); err != nil {
			return fmt.Errorf("%s chart: %w", c.Kind, err)
		}
		rep.Charts = append(rep.Charts, c)
		return nil
	}
	rep.Charts = nil
	if ran := slices.ContainsFunc(rep.Rows, func(r results.Row) bool { return r.Verdict != results.Skipped }); !ran {
		return nil
	}
	svg, err := summaryChart(*rep)
	if err := write(chart{File: "summary.svg", Kind: chartSummary, Title: "Sold vs stock, and answered/s, per stage"}, svg, err); err != nil {
		return err
	}
	levels := rep.Settings.Sweep
	if len(levels) < 2 {
		return nil
	}
	for _, sc := range rep.scenarios() {
		byStage := rep.sweepSeries(sc)
		stages := stagesOf(rep.Rows)
		file := func(kind string) string { return "sweep-" + sc + "-" + kind + ".svg" }
		svg, err := lineChart(sc+": answered requests per second vs buyers in flight", "answered/s (201, 202, 409)", false,
			levels, byStage, stages, func(r results.Row) float64 { return r.Throughput })
		if err := write(chart{File: file(chartThroughput), Kind: chartThroughput, Scenario: sc, Title: sc + ": answered/s vs in flight"}, svg, err); err != nil {
			return err
		}
		svg, err = lineChart(sc+": p99 latency vs buyers in flight", "p99 (ms, log scale)", true,
			levels, byStage, stages, func(r results.Row) float64 { return r.P99ms })
		if err := write(chart{File: file(chartP99), Kind: chartP99, Scenario: sc, Title: sc + ": p99 vs in flight"}, svg, err); err != nil {
			return err
		}
		svg, err = answersChart(sc+": answers per stage and buyers in flight", levels, byStage, stages)
		if err := write(chart{File: file(chartAnswers), Kind: chartAnswers, Scenario: sc, Title: sc + ": answers per stage and in flight"}, svg, err); err != nil {
			return err
		}
	}
	return nil
}
