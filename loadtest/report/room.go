package report

import (
	"fmt"
	"strings"

	"github.com/seckill-lab/seckill/loadtest/results"
)

// roomTableHead is the title and the columns of the waiting-room
// scenario's table: one line per stage, a column per rule.
func roomTableHead() (string, []string) {
	return "waiting room · the crowd through the room, rule by rule",
		[]string{"stage", "tickets", "sold", "buy peak/s", "× admission", "first-come", "late order", "heard sold-out", "p99 ms to sold-out",
			"503s", "scalpers' gain", "per person", "verdict"}
}

// roomLine is one waiting-room row's line.
func roomLine(r results.Row) []string {
	m := r.Room
	opt := func(v *float64, format string) string {
		if v == nil {
			return "–"
		}
		return fmt.Sprintf(format, *v)
	}
	late := "–"
	if m.LateOrder != nil {
		late = fmt.Sprintf("%d/%d", m.LateInOrder, m.LatePairs)
	}
	return []string{r.Stage, itoa(m.Tickets), fmt.Sprintf("%d/%d", r.Sold, r.InitialStock),
		fmt.Sprintf("%.1f (%.1f in 1 s)", m.PeakBuyRate, m.PeakBuyRate1s), fmt.Sprintf("%.2f×", m.RateRatio),
		opt(m.FirstCome, "%.2f"), late, fmt.Sprintf("%d/%d", m.Heard, m.Waiting), fmt.Sprintf("%.0f", m.SoldOutP99ms),
		itoa(m.Unavailable), opt(m.Gain, "%.2f×"), opt(m.PersonGain, "%.2f×"), strings.ToUpper(r.Verdict)}
}
