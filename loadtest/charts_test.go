package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sweepReport is a made-up sweep: two scenarios, every stage at four
// levels. unlocked oversells; db-atomic saturates at 64 in flight and
// answers 500s at 1024; redis-atomic keeps scaling.
func sweepReport(oversell bool) report {
	levels := []int{16, 64, 256, 1024}
	rep := report{Settings: settings{Shape: "burst", Buyers: 2000, Stock: 100, Workers: 256, Sweep: levels}}
	thr := map[string][]float64{
		"unlocked": {400, 900, 1500, 1600}, "local-mutex": {300, 700, 900, 950}, "redis-lock": {200, 260, 270, 250},
		"redlock": {100, 120, 125, 90}, "db-atomic": {450, 1800, 1850, 1700}, "redis-atomic": {800, 2000, 3500, 5000},
		"redis-stream": {900, 2200, 3800, 5200},
	}
	for _, sc := range []string{"buy", "grab"} {
		for li, w := range levels {
			for _, stage := range allStages {
				r := row{Scenario: sc, Shape: "burst", Stage: stage, Workers: w, Requests: 2000, Buyers: 2000,
					Created: 100, SoldOut: 1900, Sold: 100, InitialStock: 100, Conserved: true,
					Throughput: thr[stage][li], P99ms: float64(10 * w), Verdict: verdictPass}
				if stage == "unlocked" && oversell {
					r.Created, r.SoldOut, r.Sold, r.Oversold, r.Conserved = 700, 1300, 700, 600, false
				}
				if stage == "db-atomic" && w == 1024 {
					r.SoldOut, r.ServerErrors, r.Verdict, r.Broken = 1400, 500, verdictFail, []string{ruleServerErrors}
				}
				rep.Rows = append(rep.Rows, r)
			}
		}
	}
	rep.Knees = findKnees(rep)
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
		if err := writeCharts(dir, &rep); err != nil {
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
			for _, stage := range allStages {
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
	if err := writeCharts(t.TempDir(), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Charts) != 1 || rep.Charts[0].Kind != chartSummary {
		t.Errorf("charts of one round: %+v, want the summary only", rep.Charts)
	}
}

func TestFindKnee(t *testing.T) {
	series := func(thr ...float64) []row {
		var rs []row
		for i, v := range thr {
			rs = append(rs, row{Workers: 16 << (2 * i), Throughput: v, P99ms: float64(int(10) << (2 * i)), Requests: 100, Verdict: verdictPass})
		}
		return rs
	}
	tests := []struct {
		name    string
		rows    []row
		workers int
		text    string
	}{
		{"saturates", series(450, 1800, 1850, 1700), 64, "knee at 64 in flight (1800 answered/s, p99 40 ms): at 256 in flight, +3% answered/s while p99 went to 160 ms"},
		{"falls at once", series(500, 300), 16, "at 64 in flight, -40% answered/s"},
		{"keeps scaling", series(800, 2000, 3500, 5000), 0, "no knee up to 1024 in flight: answered/s still rose +43% from 256"},
		{"flat", series(800, 799), 16, "at 64 in flight, ±0% answered/s"},
		{"one level", series(800), 0, "too few levels"},
		{"skipped levels do not count", append(series(800, 2000), row{Workers: 256, Verdict: verdictSkipped}), 0, "no knee up to 64"},
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
		rep.Rows[i].HDR = hdrFile(rep.Rows[i], true)
	}
	if err := writeCharts(t.TempDir(), &rep); err != nil {
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
		"| redis-atomic | 800/s · p99 160 ms | 2000/s · p99 640 ms | 3500/s · p99 2560 ms | 5000/s · p99 10240 ms | none seen |",
		"- `db-atomic`: knee at 64 in flight",
		"![buy: answered/s vs in flight](sweep-buy-throughput.svg)",
		"| db-atomic | 1024 | 100 | 1400 | 0 | 0 | 500 | 0 | 0 | 1700 | 10240.0 | FAIL server-errors |",
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
