package results

import "fmt"

// Paced are the paced scenario's figures in a row.
type Paced struct {
	PaceMS   float64 `json:"pace_ms"`
	Planned  int     `json:"planned"`  // the most arrivals the scenario would send (--paced-buyers)
	Arrivals int     `json:"arrivals"` // arrivals whose request was written
	// PeakInFlight is the most requests in flight at once: 1 means every
	// buyer was answered before the next arrived, and the order of the
	// answers could not differ from that of the arrivals.
	PeakInFlight int `json:"peak_in_flight"`
	// Score is the first-come score, nil when nobody won a unit; Target
	// the least the stage must score (scenario/fairness.go), nil when it has none.
	Score    *float64 `json:"first_come_score"`
	Target   *float64 `json:"first_come_target,omitempty"`
	FirstWon int      `json:"first_won"` // units won by the first `stock` arrivals
	Won      int      `json:"won"`       // units won by anyone (buyers answered 201 or 202)
	Stock    int      `json:"stock"`
	// Jitter is the lab's own: how late each request was written after
	// its planned instant, in ms, and neighbours it swapped.
	JitterP50ms float64 `json:"jitter_p50_ms"`
	JitterP99ms float64 `json:"jitter_p99_ms"`
	JitterMaxMs float64 `json:"jitter_max_ms"`
	Reordered   int     `json:"reordered"`
	// JitterWindow is how many places of the order the p99 jitter spans
	// (p99 over the pace), and LateWins the units won by arrivals more
	// than that past the first Stock: wins the jitter cannot explain.
	JitterWindow int `json:"jitter_window"`
	LateWins     int `json:"late_wins"`
}

// Note sums the paced figures up for the row's note.
func (p *Paced) Note() string {
	score := "n/a (nobody won)"
	if p.Score != nil {
		score = fmt.Sprintf("%.2f (%d of %d units to the first %d arrivals)", *p.Score, p.FirstWon, p.Won, p.Stock)
	}
	s := fmt.Sprintf("paced: %d arrivals %.1f ms apart, at most %d in flight; first-come score %s", p.Arrivals, p.PaceMS, p.PeakInFlight, score)
	if p.Target == nil {
		s += ", no target for this stage"
	}
	s += fmt.Sprintf("; the lab's jitter p50 %.2f ms, p99 %.2f ms, max %.2f ms, %d neighbours swapped", p.JitterP50ms, p.JitterP99ms, p.JitterMaxMs, p.Reordered)
	if p.JitterP99ms >= p.PaceMS {
		s += " (p99 jitter ≥ the pace: the lab itself reorders arrivals; the score follows the order requests were written in)"
	}
	return s + fmt.Sprintf("; %d units went to arrivals more than %d places past the first %d, more than that jitter explains", p.LateWins, p.JitterWindow, p.Stock)
}
