package results

import (
	"fmt"
	"math"
	"time"
)

// Scalper are a scalper row's own figures.
type Scalper struct {
	People   int  `json:"people"`
	Scalpers int  `json:"scalpers"`
	Accounts int  `json:"accounts_per_scalper"`
	Limited  bool `json:"limited"`
	// LimitIntervalMS and LimitBurst are the per-address limit of a
	// limited row.
	LimitIntervalMS float64 `json:"limit_interval_ms,omitempty"`
	LimitBurst      int     `json:"limit_burst,omitempty"`
	// Requests, units won and 429 answers of each group.
	NormalRequests  int `json:"normal_requests"`
	ScalperRequests int `json:"scalper_requests"`
	NormalWon       int `json:"normal_won"`
	ScalperWon      int `json:"scalper_won"`
	ScalpersWhoWon  int `json:"scalpers_who_won"` // scalpers with at least one unit
	NormalLimited   int `json:"normal_limited"`
	ScalperLimited  int `json:"scalper_limited"`
	// ShareOfPeople is the scalpers' share of the people; ShareOfUnits
	// their share of the units won, and Gain the ratio of the two (nil
	// when nobody won). Target is the most Gain may be (limited rows).
	ShareOfPeople float64  `json:"share_of_people"`
	ShareOfUnits  *float64 `json:"share_of_units"`
	Gain          *float64 `json:"gain"`
	Target        *float64 `json:"target,omitempty"`
	TargetMet     *bool    `json:"target_met,omitempty"`
	// TargetVerdict says that the row fails when the target is surely
	// missed (--scalper-target-verdict); otherwise the target is reported.
	TargetVerdict bool `json:"target_verdict,omitempty"`
	// MissedP is the chance that the scalpers would win as many units as
	// they did if their true gain were the target (a one-sided binomial
	// tail over the units won): below MissedAt, the target is surely
	// missed, not just by the luck of one draw of 100 units.
	MissedP *float64 `json:"missed_p,omitempty"`
	// DrawMS is the opening draw a limited row set beside the limit
	// (--scalper-draw; 0: none), and OpensAt the opening it drew for.
	DrawMS  float64    `json:"draw_ms,omitempty"`
	OpensAt *time.Time `json:"opens_at,omitempty"`
	// LimitAllows is the most units the scalpers' addresses could win
	// through the limit (a limited row): their burst, and one per interval
	// they kept firing. More is a limit that did not hold.
	LimitAllows int `json:"limit_allows,omitempty"`
	// LastScalperAnswer is when, after T-0, the last scalper request was
	// answered: the instance checked the limit at some point before.
	LastScalperAnswer time.Duration `json:"-"`
}

// Note sums the scalper figures up for the row's note.
func (s *Scalper) Note() string {
	limit := "rate limit off"
	if s.Limited {
		limit = fmt.Sprintf("per-address rate limit on (burst %d, then one per %g ms)", s.LimitBurst, s.LimitIntervalMS)
		if s.DrawMS > 0 {
			limit += fmt.Sprintf(" and an opening draw of %g ms", s.DrawMS)
		}
	}
	gain := "n/a (nobody won)"
	if s.Gain != nil {
		gain = fmt.Sprintf("%.0f%% of the units to %.0f%% of the people: %.2f× their share", 100**s.ShareOfUnits, 100*s.ShareOfPeople, *s.Gain)
	}
	if s.TargetMet != nil {
		met := "met"
		if !*s.TargetMet {
			met = "NOT MET"
		}
		gain += fmt.Sprintf(" (target ≤ %.2f×: %s", *s.Target, met)
		if s.MissedP != nil && !*s.TargetMet {
			gain += fmt.Sprintf("; a true gain of %.2f× would win this many %.2g of the time", *s.Target, *s.MissedP)
		}
		if !s.TargetVerdict {
			gain += ", reported, not a verdict: see --scalper-target-verdict"
		}
		gain += fmt.Sprintf("); the limit lets their addresses win at most %d", s.LimitAllows)
	}
	return fmt.Sprintf("scalpers, %s: %d people, %d of them scalpers with %d accounts each; scalpers won %d units (%d of them at least one) with %d requests (%d × 429), ordinary buyers %d with %d requests (%d × 429); %s",
		limit, s.People, s.Scalpers, s.Accounts, s.ScalperWon, s.ScalpersWhoWon, s.ScalperRequests, s.ScalperLimited, s.NormalWon, s.NormalRequests, s.NormalLimited, gain)
}

// MissedAt is the one-sided binomial tail below which a scalper row's
// target counts as surely missed (Scalper.MissedP).
const MissedAt = 0.01

// Missed reports whether the row's scalpers surely won more than the
// target lets them: more units than a true gain at the target would give
// them but once in a hundred draws.
func (s *Scalper) Missed() bool {
	return s.TargetMet != nil && !*s.TargetMet && s.MissedP != nil && *s.MissedP < MissedAt
}

// BinomialTail is P(X ≥ k) for X binomial over n draws of chance p.
func BinomialTail(n, k int, p float64) float64 {
	if k <= 0 {
		return 1
	}
	if p <= 0 {
		return 0
	}
	if p >= 1 {
		return 1
	}
	// The terms from k up, each from the last: C(n,i+1)/C(n,i) = (n-i)/(i+1).
	lp, lq := math.Log(p), math.Log1p(-p)
	lg := func(x int) float64 { v, _ := math.Lgamma(float64(x) + 1); return v }
	sum := 0.0
	for i := k; i <= n; i++ {
		sum += math.Exp(lg(n) - lg(i) - lg(n-i) + float64(i)*lp + float64(n-i)*lq)
	}
	return min(1, sum)
}
