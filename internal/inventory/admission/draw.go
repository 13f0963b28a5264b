package admission

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
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
//
// The draw places the opening by the clock the buyer's stage checks the
// window against: Redis's for the stages that check it in their script
// (WindowClock), the catalog's (the database's) for the others. Placed by
// the database's while the stage goes by Redis's, a Redis clock ahead of
// the database's by more than drawEdge would open the sale, for that
// stage, before the draw holds anyone: the first buyers would go through
// unheld, in arrival order.

// drawEdge is how early before its idea of the opening a Draw holds a
// buyer too (never more than the span): a margin for the stage's own read
// of its clock, which comes later than the draw's and may be answered by
// another server of the same kind (a replica promoted, another database
// connection's clock). The read itself is no reason for it: the draw brackets
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
	// RefNow is the catalog's reference clock, which the window is
	// checked on by every stage that has no clock of its own
	// (WindowClock).
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
	// opens is each item's opening on this instance's clock, by one
	// reference clock, learned under one epoch; a reset (a new epoch)
	// learns it again.
	opens map[drawKey]drawMark
	// reads are the reads of an opening under way: the buyers who arrive
	// while one runs wait for it rather than read again.
	reads singleflight.Group
}

// drawKey names an item's opening by one reference clock: clock 0 is the
// catalog's (DrawOptions.RefNow), others a stage's own (see Crowd.Wrap).
type drawKey struct {
	clock int
	id    int64
}

// refClock is the reference clock of one wrapped stage, for the draw.
type refClock struct {
	id  int // 0: the catalog's, DrawOptions.RefNow
	now func(ctx context.Context, id int64) (time.Time, error)
}

type drawMark struct {
	epoch string
	// lo and hi bracket the opening on Now's clock: the reference was read
	// between them. Zero: always on sale.
	lo, hi time.Time
	// seen is when a buyer last asked for it, on Now's clock (idle.go).
	seen time.Time
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
	return &Draw{opts: o, opens: map[drawKey]drawMark{}}
}

// on reports whether a draw is set.
func (d *Draw) on() bool { return d != nil && d.opts.Span() > 0 }

// hold delays a buyer of item id as the draw says, by the stage's reference
// clock (the zero refClock: the catalog's), under the item's epoch ("" when
// the fleet keeps none: the opening is then read at every buy). It returns
// ctx's error when the buyer gives up while held, and nil at once when no
// draw is set, the item has no opening, or the buyer is outside the draw's
// two spans.
func (d *Draw) hold(ctx context.Context, id int64, epoch string, clock refClock, before func(context.Context) error) error {
	span := d.opts.Span()
	if span <= 0 {
		return nil
	}
	m, err := d.opening(ctx, drawKey{clock: clock.id, id: id}, epoch, clock.now)
	if cerr := ctx.Err(); err != nil && cerr != nil {
		return cerr // the buyer left while the opening was read
	}
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
	if before != nil {
		if err := before(ctx); err != nil {
			return err
		}
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
// the item's opens_at, less the reference clock's now (refNow, or nil for
// the catalog's), added to this clock's readings from just before and just
// after that reference read.
//
// At an opening's first moment (and after a reset) a crowd arrives at
// once, and every one of its buyers misses what this instance knows: one
// read serves them all. Those who come while it runs wait for it, and one
// who comes just after it finds its mark.
func (d *Draw) opening(ctx context.Context, k drawKey, epoch string, refNow func(context.Context, int64) (time.Time, error)) (drawMark, error) {
	if m, ok := d.known(k, epoch); ok {
		return m, nil
	}
	if refNow == nil {
		refNow = func(ctx context.Context, _ int64) (time.Time, error) { return d.opts.RefNow(ctx) }
	}
	flight := strconv.Itoa(k.clock) + "/" + strconv.FormatInt(k.id, 10) + "/" + epoch
	ch := d.reads.DoChan(flight, func() (any, error) {
		if m, ok := d.known(k, epoch); ok {
			return m, nil // read by a flight that ended after this buyer looked
		}
		ctx, cancel := crowdRead(ctx)
		defer cancel()
		opensAt, err := d.opts.Opening(ctx, k.id)
		if err != nil {
			return drawMark{}, err
		}
		m := drawMark{epoch: epoch, seen: d.opts.Now()}
		if !opensAt.IsZero() {
			before := d.opts.Now()
			ref, err := refNow(ctx, k.id)
			if err != nil {
				return drawMark{}, err
			}
			m.lo, m.hi = before.Add(opensAt.Sub(ref)), d.opts.Now().Add(opensAt.Sub(ref))
		}
		if epoch != "" {
			d.mu.Lock()
			// Of two reads under one epoch, keep the tighter bracket.
			if old, ok := d.opens[k]; !ok || old.epoch != epoch || old.hi.Sub(old.lo) > m.hi.Sub(m.lo) {
				d.opens[k] = m
			}
			d.mu.Unlock()
		}
		return m, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return drawMark{}, r.Err
		}
		return r.Val.(drawMark), nil
	case <-ctx.Done():
		return drawMark{}, ctx.Err()
	}
}

// crowdRead is the context of a read made for a crowd by its first buyer:
// it runs on when that buyer leaves, within that buyer's deadline.
func crowdRead(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok {
		return context.WithDeadline(context.WithoutCancel(ctx), dl)
	}
	return context.WithoutCancel(ctx), func() {}
}

// known returns the opening learned under epoch, if any. A buyer asking
// counts as activity.
func (d *Draw) known(k drawKey, epoch string) (drawMark, bool) {
	if epoch == "" {
		return drawMark{}, false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	m, ok := d.opens[k]
	if now := d.opts.Now(); ok && now.Sub(m.seen) >= touchGrain {
		m.seen = now
		d.opens[k] = m
	}
	return m, ok && m.epoch == epoch
}
