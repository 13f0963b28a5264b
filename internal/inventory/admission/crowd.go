package admission

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// A flash sale is a crowd: thousands of buyers for a hundred units, all in
// the same second. A safe stage that makes every one of them queue for the
// item's lock or row answers most of them late, or not at all. Crowd wraps
// the safe stages with two cheap defences that change nothing about which
// buyers get a unit:
//
//   - Sold out is remembered. Once a stage reports an item sold out for good,
//     this instance answers the next buyers 409 without taking the lock,
//     running the stage's script or touching the database. Every instance
//     reads a restock epoch that changes whenever stock comes back (a
//     reset), and a remembered sell-out counts only while the epoch is the
//     one it was seen under, so a reset through any instance makes the item
//     buyable on all of them at once. Epochs that each instance keeps in
//     memory (so that the refusal costs no round trip) make a reset wait
//     until no instance can still trust the old one (see Settle). An
//     instance that learns a sell-out for good tells the others, which
//     remember it under the same epoch (pushed.go): the post-sale wave is
//     answered from memory on every instance from its first late buyer.
//   - Admission is bounded. Queue buyers per item may always wait inside
//     the stage on this instance. Past them, a buyer is let in only while
//     the item's last buyers got through the line in at most half of
//     Within, or buyers leave it fast enough to empty it in that time (and
//     never past QueueMax); before anyone has left the line,
//     a buyer waits at the door for the first to leave, at most half of
//     Within, and is then answered from memory if that buyer found the
//     item sold out. The others are turned away
//     at once with ErrOverloaded (503 and Retry-After) instead of waiting
//     out the lock wait or the request deadline while holding a
//     connection. So a stage that serves its line quickly keeps the crowd
//     waiting in line, where a buyer costs nothing, rather than bouncing it
//     into a retry loop; a slow one turns away whom it could not serve in
//     time anyway.
//
//   - The sale window is remembered too, before the sell-out (the order of
//     precedence: window, sold out, the stage). A stage that refused a buy
//     as not open yet said how long was left by its reference clock; until
//     that long has passed on this instance's monotonic clock since the buy
//     was sent, the opening cannot have come, and the next buyers are
//     answered from memory. Only ever a refusal: a buy that may be in the
//     window always goes to the stage, whose reference clock decides, so
//     an instance whose wall clock is off never sells early. A closed sale
//     stays closed until a reset (a new epoch). A sell-out of an item whose
//     sale closes is trusted only until the closing, measured the same
//     way: after it, the answer is "closed", which the stage gives.
//
// The teaching stages (unlocked, local-mutex) are not wrapped: they exist to
// show the race.

// Epochs keeps one restock epoch per item for the whole fleet. An epoch is
// an opaque value that changes every time units may come back to an item.
type Epochs interface {
	// Epoch returns the item's current epoch.
	Epoch(ctx context.Context, item string) (string, error)
	// Bump gives the item a new epoch; call it after units came back.
	Bump(ctx context.Context, item string) error
}

// settler is Epochs whose instances remember epochs for a while. Settle
// returns once no instance can still trust an epoch of item from before
// this instance's last Bump of it. A reset calls it, so that the item is
// buyable on every instance once the reset has answered; other restocks
// (units given back one by one) do not wait.
type settler interface {
	Settle(ctx context.Context, item string) error
}

// CrowdOptions tune Crowd.
type CrowdOptions struct {
	// Queue is how many buyers of one item may always be inside a wrapped
	// stage on this instance at once; 0 means no cap at all.
	Queue int
	// QueueMax caps the line past Queue: more buyers are let in while
	// Within allows, up to QueueMax in all. At or below Queue, the line
	// never grows past Queue.
	QueueMax int
	// Within bounds the wait of a buyer let in past Queue: the line grows
	// only while the item's last buyers spent at most half of Within
	// inside, or buyers leave it fast enough that the whole line would be
	// out in that time (the composition root passes SECKILL_LOCK_WAIT, the
	// wait a buyer of a lock stage gives up after). 0 keeps the line at
	// Queue.
	Within time.Duration
	// Epochs, when set, lets the instance remember sell-outs. Without it
	// every buyer reaches the stage (no fleet-wide way to hear of a reset).
	Epochs Epochs
	// Kind names the item kind in epoch keys ("product", "coupon").
	Kind string
	// Now is the clock that times buyers inside a stage (Busy's Wait);
	// nil means time.Now.
	Now func() time.Time
	// Refused, when set, hears every buyer a wrapped stage turned away,
	// with its reason: RefusedRemembered, RefusedSoldOut, RefusedBounced
	// or RefusedLimited. It must not block.
	Refused func(reason string)
	// Admit, when set, is asked about every buyer the sold-out memory did
	// not answer, before the line: an error turns the buyer away with it
	// (the fleet-wide rate limiter, see internal/ratelimit). So a
	// remembered sell-out is answered first, and a limited buyer takes no
	// place in the line.
	Admit func(ctx context.Context, o inventory.Order) error
	// Admitting, when set, says whether Admit applies right now: a limit
	// an admin turns on and off while the instance runs. Nil means Admit
	// applies whenever it is set.
	Admitting func() bool
	// AdmitInScript, when set, is Admit as a gate the claim's script can
	// run (inventory.ScriptGate), so that a keyed buyer whose claim folds
	// the stage's script pays no round trip for the limit (claim.go);
	// false when it has none now (Admit is asked instead). A gate with
	// no Src checks nothing.
	AdmitInScript func(ctx context.Context, o inventory.Order) (inventory.ScriptGate, bool)
	// Draw, when set, holds the buyers who come in the first moments of
	// an item's opening and lets them in at random (draw.go): after the
	// window, the sold-out memory and Admit, before the line.
	Draw *Draw
	// IdleAfter is how long an item may go without a buyer on this
	// instance before DropIdle forgets what the instance remembers of it
	// (idle.go); 0 means DefaultIdleAfter.
	IdleAfter time.Duration
}

// admitting reports whether buyers are asked about (CrowdOptions.Admit)
// right now.
func (o CrowdOptions) admitting() bool {
	return o.Admit != nil && (o.Admitting == nil || o.Admitting())
}

// The reasons CrowdOptions.Refused hears, from the cheapest answer to the
// dearest.
const (
	// RefusedRemembered: sold out, answered from this instance's memory,
	// before admission and without a backend round trip.
	RefusedRemembered = "sold_out_remembered"
	// RefusedBounced: turned away by the per-item cap (503 overloaded).
	RefusedBounced = "bounced"
	// RefusedSoldOut: sold out, as the stage itself found.
	RefusedSoldOut = "sold_out_stage"
	// RefusedLimited: over the buyer's rate limit (CrowdOptions.Admit).
	RefusedLimited = "rate_limited"
	// RefusedWindowRemembered: outside the sale window (not open yet, or
	// closed), answered from this instance's memory.
	RefusedWindowRemembered = "window_remembered"
	// RefusedWindow: outside the sale window, as the stage found on its
	// reference clock.
	RefusedWindow = "window_stage"
)

// Crowd is the crowd control one Service shares across its safe stages.
// Admission is counted per item across them; each wrapped stage remembers
// its own sell-outs, since stages can see stock differently (redis-atomic
// answers from its Redis copy).
type Crowd struct {
	opts CrowdOptions
	// afterDoor, set by tests only, runs when a buyer has left the door
	// and before it joins the line.
	afterDoor func()
	// beforeDrop, set by tests only, runs in DropIdle before it drops.
	beforeDrop func()
	lastKey    atomic.Pointer[epochKey] // see key

	mu     sync.Mutex
	memos  []*memo
	named  map[string]*memo        // the memories of the stages wrapped by name (pushed.go)
	clocks int                     // the stages wrapped with a window clock of their own
	inside map[int64]int           // buyers inside a wrapped stage, per item
	spent  map[int64]time.Duration // a moving average of the time one buyer spends inside, per item
	gap    map[int64]time.Duration // a moving average of the time between two buyers leaving, per item
	left   map[int64]time.Time     // when the last buyer left, per item
	doors  map[int64]chan struct{} // closed when the next buyer leaves, per item with buyers at the door
	atDoor map[int64]int           // buyers waiting at the door, per item
	owed   map[int64]string        // items whose Bump failed: the fleet was not told
}

// NewCrowd returns the crowd control of one item kind on one instance.
func NewCrowd(opts CrowdOptions) *Crowd {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.IdleAfter <= 0 {
		opts.IdleAfter = DefaultIdleAfter
	}
	c := &Crowd{opts: opts, named: map[string]*memo{}, inside: map[int64]int{}, spent: map[int64]time.Duration{}, gap: map[int64]time.Duration{}, left: map[int64]time.Time{}, doors: map[int64]chan struct{}{}, atDoor: map[int64]int{}, owed: map[int64]string{}}
	if b, ok := opts.Epochs.(soldOutBoard); ok {
		b.OnSoldOut(c.heard)
	}
	return c
}

// Wrap returns stage behind this crowd control: sold-out memory and the
// bounded queue.
func (c *Crowd) Wrap(stage inventory.Stage) inventory.Stage { return c.wrap("", stage) }

// wrap is Wrap, with a memory of its own, under the fleet's name for the
// stage ("": none, see WrapNamed).
func (c *Crowd) wrap(name string, stage inventory.Stage) crowded {
	m := &memo{soldOut: map[int64]soldOutMark{}, window: map[int64]windowMark{}}
	c.mu.Lock()
	c.memos = append(c.memos, m)
	if name != "" {
		c.named[name] = m
	}
	c.mu.Unlock()
	return c.wrapped(stage, m, name)
}

// Bound returns stage behind the bounded queue only, without sold-out
// memory.
func (c *Crowd) Bound(stage inventory.Stage) inventory.Stage { return c.wrapped(stage, nil, "") }

// wrapped is stage behind the gates, with the memory m (nil: none) and
// the fleet's name for it ("": none).
func (c *Crowd) wrapped(stage inventory.Stage, m *memo, name string) crowded {
	w := crowded{c: c, m: m, name: name, next: stage, clock: c.clockOf(stage)}
	w.gates, w.beforeClaim, w.afterClaim = gatesOf(w), beforeClaimOf(w), afterClaimOf(w)
	w.drawOnly = []gate{drawGate{w}}
	return w
}

// clockOf is the reference clock the draw reads for stage's buyers: its
// own (WindowClock), each stage's apart, or else the catalog's.
func (c *Crowd) clockOf(stage inventory.Stage) refClock {
	wc, ok := stage.(inventory.WindowClock)
	if !ok {
		return refClock{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clocks++
	return refClock{id: c.clocks, now: wc.WindowNow}
}

type crowded struct {
	c     *Crowd
	m     *memo
	name  string // the stage's name in the fleet's sell-outs, if wrapped by one (pushed.go)
	next  inventory.Stage
	clock refClock // the one the stage checks the window against
	gates []gate   // in the order a buyer passes them (gates.go)
	// beforeClaim and afterClaim are gates in two parts, for a keyed buy
	// whose claim folds the stage's script (gates.go).
	beforeClaim, afterClaim []gate
	// drawOnly is beforeClaim without the rate limit, for a claim whose
	// script runs the limit (claim.go).
	drawOnly []gate
}

// fromMemory answers a buy of item id from this instance's memory alone,
// in Buy's order: outside the sale window, then sold out for every
// quantity, both under the fleet's current epoch; nil when the buy must
// run (nothing remembered, or not this stage's memory). reason is the
// answer's reason among the refusals (see refusedFor); it is not counted
// here.
func (w crowded) FromMemory(ctx context.Context, id int64) (string, error) {
	if w.m == nil {
		return "", nil
	}
	epoch, ok := w.c.epoch(ctx, id)
	if !ok {
		return "", nil
	}
	now := w.c.opts.Now()
	if err := w.m.outsideWindow(id, epoch, now); err != nil {
		return RefusedWindowRemembered, err
	}
	if !w.m.isSoldOut(id, epoch, 1, now) {
		return "", nil
	}
	return RefusedRemembered, inventory.ErrRememberedSoldOut
}

// learner returns what a refusal check of req's buy (RefusalCheck) teaches
// this memory, under the epoch read now, before the check's script runs: a
// sell-out for good (not one "for now", ErrMayReturn) and the sale window,
// as Buy learns them from the stage. The refusal is counted as the
// stage's, as Buy counts it, even where nothing can be remembered (no
// memory, no epoch).
func (w crowded) Learner(ctx context.Context, req inventory.Request) func(error) {
	epoch, remembered := "", false
	if w.m != nil {
		epoch, remembered = w.c.epoch(ctx, req.ItemID)
	}
	began := w.c.opts.Now()
	return func(err error) {
		switch {
		case errors.Is(err, inventory.ErrSoldOut):
			w.c.refused(RefusedSoldOut)
			if remembered && !errors.Is(err, inventory.ErrMayReturn) {
				w.learnSoldOut(req.ItemID, epoch, req.Quantity, until(began, err), began)
			}
		case errors.Is(err, inventory.ErrSaleNotOpen), errors.Is(err, inventory.ErrSaleClosed):
			w.c.refused(RefusedWindow)
			if remembered {
				w.m.learnWindow(req.ItemID, epoch, began, err)
			}
		}
	}
}

// RefusedFor counts a refusal that FromMemory answered.
func (w crowded) RefusedFor(reason string) {
	if reason != "" {
		w.c.refused(reason)
	}
}

// BuyFolded passes a buy whose claim took the units (inventory's fold.go)
// straight on: nothing to refuse, no place in the line to take; it only
// writes. A buy whose gates passed before a claim that took nothing
// answers what they said, or passes the rest of the gates (gates.go).
func (w crowded) BuyFolded(ctx context.Context, o inventory.Order, f *inventory.Fold) error {
	if !f.Holds(o) {
		gated, refused := f.Gated(o)
		if !gated {
			return w.Buy(ctx, o)
		}
		if refused != nil {
			return refused
		}
		return w.buyThrough(ctx, o, w.afterClaim)
	}
	if fb, ok := w.next.(inventory.FoldedBuyer); ok {
		return fb.BuyFolded(ctx, o, f)
	}
	return w.next.Buy(ctx, o)
}

func (w crowded) Buy(ctx context.Context, o inventory.Order) error {
	return w.buyThrough(ctx, o, w.gates)
}

// buyThrough takes o's buyer through gates, then runs the stage.
func (w crowded) buyThrough(ctx context.Context, o inventory.Order, gates []gate) error {
	b := &buyer{o: o}
	if err := w.pass(ctx, b, gates); err != nil {
		return err
	}
	return w.run(ctx, b)
}

// run runs the stage for a buyer the gates let into the line, learns
// what its answer says about the item, and lets the buyer out.
func (w crowded) run(ctx context.Context, b *buyer) error {
	c, o, epoch, remembered := w.c, b.o, b.epoch, b.remembered
	began := c.opts.Now()
	var last, err error
	if l, ok := w.next.(inventory.LastUnitSeller); ok && remembered {
		last, err = l.BuyLast(ctx, o)
	} else {
		err = w.next.Buy(ctx, o)
	}
	end := c.opts.Now()
	switch {
	case err == nil && last != nil:
		// This buy took the last unit: the item is sold out from now on,
		// under the epoch read before it ran. Remembered before exit, so
		// the line's next buyers and the post-sale wave hear sold out at
		// once, not 503 from a line still full of buyers who came too
		// late (the lab's post-sale-503 rule saw that on redlock).
		w.learnSoldOut(o.ItemID, epoch, 1, until(began, last), end)
	case errors.Is(err, inventory.ErrSoldOut):
		c.refused(RefusedSoldOut)
		if remembered && !errors.Is(err, inventory.ErrMayReturn) {
			// Before exit opens the door: whoever waits there learns it.
			w.learnSoldOut(o.ItemID, epoch, o.Quantity, until(began, err), end)
		}
	case errors.Is(err, inventory.ErrSaleNotOpen), errors.Is(err, inventory.ErrSaleClosed):
		c.refused(RefusedWindow)
		if remembered {
			w.m.learnWindow(o.ItemID, epoch, began, err)
		}
	}
	c.exit(o.ItemID, end.Sub(began), end)
	return err
}

func (c *Crowd) refused(reason string) {
	if c.opts.Refused != nil {
		c.opts.Refused(reason)
	}
}

// epoch reads the item's epoch before the buy, so that a reset that lands
// during the buy makes whatever the buy learns stale. ok is false when
// there is no epoch to trust (no Epochs, or it could not be read): then
// nothing is remembered or answered from memory.
func (c *Crowd) epoch(ctx context.Context, id int64) (string, bool) {
	if c.opts.Epochs == nil {
		return "", false
	}
	e, err := c.opts.Epochs.Epoch(ctx, c.key(id))
	return e, err == nil
}

// key names item id's epoch. The last name built is kept: a flash crowd
// asks for one hot item's, and builds no string per buyer.
func (c *Crowd) key(id int64) string {
	if k := c.lastKey.Load(); k != nil && k.id == id {
		return k.name
	}
	k := &epochKey{id: id, name: c.opts.Kind + ":" + strconv.FormatInt(id, 10)}
	c.lastKey.Store(k)
	return k.name
}

// epochKey is an item and the name of its epoch.
type epochKey struct {
	id   int64
	name string
}

// Restocked tells the fleet that units came back to the item: every
// instance stops answering it from memory. Call it after the new stock is
// committed, never before: a buyer in between would see the old stock
// under the new epoch and remember a sell-out that no longer holds.
func (c *Crowd) Restocked(ctx context.Context, id int64) error {
	c.mu.Lock()
	memos := c.memos
	c.mu.Unlock()
	for _, m := range memos {
		m.forget(id) // this instance need not wait for the epoch
	}
	if c.opts.Epochs == nil {
		return nil
	}
	if err := c.opts.Epochs.Bump(ctx, c.key(id)); err != nil {
		// Other instances may remember the item sold out, and nothing
		// else will tell them: the units that came back would stay unsold.
		c.mu.Lock()
		c.owed[id] = err.Error()
		c.mu.Unlock()
		return fmt.Errorf("%w: new restock epoch for %s (retried by RetryRestocks): %w", inventory.ErrUnavailable, c.key(id), err)
	}
	c.mu.Lock()
	delete(c.owed, id)
	c.mu.Unlock()
	return nil
}

// RetryRestocks bumps again the epoch of every item whose Bump failed,
// until one succeeds. Call it now and then (the composition root does,
// every SECKILL_SOLD_OUT_LEASE): a unit given back whose announcement
// failed must not stay unsold behind another instance's memory.
func (c *Crowd) RetryRestocks(ctx context.Context) error {
	c.mu.Lock()
	ids := make([]int64, 0, len(c.owed))
	for id := range c.owed {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	var errs []error
	for _, id := range ids {
		if err := c.Restocked(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Reopened is Restocked for a reset: it also waits until no instance can
// answer the item sold out from memory (see settler).
func (c *Crowd) Reopened(ctx context.Context, id int64) error {
	if err := c.Restocked(ctx, id); err != nil {
		return err
	}
	if s, ok := c.opts.Epochs.(settler); ok {
		if err := s.Settle(ctx, c.key(id)); err != nil {
			return fmt.Errorf("%w: %w", inventory.ErrUnavailable, err)
		}
	}
	return nil
}

// Reset passes a reset on to a stage that keeps its own copy of the stock.
func (w crowded) Reset(ctx context.Context, id int64, n int) error {
	if r, ok := w.next.(inventory.Resetter); ok {
		return r.Reset(ctx, id, n)
	}
	return nil
}

// Queues passes on whether the stage only queues its orders (Queuer).
func (w crowded) Queues() bool {
	q, ok := w.next.(inventory.Queuer)
	return ok && q.Queues()
}

// QueuedOrderOf passes the lookup of a queued order on to a stage that
// queues its orders (see Service.Buy's retries).
func (w crowded) QueuedOrderOf(ctx context.Context, id int64, user string) (inventory.Order, bool, error) {
	if q, ok := w.next.(inventory.QueuedOrders); ok {
		return q.QueuedOrderOf(ctx, id, user)
	}
	return inventory.Order{}, false, nil
}
