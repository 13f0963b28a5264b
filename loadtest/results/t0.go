package results

import (
	"fmt"
	"time"
)

// T0 are the T-0 scenario's figures in a row.
type T0 struct {
	// OpensAt is the opening as the reset stored it, on the reference
	// clock; ClockOffsetMS is that clock minus the lab's.
	OpensAt time.Time `json:"opens_at"`
	// LeadMS is how far ahead the opening was set, on the Tries-th try
	// (scenario.t0Leads doubles it after an early crowd overran T-0).
	LeadMS        float64 `json:"lead_ms"`
	Tries         int     `json:"tries"`
	ClockOffsetMS float64 `json:"clock_offset_ms"`
	Buyers        int     `json:"buyers"`
	// RefusedEarly counts the early requests answered 409 sale-not-open;
	// EarlyOther the others, by answer ("201", "409 sold-out", "no
	// answer"). MarginMS is the time left between the last early answer
	// and T-0.
	RefusedEarly int            `json:"refused_early"`
	EarlyOther   map[string]int `json:"early_other,omitempty"`
	MarginMS     float64        `json:"margin_ms"`
	// ReleaseLateMS is how long after T-0 (on the lab's clock) the
	// barrier opened: the lab's timer. RefusedAtT0 counts buys sent at the
	// barrier that still heard sale-not-open.
	ReleaseLateMS float64 `json:"release_late_ms"`
	RefusedAtT0   int     `json:"refused_at_t0"`
	// SoldEarly counts the orders answered (201 or 202, early or at T-0)
	// whose created_at is before OpensAt; SoldEarlyMySQL the orders MySQL
	// holds with created_at before it, when the lab reads MySQL.
	SoldEarly      int  `json:"sold_early"`
	SoldEarlyMySQL *int `json:"sold_early_mysql,omitempty"`
	// ToLastOrderMS is the last order's created_at minus OpensAt, both on
	// the database's record: from MySQL when the lab reads it (LastOrderBy
	// "mysql"), else from the orders' created_at in the 201 and 202
	// answers ("answers"). ToLastSaleAnswerMS is the lab's own view: from
	// T-0 to the last 201 or 202 received. nil: nothing was sold.
	ToLastOrderMS      *float64 `json:"t0_to_last_order_ms"`
	LastOrderBy        string   `json:"last_order_by,omitempty"`
	ToLastSaleAnswerMS *float64 `json:"t0_to_last_sale_answer_ms"`
	// FirstSecond counts the buys sent in the first second after T-0 (all
	// of them, unless the lab fell behind), with their latency.
	FirstSecond      int     `json:"first_second_requests"`
	FirstSecondP50ms float64 `json:"first_second_p50_ms"`
	FirstSecondP99ms float64 `json:"first_second_p99_ms"`
}

// Note sums the T-0 figures up for the row's note.
func (t *T0) Note() string {
	s := fmt.Sprintf("T-0: %d buyers connected early, %d refused sale-not-open, %.0f ms to spare; released %.1f ms after T-0",
		t.Buyers, t.RefusedEarly, t.MarginMS, t.ReleaseLateMS)
	if t.Tries > 1 {
		s = fmt.Sprintf("the opening set %.0f s ahead on try %d, after early crowds that overran T-0; ", t.LeadMS/1000, t.Tries) + s
	}
	if t.RefusedAtT0 > 0 {
		s += fmt.Sprintf(", %d of them still heard sale-not-open", t.RefusedAtT0)
	}
	if t.ToLastOrderMS != nil {
		s += fmt.Sprintf("; last unit sold %.0f ms after opens_at (created_at, from %s)", *t.ToLastOrderMS, t.LastOrderBy)
	}
	if t.ToLastSaleAnswerMS != nil {
		s += fmt.Sprintf(", its answer %.0f ms after T-0", *t.ToLastSaleAnswerMS)
	}
	return s + fmt.Sprintf("; first second: %d buys, p50 %.1f ms, p99 %.1f ms", t.FirstSecond, t.FirstSecondP50ms, t.FirstSecondP99ms)
}
