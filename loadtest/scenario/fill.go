package scenario

import (
	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/loadtest/fleet"
	"github.com/seckill-lab/seckill/loadtest/results"
)

// FillConfirmation copies what became of a queued stage's accepted orders
// into r.
func FillConfirmation(r *results.Row, c fleet.Confirmation) {
	r.Accepted, r.Confirmed, r.FailedOrders = c.Accepted, c.Confirmed, c.Failed
	r.Unconfirmed = c.Pending + c.Missing
	r.ConfirmP50ms, r.ConfirmP99ms = percentileMS(c.ToConfirm, 0.50), percentileMS(c.ToConfirm, 0.99)
	r.PeakLag = c.PeakLag
}

// FillRow copies the attack's counts and the audit into r.
func FillRow(r *results.Row, res Result, a api.Audit) {
	t := res.tally
	r.Requests = t.requests
	r.Planned = int(t.planned)
	r.Created = t.outcomes[outCreated]
	r.SoldOut = t.outcomes[outSoldOut]
	r.Conflicts = t.outcomes[outConflict]
	r.TooMany = t.outcomes[outTooMany]
	r.Overloaded = t.outcomes[outOverloaded]
	r.PostSale503 = t.postSaleOverloaded()
	r.RefusedWithStock = t.refusedWithStock()
	r.RefusedWithStockNet = t.refusedWithStockNet(a.GivenBack)
	for _, g := range a.GivenBack {
		r.GivenBack += g.Units
	}
	r.Other4xx = t.outcomes[outOther4xx]
	r.ServerErrors = t.outcomes[outServerError]
	r.Statuses = t.statuses
	r.TransportErrors = t.errors
	r.Timeouts = t.outcomes[outTimeout]
	r.NetErrors = t.outcomes[outNetError]
	r.Replayed = t.replayed
	r.BuyersWithOrder = len(t.buyers)
	r.Problems = t.problems
	r.DurationMS = results.MS(t.elapsed())
	if s := t.elapsed().Seconds(); s > 0 {
		r.Throughput = float64(t.served()) / s
	}
	r.P50ms = results.MS(res.metrics.Latencies.P50)
	r.P95ms = results.MS(res.metrics.Latencies.P95)
	r.P99ms = results.MS(res.metrics.Latencies.P99)
	r.P90ms = results.MS(res.metrics.Latencies.P90)
	r.P999ms = results.MS(res.metrics.Latencies.Quantile(0.999))
	r.MaxMs = results.MS(res.metrics.Latencies.Max)
	if res.clocks != nil {
		res.clocks.fill(r)
	}

	r.InitialStock = a.InitialStock
	r.Sold = a.Sold
	r.FinalStock = a.Stock
	r.Oversold = a.Oversold
	r.Conserved = a.Conserved
	if res.Many != nil {
		fillMany(r, res.Many)
	}
}
