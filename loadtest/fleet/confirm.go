package fleet

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
)

// A stage that queues its orders (redis-stream) answers 202 as soon as
// Redis took the units: the sale is accepted, the order written later. Its
// verdict waits until every accepted order is written (confirmed) or given
// up on (failed), and reports how long that took.

// Confirmation is what became of the orders a burst's 202s accepted.
type Confirmation struct {
	Accepted  int
	Confirmed int
	Failed    int
	Pending   int // still pending when the lab stopped waiting
	Missing   int // no such order: lost (a Redis that restarted empty)
	ToConfirm []time.Duration
	PeakLag   int // most orders accepted and not yet written at once
}

// Confirm waits, up to within, until no order of the item is pending (the
// audit's pending_orders), then reads each accepted order once. It polls
// one target: while a queue drains, audits read one after another through
// several targets differ by what was written in between, so their
// agreement is checked only once the counts stand still (SettledAudit).
func (f *Fleet) Confirm(ctx context.Context, it Item, orders []string, within time.Duration) (Confirmation, error) {
	c := Confirmation{Accepted: len(orders)}
	deadline := time.Now().Add(within)
	var spans []span
	for {
		a, err := f.AuditOn(ctx, f.Targets[0], it)
		if err != nil {
			return c, err
		}
		if a.PendingOrders == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return c, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	for i, no := range orders {
		var o api.OrderStatus
		err := f.Do(ctx, "GET", f.Targets[i%len(f.Targets)]+"/api/v1/orders/"+no, nil, &o)
		switch {
		case err != nil && strings.Contains(err.Error(), "404"):
			c.Missing++
		case err != nil:
			return c, fmt.Errorf("order %s: %w", no, err)
		case o.Status == api.StatusPending:
			c.Pending++
		case o.Status == api.StatusFailed:
			c.Failed++
		default: // confirmed, or already paid or cancelled: it was written
			c.Confirmed++
			if o.WrittenAt != nil {
				c.ToConfirm = append(c.ToConfirm, o.WrittenAt.Sub(o.CreatedAt))
				spans = append(spans, span{o.CreatedAt, *o.WrittenAt})
			}
		}
	}
	c.PeakLag = peakOverlap(spans)
	return c, nil
}

// span is the time an order spent accepted and not yet written.
type span struct{ from, to time.Time }

// peakOverlap is the most spans open at one instant: the peak lag of the
// queue, from the orders' own timestamps (accepted by one instance, written
// by another: the instances' clocks are assumed close). Sampling the queue
// length instead would miss a peak shorter than the sampling period.
func peakOverlap(spans []span) int {
	type event struct {
		at    time.Time
		delta int
	}
	events := make([]event, 0, 2*len(spans))
	for _, s := range spans {
		events = append(events, event{s.from, +1}, event{s.to, -1})
	}
	// At equal times a write closes before an acceptance opens.
	sort.Slice(events, func(i, j int) bool {
		if !events[i].at.Equal(events[j].at) {
			return events[i].at.Before(events[j].at)
		}
		return events[i].delta < events[j].delta
	})
	open, peak := 0, 0
	for _, e := range events {
		open += e.delta
		peak = max(peak, open)
	}
	return peak
}
