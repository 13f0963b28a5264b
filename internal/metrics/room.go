package metrics

import "github.com/prometheus/client_golang/prometheus"

// CountRoom exports what the waiting rooms of this instance did (package
// room's Counts): joins, polls, passes given by its admission steps,
// passes spent on buys, and passes that ran out unspent.
func (m *Metrics) CountRoom(counts func() (joins, polls, passes, spends, expiries int64)) {
	for i, c := range []struct{ name, help string }{
		{"room_joins_total", "Waiting room joins answered with a ticket."},
		{"room_polls_total", "Waiting room polls answered."},
		{"room_passes_total", "Places the waiting rooms admitted (a pass each), by this instance's admission steps."},
		{"room_spends_total", "Passes spent on buys (a pass given back after a 503 counts again when spent again)."},
		{"room_expiries_total", "Passes that ran out unspent, freeing their place, found by this instance's admission steps."},
	} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "seckill", Name: c.name, Help: c.help, ConstLabels: m.labels},
			func() float64 {
				j, p, a, s, e := counts()
				return float64([]int64{j, p, a, s, e}[i])
			}))
	}
}
