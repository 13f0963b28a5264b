package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/loadtest/results"
	"github.com/seckill-lab/seckill/loadtest/verdict"
)

// sweepReport is a made-up sweep: two scenarios, every stage at four
// levels. unlocked oversells; db-atomic saturates at 64 in flight and
// answers 500s at 1024; redis-atomic keeps scaling.
func sweepReport(oversell bool) Report {
	levels := []int{16, 64, 256, 1024}
	rep := Report{Settings: Settings{Shape: "burst", Buyers: 2000, Stock: 100, Workers: 256, Sweep: levels}}
	thr := map[string][]float64{
		"unlocked": {400, 900, 1500, 1600}, "local-mutex": {300, 700, 900, 950}, "redis-lock": {200, 260, 270, 250},
		"redlock": {100, 120, 125, 90}, "db-atomic": {450, 1800, 1850, 1700}, "redis-atomic": {800, 2000, 3500, 5000},
		"redis-stream": {900, 2200, 3800, 5200}, "redis-sharded": {850, 2100, 3600, 5100},
	}
	for _, sc := range []string{"buy", "grab"} {
		for li, w := range levels {
			for _, stage := range inventory.Stages {
				r := results.Row{Scenario: sc, Shape: "burst", Stage: stage, Workers: w, Requests: 2000, Buyers: 2000,
					Created: 100, SoldOut: 1900, Sold: 100, InitialStock: 100, Conserved: true,
					Throughput: thr[stage][li], P99ms: float64(10 * w), Verdict: results.Pass}
				if stage == "unlocked" && oversell {
					r.Created, r.SoldOut, r.Sold, r.Oversold, r.Conserved = 700, 1300, 700, 600, false
				}
				if stage == "redis-atomic" {
					r.BuyerTime = &results.Latencies{P99ms: float64(20 * w)}
				}
				if stage == "db-atomic" && w == 1024 {
					r.SoldOut, r.ServerErrors, r.Verdict, r.Broken = 1400, 500, results.Fail, []string{verdict.RuleServerErrors}
				}
				rep.Rows = append(rep.Rows, r)
			}
		}
	}
	rep.Knees = FindKnees(rep)
	return rep
}

// wellFormed fails unless svg parses as XML to the end.
func wellFormed(t *testing.T, name string, svg []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(svg))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", name, err)
		}
	}
}

// TestCharts draws a sweep's charts and checks what a reader relies on:
// every chart is a well-formed SVG that names what it shows, and the
// summary paints oversold units red exactly when something was oversold.
func TestCharts(t *testing.T) {
	const red = "#B00020" // colorOversold, as the SVG writes it
	for _, oversell := range []bool{true, false} {
		dir := t.TempDir()
		rep := sweepReport(oversell)
		if err := WriteCharts(dir, &rep); err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, c := range rep.Charts {
			kinds = append(kinds, c.Scenario+":"+c.Kind)
			svg, err := os.ReadFile(filepath.Join(dir, c.File))
			if err != nil {
				t.Fatal(err)
			}
			wellFormed(t, c.File, svg)
			for _, stage := range inventory.Stages {
				if !bytes.Contains(svg, []byte(">"+stage+"<")) {
					t.Errorf("%s does not name stage %s", c.File, stage)
				}
			}
			switch c.Kind {
			case chartSummary:
				if got := bytes.Contains(svg, []byte(red)); got != oversell {
					t.Errorf("summary with oversold=%v: red present = %v", oversell, got)
				}
				for _, want := range []string{"stock 100", "buy @16", "grab @1024", "Answered buyers per second"} {
					if !bytes.Contains(svg, []byte(want)) {
						t.Errorf("summary lacks %q", want)
					}
				}
			case chartThroughput, chartP99:
				for _, want := range []string{">16<", ">1024<", "buyers in flight"} {
					if !bytes.Contains(svg, []byte(want)) {
						t.Errorf("%s lacks %q", c.File, want)
					}
				}
			case chartAnswers:
				for _, want := range []string{">201<", ">429<", ">503<", ">5xx<", ">no answer<"} {
					if !bytes.Contains(svg, []byte(want)) {
						t.Errorf("%s lacks the legend entry %q", c.File, want)
					}
				}
			}
		}
		want := "-:summary buy:throughput buy:p99 buy:answers grab:throughput grab:p99 grab:answers"
		if got := strings.ReplaceAll(strings.Join(kinds, " "), ":summary", "-:summary"); got != want {
			t.Errorf("charts %q, want %q", got, want)
		}
	}

	// One round: the summary alone.
	rep := sweepReport(true)
	rep.Settings.Sweep = nil
	rep.Rows = rep.Rows[:6]
	if err := WriteCharts(t.TempDir(), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Charts) != 1 || rep.Charts[0].Kind != chartSummary {
		t.Errorf("charts of one round: %+v, want the summary only", rep.Charts)
	}
}

func TestFindKnee(t *testing.T) {
	series := func(thr ...float64) []results.Row {
		var rs []results.Row
		for i, v := range thr {
			rs = append(rs, results.Row{Workers: 16 << (2 * i), Throughput: v, P99ms: float64(int(10) << (2 * i)), Requests: 100, Verdict: results.Pass})
		}
		return rs
	}
	tests := []struct {
		name    string
		rows    []results.Row
		workers int
		text    string
	}{
		{"saturates", series(450, 1800, 1850, 1700), 64, "knee at 64 in flight (1800 answered/s, p99 40 ms): at 256 in flight, +3% answered/s while p99 went to 160 ms"},
		{"falls at once", series(500, 300), 16, "at 64 in flight, -40% answered/s"},
		{"keeps scaling", series(800, 2000, 3500, 5000), 0, "no knee up to 1024 in flight: answered/s still rose +43% from 256"},
		{"flat", series(800, 799), 16, "at 64 in flight, ±0% answered/s"},
		{"one level", series(800), 0, "too few levels"},
		{"skipped levels do not count", append(series(800, 2000), results.Row{Workers: 256, Verdict: results.Skipped}), 0, "no knee up to 64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := findKnee("buy", "db-atomic", tt.rows)
			if k.Workers != tt.workers || !strings.Contains(k.Text, tt.text) {
				t.Errorf("got %d %q, want %d containing %q", k.Workers, k.Text, tt.workers, tt.text)
			}
		})
	}
}

// TestMarkdownReport checks that report.md carries the summary chart, the
// scaling table with its knees and charts, and the percentile table with
// the HDR files.
func TestMarkdownReport(t *testing.T) {
	rep := sweepReport(true)
	for i := range rep.Rows {
		rep.Rows[i].HDR = HDRFile(rep.Rows[i], true)
	}
	if err := WriteCharts(t.TempDir(), &rep); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	writeMarkdown(&b, rep)
	md := b.String()
	for _, want := range []string{
		"![Sold vs stock, and answered/s, per stage](summary.svg)",
		"## Scaling: buy",
		"| stage | 16 in flight | 64 in flight | 256 in flight | 1024 in flight | knee |",
		"| db-atomic | 450/s · p99 160 ms | 1800/s · p99 640 ms | 1850/s · p99 2560 ms | 1700/s · p99 10240 ms ✗ | 64 |",
		"| redis-atomic | 800/s · p99 160 ms (buyer 320 ms) | 2000/s · p99 640 ms (buyer 1280 ms) | 3500/s · p99 2560 ms (buyer 5120 ms) | 5000/s · p99 10240 ms (buyer 20480 ms) | none seen |",
		"| redis-atomic | 1024 | 100 | 1900 | 0 | 0 | 0 | 0 | 0 | 5000 | 10240.0 | 20480.0 | PASS |",
		"- `db-atomic`: knee at 64 in flight",
		"![buy: answered/s vs in flight](sweep-buy-throughput.svg)",
		"| db-atomic | 1024 | 100 | 1400 | 0 | 0 | 500 | 0 | 0 | 1700 | 10240.0 | – | FAIL server-errors |",
		"## Latency percentiles",
		"[hdr-buy-db-atomic-1024.txt](hdr-buy-db-atomic-1024.txt)",
		"**FAILED: buy/db-atomic@1024, grab/db-atomic@1024**",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("report.md:\n%s", md)
	}
}

// TestSummaryStageNamesDoNotOverlap draws the summary of all eight stages,
// one round and a sweep, and checks in the SVG that no two stage names
// overlap and none leaves the chart. Each name's box comes from the
// chart's font metrics (Liberation Sans, as gonum measures it), placed by
// the text's position and the transforms around it, and is drawn a fifth
// wider than measured: a browser without Liberation Sans falls back to a
// wider sans (DejaVu Sans sets these names about 15% wider). Level names
// 60 points apart failed this: redis-atomic ran into redis-stream.
func TestSummaryStageNamesDoNotOverlap(t *testing.T) {
	const fallbackWidth = 1.2
	sty := newPlot("").X.Tick.Label
	ext := sty.FontExtents()
	for _, sweep := range []bool{false, true} {
		rep := sweepReport(true)
		if !sweep {
			rep.Settings.Sweep = nil
			rep.Rows = rep.Rows[:len(inventory.Stages)]
		}
		svg, err := summaryChart(rep)
		if err != nil {
			t.Fatal(err)
		}
		width, height, texts := svgTexts(t, svg)
		var names []placedText
		for _, tx := range texts {
			if slices.Contains(inventory.Stages, tx.s) {
				if tx.size != sty.Font.Size.Points() {
					t.Fatalf("%q is drawn at %gpx, the test measures at %gpt", tx.s, tx.size, sty.Font.Size.Points())
				}
				names = append(names, tx)
			}
		}
		if len(names) != 2*len(inventory.Stages) {
			t.Fatalf("sweep=%v: %d stage names in the summary, want %d (one per stage in each panel)", sweep, len(names), 2*len(inventory.Stages))
		}
		boxes := make([][4]vg.Point, len(names))
		for i, n := range names {
			w := sty.Width(n.s).Points() * fallbackWidth
			boxes[i] = n.box(w, ext.Ascent.Points(), ext.Descent.Points())
			for _, p := range boxes[i] {
				if p.X < 0 || p.Y < 0 || p.X.Points() > width || p.Y.Points() > height {
					t.Errorf("sweep=%v: %q leaves the %gx%g chart: %v", sweep, n.s, width, height, boxes[i])
					break
				}
			}
		}
		for i := range boxes {
			for j := i + 1; j < len(boxes); j++ {
				if convexOverlap(boxes[i], boxes[j]) {
					t.Errorf("sweep=%v: stage names %q and %q overlap: %v and %v", sweep, names[i].s, names[j].s, boxes[i], boxes[j])
				}
			}
		}
	}
}

// placedText is one <text> of an SVG: its string and size, and the
// transform from its own coordinates to the SVG's.
type placedText struct {
	s    string
	size float64 // font-size, px
	x, y float64 // the text's x and y attributes, in its own coordinates
	m    affine
}

// box is the text's glyph box, w wide, in the SVG's coordinates (y down):
// from x along the baseline, ascent above it and descent below.
func (p placedText) box(w, ascent, descent float64) [4]vg.Point {
	var b [4]vg.Point
	for i, c := range [4][2]float64{{p.x, p.y - ascent}, {p.x + w, p.y - ascent}, {p.x + w, p.y + descent}, {p.x, p.y + descent}} {
		x, y := p.m.apply(c[0], c[1])
		b[i] = vg.Point{X: vg.Length(x), Y: vg.Length(y)}
	}
	return b
}

// affine is an SVG transform matrix(a b c d e f).
type affine [6]float64

func (m affine) apply(x, y float64) (float64, float64) {
	return m[0]*x + m[2]*y + m[4], m[1]*x + m[3]*y + m[5]
}

// then is m followed, inside it, by n: n applies first.
func (m affine) then(n affine) affine {
	return affine{
		m[0]*n[0] + m[2]*n[1], m[1]*n[0] + m[3]*n[1],
		m[0]*n[2] + m[2]*n[3], m[1]*n[2] + m[3]*n[3],
		m[0]*n[4] + m[2]*n[5] + m[4], m[1]*n[4] + m[3]*n[5] + m[5],
	}
}

var transformRE = regexp.MustCompile(`(\w+)\(([^)]*)\)`)

// parseTransform reads the translate, scale and rotate functions that
// vgsvg writes.
func parseTransform(t *testing.T, s string) affine {
	t.Helper()
	m := affine{1, 0, 0, 1, 0, 0}
	for _, f := range transformRE.FindAllStringSubmatch(s, -1) {
		var args []float64
		for _, a := range strings.FieldsFunc(f[2], func(r rune) bool { return r == ',' || r == ' ' }) {
			v, err := strconv.ParseFloat(a, 64)
			if err != nil {
				t.Fatalf("transform %q: %v", s, err)
			}
			args = append(args, v)
		}
		arg := func(i int, def float64) float64 {
			if i < len(args) {
				return args[i]
			}
			return def
		}
		switch f[1] {
		case "translate":
			m = m.then(affine{1, 0, 0, 1, arg(0, 0), arg(1, 0)})
		case "scale":
			m = m.then(affine{arg(0, 1), 0, 0, arg(1, arg(0, 1)), 0, 0})
		case "rotate":
			sin, cos := math.Sincos(arg(0, 0) * math.Pi / 180)
			m = m.then(affine{cos, sin, -sin, cos, 0, 0})
		default:
			t.Fatalf("transform %q: %s is not read here", s, f[1])
		}
	}
	return m
}

// svgTexts returns the size of an SVG drawn by vgsvg and every text in
// it, with the transforms of the groups around it.
func svgTexts(t *testing.T, svg []byte) (width, height float64, texts []placedText) {
	t.Helper()
	attr := func(e xml.StartElement, name string) string {
		for _, a := range e.Attr {
			if a.Name.Local == name {
				return a.Value
			}
		}
		return ""
	}
	num := func(s string) float64 {
		v, err := strconv.ParseFloat(strings.TrimSuffix(s, "pt"), 64)
		if err != nil {
			t.Fatalf("svg: %q is not a number: %v", s, err)
		}
		return v
	}
	fontSize := regexp.MustCompile(`font-size:([0-9.]+)px`)
	stack := []affine{{1, 0, 0, 1, 0, 0}}
	var cur *placedText
	d := xml.NewDecoder(bytes.NewReader(svg))
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return width, height, texts
		}
		if err != nil {
			t.Fatal(err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			switch e.Name.Local {
			case "svg":
				width, height = num(attr(e, "width")), num(attr(e, "height"))
			case "g":
				stack = append(stack, stack[len(stack)-1].then(parseTransform(t, attr(e, "transform"))))
			case "text":
				size := fontSize.FindStringSubmatch(attr(e, "style"))
				if size == nil {
					t.Fatalf("svg: a text without font-size: %v", e.Attr)
				}
				cur = &placedText{size: num(size[1]), x: num(attr(e, "x")), y: num(attr(e, "y")),
					m: stack[len(stack)-1].then(parseTransform(t, attr(e, "transform")))}
			}
		case xml.CharData:
			if cur != nil {
				cur.s += string(e)
			}
		case xml.EndElement:
			switch e.Name.Local {
			case "g":
				stack = stack[:len(stack)-1]
			case "text":
				texts = append(texts, *cur)
				cur = nil
			}
		}
	}
}

// convexOverlap reports whether two convex quadrilaterals share more than
// an edge: no side of either separates them (the separating axis test).
func convexOverlap(a, b [4]vg.Point) bool {
	for _, poly := range [][4]vg.Point{a, b} {
		for i := range poly {
			p, q := poly[i], poly[(i+1)%4]
			nx, ny := -(q.Y - p.Y).Points(), (q.X - p.X).Points() // a normal of the side
			span := func(ps [4]vg.Point) (lo, hi float64) {
				lo, hi = math.Inf(1), math.Inf(-1)
				for _, r := range ps {
					v := nx*r.X.Points() + ny*r.Y.Points()
					lo, hi = min(lo, v), max(hi, v)
				}
				return lo, hi
			}
			alo, ahi := span(a)
			blo, bhi := span(b)
			if ahi <= blo || bhi <= alo {
				return false
			}
		}
	}
	return true
}
