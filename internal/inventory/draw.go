package inventory

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// An opening draw. At a sale's opening the first instant decides who wins:
// a script that fires at T-0 beats every person who clicks a moment later,
// and a per-address rate limit cannot help, since the script's first shot
// is within any limit. So, when a draw is set (a span D), the buyers who
// arrive in the first D after the opening (by the reference clock, and a
// hair before it: drawEdge) are not served in arrival order: each is held,
// and let in at the opening plus D plus a random share of D. Everyone who
// came in the first D then stands the same chance, whenever in it they
// came. Buyers who come in the next D
// wait for the draw's end, so they cannot pass those still held. Past 2D,
// buyers go straight through.
//
// The draw only ever delays a buyer, after the window, the sold-out memory
// and the rate limit have had their say; the stage still checks the window
// on its reference clock, so a draw whose idea of the opening is off (the
// reference read's round trip, which only widens the hold) sells nothing
// early.

// drawEdge is how early before its idea of the opening a Draw holds a
// buyer too (never more than the span): the stage's reference clock may
// not be quite the one the draw read (the Redis stages ask Redis, the draw
// the database). The read itself is no reason for it: the draw brackets
// the opening between this clock's readings from before and after the
// reference read (drawMark), holds from the earlier and schedules from the
// later, so a slow read makes the hold longer, never lets a buyer past.
const drawEdge = 100 * time.Millisecond

// DrawHoldMax is the longest a draw of span holds a buyer when its read of
// the reference clock is quick: one who came drawEdge before the opening
// and drew last is let in 2 spans after it.
func DrawHoldMax(span time.Duration) time.Duration { return 2*span + min(span, drawEdge) }

// DrawOptions set up a Draw for one kind of item.
type DrawOptions struct {
	// Span is the draw's length D, read at every buy: 0 means no draw
	// (an admin switches it while the instance runs).
	Span func() time.Duration
	// Opening returns the item's opening (the zero time for an item
	// always on sale).
	Opening func(ctx context.Context, id int64) (time.Time, error)
	// RefNow is the reference clock the window is checked on.
	RefNow func(ctx context.Context) (time.Time, error)
	// Now is this instance's clock, for how long to hold (monotonic);
	// nil means time.Now.
	Now func() time.Time
	// Rand returns a number in [0, 1): a buyer's place in the draw; nil
	// means math/rand/v2.
	Rand func() float64
	// Sleep holds a buyer for d, or returns ctx's error if it ends
	// first; nil means a timer.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Draw holds the buyers of an item's opening and lets them in at random
// (see above). A Crowd applies it (CrowdOptions.Draw).
type Draw struct {
	opts DrawOptions
	mu   sync.Mutex
	// opens is each item's opening on this instance's clock, learned
	// under one epoch; a reset (a new epoch) learns it again.
	opens map[int64]drawMark
}

type drawMark struct {
	epoch string
	// lo and hi bracket the opening on Now's clock: the reference was read
	// between them. Zero: always on sale.
	lo, hi time.Time
}

// NewDraw returns a Draw.
func NewDraw(o DrawOptions) *Draw {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	return &Draw{opts: o, opens: map[int64]drawMark{}}
}

// on reports whether a draw is set.
func (d *Draw) on() bool { return d != nil && d.opts.Span() > 0 }

// hold delays a buyer of item id as the draw says, under the item's epoch
// ("" when the fleet keeps none: the opening is then read at every buy).
// It returns ctx's error when the buyer gives up while held, and nil at
// once when no draw is set, the item has no opening, or the buyer is
// outside the draw's two spans.
func (d *Draw) hold(ctx context.Context, id int64, epoch string) error {
	span := d.opts.Span()
	if span <= 0 {
		return nil
	}
	m, err := d.opening(ctx, id, epoch)
	if err != nil || m.hi.IsZero() {
		return nil // no draw rather than no sale: the stage decides the window
	}
	now := d.opts.Now()
	var until time.Time
	// Held from the earliest the opening may be; let in from the latest.
	switch end := m.hi.Add(span); {
	case now.Before(m.lo.Add(-min(span, drawEdge))):
		return nil // not open yet: the window's answer, which the stage gives
	case now.Before(end):
		until = end.Add(time.Duration(d.opts.Rand() * float64(span)))
	case now.Before(end.Add(span)):
		until = end.Add(span)
	default:
		return nil
	}
	return d.opts.Sleep(ctx, until.Sub(now))
}

// sleep waits d, or returns ctx's error if it ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// opening returns the item's opening on this instance's clock, bracketed:
// the item's opens_at, less the reference clock's now, added to this
// clock's readings from just before and just after that reference read.
func (d *Draw) opening(ctx context.Context, id int64, epoch string) (drawMark, error) {
	if epoch != "" {
		d.mu.Lock()
		m, ok := d.opens[id]
		d.mu.Unlock()
		if ok && m.epoch == epoch {
			return m, nil
		}
	}
	opensAt, err := d.opts.Opening(ctx, id)
	if err != nil {
		return drawMark{}, err
	}
	m := drawMark{epoch: epoch}
	if !opensAt.IsZero() {
		before := d.opts.Now()
		ref, err := d.opts.RefNow(ctx)
		if err != nil {
			return drawMark{}, err
		}
		m.lo, m.hi = before.Add(opensAt.Sub(ref)), d.opts.Now().Add(opensAt.Sub(ref))
	}
	if epoch != "" {
		d.mu.Lock()
		// Of two reads under one epoch, keep the tighter bracket.
		if old, ok := d.opens[id]; !ok || old.epoch != epoch || old.hi.Sub(old.lo) > m.hi.Sub(m.lo) {
			d.opens[id] = m
		}
		d.mu.Unlock()
	}
	return m, nil
}
