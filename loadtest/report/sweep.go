package report

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/seckill-lab/seckill/loadtest/results"
)

// A sweep runs the same crowd at several numbers of buyers in flight. By
// Little's law a stage's answers per second grow with the buyers in flight
// until something inside it (a lock, a row, a pool) is saturated; past that
// knee more buyers in flight only queue, and latency grows instead.

// kneeGain is the growth in answered/s that still counts as scaling from
// one level of the sweep to the next: below it, the stage has saturated.
const kneeGain = 1.10

// knee says where one stage of one scenario stopped scaling.
type knee struct {
	Scenario string `json:"scenario"`
	Stage    string `json:"stage"`
	// Workers is the number of buyers in flight at the knee; 0 when the
	// stage still scaled at the largest level of the sweep, or there was
	// too little to judge.
	Workers int    `json:"workers"`
	Text    string `json:"text"`
}

// sweepSeries returns, per stage, the rows of scenario sc in ascending
// order of buyers in flight.
func (rep Report) sweepSeries(sc string) map[string][]results.Row {
	out := map[string][]results.Row{}
	for _, r := range rep.Rows {
		if r.Scenario == sc {
			out[r.Stage] = append(out[r.Stage], r)
		}
	}
	for _, rs := range out {
		slices.SortStableFunc(rs, func(a, b results.Row) int { return a.Workers - b.Workers })
	}
	return out
}

// findKnee names the knee of one stage's series: the first level whose
// next level added less than kneeGain in answered/s.
func findKnee(sc, stage string, series []results.Row) knee {
	k := knee{Scenario: sc, Stage: stage}
	var pts []results.Row
	for _, r := range series {
		if r.Verdict != results.Skipped && r.Requests > 0 {
			pts = append(pts, r)
		}
	}
	if len(pts) < 2 {
		k.Text = "too few levels ran to find a knee"
		return k
	}
	for i := 0; i+1 < len(pts); i++ {
		a, b := pts[i], pts[i+1]
		if b.Throughput < a.Throughput*kneeGain {
			k.Workers = a.Workers
			k.Text = fmt.Sprintf("knee at %d in flight (%.0f answered/s, p99 %.0f ms): at %d in flight, %s answered/s while p99 went to %.0f ms",
				a.Workers, a.Throughput, a.P99ms, b.Workers, change(a.Throughput, b.Throughput), b.P99ms)
			return k
		}
	}
	a, b := pts[len(pts)-2], pts[len(pts)-1]
	k.Text = fmt.Sprintf("no knee up to %d in flight: answered/s still rose %s from %d (%.0f/s, p99 %.0f ms) to %d (%.0f/s, p99 %.0f ms)",
		b.Workers, change(a.Throughput, b.Throughput), a.Workers, a.Throughput, a.P99ms, b.Workers, b.Throughput, b.P99ms)
	return k
}

// change describes b against a as a signed percentage.
func change(a, b float64) string {
	if a <= 0 {
		return "rose from nothing"
	}
	pct := math.Round((b/a - 1) * 100)
	if pct == 0 {
		return "±0%" // not "-0%" for a dip too small to count
	}
	return fmt.Sprintf("%+.0f%%", pct)
}

// FindKnees finds the knee of every stage of every scenario of a sweep.
func FindKnees(rep Report) []knee {
	if len(rep.Settings.Sweep) < 2 {
		return nil
	}
	var out []knee
	for _, sc := range rep.scenarios() {
		series := rep.sweepSeries(sc)
		for _, stage := range stagesOf(rep.Rows) {
			if len(series[stage]) > 0 {
				out = append(out, findKnee(sc, stage, series[stage]))
			}
		}
	}
	return out
}

// scalingTable is one scenario's scaling table: a line per stage, a column
// per level of the sweep with answered/s and p99 (and buyer p99), and the
// knee. It is
// empty without a sweep.
func scalingTable(rep Report, sc string) (head []string, lines [][]string) {
	levels := rep.Settings.Sweep
	if len(levels) < 2 {
		return nil, nil
	}
	head = []string{"stage"}
	for _, l := range levels {
		head = append(head, fmt.Sprintf("%d in flight", l))
	}
	head = append(head, "knee")
	series := rep.sweepSeries(sc)
	for _, stage := range stagesOf(rep.Rows) {
		line := []string{stage}
		for _, l := range levels {
			cell := "–"
			for _, r := range series[stage] {
				if r.Workers == l && r.Verdict != results.Skipped {
					cell = fmt.Sprintf("%.0f/s · p99 %.0f ms", r.Throughput, r.P99ms)
					if r.BuyerTime != nil {
						// Every buyer of a burst arrives at its start: at
						// more in flight they wait less in the lab.
						cell += fmt.Sprintf(" (buyer %.0f ms)", r.BuyerTime.P99ms)
					}
					if len(r.RSSMB) > 0 {
						cell += fmt.Sprintf(" · %.0f MiB", slices.Max(r.RSSMB))
					}
					if r.Verdict == results.Fail {
						cell += " ✗"
					}
				}
			}
			line = append(line, cell)
		}
		kneeCell := "–"
		for _, k := range rep.Knees {
			if k.Scenario == sc && k.Stage == stage {
				kneeCell = "none seen"
				if k.Workers > 0 {
					kneeCell = strconv.Itoa(k.Workers)
				}
			}
		}
		lines = append(lines, append(line, kneeCell))
	}
	return head, lines
}

// answersTable lists one scenario's answers by stage and level: the counts
// behind the stacked answers chart.
func answersTable(rep Report, sc string) (head []string, lines [][]string) {
	head = []string{"stage", "in flight"}
	for _, c := range answerClasses {
		head = append(head, c.label)
	}
	head = append(head, "answered/s", "p99 ms", "buyer p99 ms", "verdict")
	series := rep.sweepSeries(sc)
	for _, stage := range stagesOf(rep.Rows) {
		for _, r := range series[stage] {
			if r.Verdict == results.Skipped {
				continue
			}
			line := []string{stage, strconv.Itoa(r.Workers)}
			for _, c := range answerClasses {
				line = append(line, strconv.Itoa(c.count(r)))
			}
			verdict := "PASS"
			if r.Verdict == results.Fail {
				verdict = "FAIL " + strings.Join(r.Broken, ", ")
			}
			lines = append(lines, append(line, fmt.Sprintf("%.0f", r.Throughput), ms1(r.P99ms), clockCell(r.BuyerTime), verdict))
		}
	}
	return head, lines
}
