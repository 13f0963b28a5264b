package verdict

import (
	"fmt"

	"github.com/seckill-lab/seckill/loadtest/results"
)

// notesOf is what a row's note says beyond the rules it broke: what the
// racing stage showed, or that the safe one was safe, then the figures
// every row reports.
func notesOf(r *results.Row, judged scope, failed bool) []string {
	var notes []string
	switch judged {
	case racingRows:
		notes = racingNotes(r)
	case safeRows:
		notes = safeNotes(r, failed)
	}
	return append(notes, figureNotes(r, failed)...)
}

// racingNotes: a racing stage's errors are noted, not judged.
func racingNotes(r *results.Row) []string {
	var notes []string
	if r.Oversold > 0 {
		notes = append(notes, fmt.Sprintf("oversold by %d as expected (%d sold of %d)", r.Oversold, r.Sold, r.InitialStock))
	}
	if !r.Conserved {
		notes = append(notes, fmt.Sprintf("stock not conserved: %d left the stock, %d were sold", r.InitialStock-r.FinalStock, r.Sold))
	}
	if r.ServerErrors > 0 {
		notes = append(notes, fmt.Sprintf("%d answers were 5xx (%s)", r.ServerErrors, results.StatusCounts(r, true)))
	}
	if n := noAnswer(r); n > 0 {
		notes = append(notes, fmt.Sprintf("%d requests got no answer (%d timeouts, %d network errors)", n, r.Timeouts, r.NetErrors))
	}
	return notes
}

// safeNotes says which outcome-unknown buyers hold an order (the
// orders-match rule lets them), and that a stage broke no rule.
func safeNotes(r *results.Row, failed bool) []string {
	var notes []string
	if unknown := unknownOutcomes(r); noAnswer(r) == 0 && r.Sold > r.BuyersWithOrder && r.Sold <= r.BuyersWithOrder+unknown {
		notes = append(notes, fmt.Sprintf("%d of the %d buyers answered 503 outcome-unknown hold an order (a retry with the same Idempotency-Key is answered with it)", r.Sold-r.BuyersWithOrder, unknown))
	}
	notes = append(notes, manyBuyNote(r)...)
	if !failed {
		notes = append(notes, fmt.Sprintf("safe: %d sold of %d, %d left, conserved", r.Sold, r.InitialStock, r.FinalStock))
	}
	return notes
}

// figureNotes are the figures every row reports, judged or not.
func figureNotes(r *results.Row, failed bool) []string {
	var notes []string
	add := func(format string, args ...any) { notes = append(notes, fmt.Sprintf(format, args...)) }
	if r.Overloaded > 0 && r.Requests > 0 {
		add("503 share %.1f%% (%d of %d; %d after the last sale)", 100*float64(r.Overloaded)/float64(r.Requests), r.Overloaded, r.Requests, r.PostSale503)
	}
	if r.GivenBack > 0 {
		add("%d units went back from reservations; sold-out answers before the last order: %d, %d of them with no unit in flight",
			r.GivenBack, r.RefusedWithStock, r.RefusedWithStockNet)
	}
	if r.Planned > r.Requests {
		add("stopped at the --max-duration cap after %d of %d requests", r.Requests, r.Planned)
	}
	if r.Replayed > 0 {
		add("%d idempotent replays", r.Replayed)
	}
	return append(notes, sceneNotes(r, failed)...)
}

// sceneNotes are the figures of a scenario or a stage that has them.
func sceneNotes(r *results.Row, failed bool) []string {
	var notes []string
	if t := r.T0; t != nil {
		notes = append(notes, t.Note())
	}
	if p := r.Paced; p != nil {
		notes = append(notes, p.Note())
	}
	if sp := r.Scalper; sp != nil {
		notes = append(notes, sp.Note())
	}
	if m := r.Many; m != nil {
		notes = append(notes, m.Note())
	}
	if m := r.Room; m != nil {
		notes = append(notes, m.Note())
	}
	if r.Accepted > 0 {
		notes = append(notes, fmt.Sprintf("%d accepted (202), %d confirmed; time to confirm p50 %.1f ms, p99 %.1f ms; peak lag %d orders",
			r.Accepted, r.Confirmed, r.ConfirmP50ms, r.ConfirmP99ms, r.PeakLag))
	}
	if r.MySQL != nil && !failed {
		notes = append(notes, "MySQL agrees with the audit")
	}
	if p := results.OtherProblems(r.Problems); p != "" {
		notes = append(notes, p)
	}
	if u := r.CPU.Unavailable(); u != "" {
		notes = append(notes, u)
	}
	return notes
}
