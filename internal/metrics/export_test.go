package metrics

import "time"

// SetClock makes the per-item gauges read their time from now.
func (m *Metrics) SetClock(now func() time.Time) {
	for _, g := range []*itemGauges{m.oversold, m.queued, m.pendingEnts} {
		g.now = now
	}
}

// Series counts the series of family name (without the seckill_ prefix)
// in the registry, and sums their values.
func (m *Metrics) Series(name string) (n int, sum float64, ids []string) {
	fams, err := m.reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range fams {
		if f.GetName() != "seckill_"+name {
			continue
		}
		for _, s := range f.GetMetric() {
			n++
			sum += s.GetGauge().GetValue()
			for _, l := range s.GetLabel() {
				if l.GetName() == "id" {
					ids = append(ids, l.GetValue())
				}
			}
		}
	}
	return n, sum, ids
}
