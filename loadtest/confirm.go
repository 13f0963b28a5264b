package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/loadtest/results"
)

// A stage that queues its orders (redis-stream) answers 202 as soon as
// Redis took the units: the sale is accepted, the order written later. Its
// verdict waits until every accepted order is written (confirmed) or given
// up on (failed), and reports how long that took.

// confirmation is what became of the orders a burst's 202s accepted.
type confirmation struct {
	accepted  int
	confirmed int
	failed    int
	pending   int // still pending when the lab stopped waiting
	missing   int // no such order: lost (a Redis that restarted empty)
	toConfirm []time.Duration
	peakLag   int // most orders accepted and not yet written at once
}

// confirm waits, up to within, until no order of the item is pending (the
// audit's pending_orders), then reads each accepted order once. It polls
// one target: while a queue drains, audits read one after another through
// several targets differ by what was written in between, so their
// agreement is checked only once the counts stand still (settledAudit).
func (f *fleet) confirm(ctx context.Context, sc scenario, id int64, orders []string, within time.Duration) (confirmation, error) {
	c := confirmation{accepted: len(orders)}
	deadline := time.Now().Add(within)
	var spans []span
	for {
		a, err := f.auditOn(ctx, f.targets[0], sc, id)
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
		err := f.do(ctx, "GET", f.targets[i%len(f.targets)]+"/api/v1/orders/"+no, nil, &o)
		switch {
		case err != nil && strings.Contains(err.Error(), "404"):
			c.missing++
		case err != nil:
			return c, fmt.Errorf("order %s: %w", no, err)
		case o.Status == api.StatusPending:
			c.pending++
		case o.Status == api.StatusFailed:
			c.failed++
		default: // confirmed, or already paid or cancelled: it was written
			c.confirmed++
			if o.WrittenAt != nil {
				c.toConfirm = append(c.toConfirm, o.WrittenAt.Sub(o.CreatedAt))
				spans = append(spans, span{o.CreatedAt, *o.WrittenAt})
			}
		}
	}
	c.peakLag = peakOverlap(spans)
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

// percentile of durations by the nearest-rank method, in milliseconds.
func percentileMS(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(q*float64(len(s))+0.999999) - 1
	return results.MS(s[max(0, min(rank, len(s)-1))])
}

// writtenOrders lists a tally's 201 order numbers, sorted.
func (t *tally) writtenOrders() []string {
	out := make([]string, 0, len(t.written))
	for no := range t.written {
		out = append(out, no)
	}
	slices.Sort(out)
	return out
}

// acceptedOrders lists a tally's 202 order numbers, sorted.
func (t *tally) acceptedOrders() []string {
	out := make([]string, 0, len(t.accepted))
	for no := range t.accepted {
		out = append(out, no)
	}
	sort.Strings(out)
	return out
}
