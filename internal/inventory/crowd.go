package inventory

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
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
//     until no instance can still trust the old one (see Settle).
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
	Admit func(ctx context.Context, o Order) error
	// Admitting, when set, says whether Admit applies right now: a limit
	// an admin turns on and off while the instance runs. Nil means Admit
	// applies whenever it is set.
	Admitting func() bool
	// Draw, when set, holds the buyers who come in the first moments of
	// an item's opening and lets them in at random (draw.go): after the
	// window, the sold-out memory and Admit, before the line.
	Draw *Draw
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
	lastKey   atomic.Pointer[epochKey] // see key

	mu     sync.Mutex
	memos  []*memo
	clocks int                     // the stages wrapped with a window clock of their own
	inside map[int64]int           // buyers inside a wrapped stage, per item
	spent  map[int64]time.Duration // a moving average of the time one buyer spends inside, per item
	gap    map[int64]time.Duration // a moving average of the time between two buyers leaving, per item
	left   map[int64]time.Time     // when the last buyer left, per item
	doors  map[int64]chan struct{} // closed when the next buyer leaves, per item with buyers at the door
	atDoor map[int64]int           // buyers waiting at the door, per item
	owed   map[int64]string        // items whose Bump failed: the fleet was not told
}

// Busy is the error of a buyer turned away by the per-item cap. It wraps
// ErrOverloaded, and says how long a buyer let in now would be expected to
// spend inside the stage (queueing included): the wait the Retry-After of
// the answer reports.
type Busy struct {
	ItemID int64
	Queue  int
	// Wait is the moving average of the time the item's last buyers spent
	// inside the stage on this instance; 0 before any has left it.
	Wait time.Duration
}

func (b *Busy) Error() string {
	return fmt.Sprintf("%v: %d buyers of item %d already queued on this instance (each spends about %v inside)", ErrOverloaded, b.Queue, b.ItemID, b.Wait.Round(time.Millisecond))
}

func (b *Busy) Unwrap() error { return ErrOverloaded }

// RetryAfter is the wait a turned-away buyer is told.
func (b *Busy) RetryAfter() time.Duration { return b.Wait }

// memo is one stage's remembered sell-outs and sale windows.
type memo struct {
	mu      sync.Mutex
	soldOut map[int64]soldOutMark
	window  map[int64]windowMark
}

// soldOutMark says: under epoch, a buyer of minQty units or more cannot be
// served, at least until until (on the Crowd's clock) when it is set: the
// sale closes then, and the answer becomes "closed".
type soldOutMark struct {
	epoch  string
	minQty int
	until  time.Time
}

// windowMark says: under epoch, the sale is closed, or it does not open
// before opensBy (on the Crowd's clock; a lower bound of the opening, see
// learnWindow).
type windowMark struct {
	epoch   string
	closed  bool
	opensBy time.Time
}

// NewCrowd returns the crowd control of one item kind on one instance.
func NewCrowd(opts CrowdOptions) *Crowd {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Crowd{opts: opts, inside: map[int64]int{}, spent: map[int64]time.Duration{}, gap: map[int64]time.Duration{}, left: map[int64]time.Time{}, doors: map[int64]chan struct{}{}, atDoor: map[int64]int{}, owed: map[int64]string{}}
}

// errRememberedSoldOut is the answer from memory: one value, since the
// post-sale crowd hears it by the thousand a second.
var errRememberedSoldOut = fmt.Errorf("%w (remembered on this instance)", ErrSoldOut)

// ErrMayReturn marks a sell-out that may not last: units are reserved by
// buys still in flight and may be given back (see redis-atomic). It is never
// remembered.
var ErrMayReturn = errors.New("reserved units may still be given back")

// Wrap returns stage behind this crowd control: sold-out memory and the
// bounded queue.
func (c *Crowd) Wrap(stage Stage) Stage {
	m := &memo{soldOut: map[int64]soldOutMark{}, window: map[int64]windowMark{}}
	c.mu.Lock()
	c.memos = append(c.memos, m)
	c.mu.Unlock()
	return crowded{c: c, m: m, next: stage, clock: c.clockOf(stage)}
}

// Bound returns stage behind the bounded queue only, without sold-out
// memory.
func (c *Crowd) Bound(stage Stage) Stage { return crowded{c: c, next: stage, clock: c.clockOf(stage)} }

// clockOf is the reference clock the draw reads for stage's buyers: its
// own (WindowClock), each stage's apart, or else the catalog's.
func (c *Crowd) clockOf(stage Stage) refClock {
	wc, ok := stage.(WindowClock)
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
	next  Stage
	clock refClock // the one the stage checks the window against
}

// fromMemory answers a buy of item id from this instance's memory alone,
// in Buy's order: outside the sale window, then sold out for every
// quantity, both under the fleet's current epoch; nil when the buy must
// run (nothing remembered, or not this stage's memory). reason is the
// answer's reason among the refusals (see refusedFor); it is not counted
// here.
func (w crowded) fromMemory(ctx context.Context, id int64) (string, error) {
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
	return RefusedRemembered, errRememberedSoldOut
}

// learner returns what a refusal check of req's buy (RefusalCheck) teaches
// this memory, under the epoch read now, before the check's script runs: a
// sell-out for good (not one "for now", ErrMayReturn) and the sale window,
// as Buy learns them from the stage. The refusal is counted as the
// stage's, as Buy counts it, even where nothing can be remembered (no
// memory, no epoch).
func (w crowded) learner(ctx context.Context, req Request) func(error) {
	epoch, remembered := "", false
	if w.m != nil {
		epoch, remembered = w.c.epoch(ctx, req.ItemID)
	}
	began := w.c.opts.Now()
	return func(err error) {
		switch {
		case errors.Is(err, ErrSoldOut):
			w.c.refused(RefusedSoldOut)
			if remembered && !errors.Is(err, ErrMayReturn) {
				w.m.remember(req.ItemID, epoch, req.Quantity, until(began, err))
			}
		case errors.Is(err, ErrSaleNotOpen), errors.Is(err, ErrSaleClosed):
			w.c.refused(RefusedWindow)
			if remembered {
				w.m.learnWindow(req.ItemID, epoch, began, err)
			}
		}
	}
}

// refusedFor counts a refusal that fromMemory answered.
func (w crowded) refusedFor(reason string) {
	if reason != "" {
		w.c.refused(reason)
	}
}

// BuyFolded passes a buy whose claim took the units (fold.go) straight
// on: nothing to refuse, no place in the line to take; it only writes.
func (w crowded) BuyFolded(ctx context.Context, o Order, f *Fold) error {
	return buy(ctx, w.next, o, f)
}

func (w crowded) Buy(ctx context.Context, o Order) error {
	c := w.c
	epoch, remembered := "", false
	if w.m != nil {
		epoch, remembered = c.epoch(ctx, o.ItemID)
	}
	if remembered {
		if err := w.m.outsideWindow(o.ItemID, epoch, c.opts.Now()); err != nil {
			c.refused(RefusedWindowRemembered)
			return err
		}
	}
	soldOut := func() bool { return remembered && w.m.isSoldOut(o.ItemID, epoch, o.Quantity, c.opts.Now()) }
	if soldOut() {
		c.refused(RefusedRemembered)
		return errRememberedSoldOut
	}
	if c.opts.admitting() {
		if err := c.opts.Admit(ctx, o); err != nil {
			c.refused(RefusedLimited)
			return err
		}
	}
	if c.opts.Draw.on() {
		if err := c.opts.Draw.hold(ctx, o.ItemID, epoch, w.clock); err != nil {
			return err
		}
		if w.m != nil {
			// A reset may have come while this buyer was held: judge
			// (and remember) by the epoch of now, not of its arrival.
			epoch, remembered = c.epoch(ctx, o.ItemID)
		}
		if soldOut() {
			// Sold out while this buyer was held.
			c.refused(RefusedRemembered)
			return errRememberedSoldOut
		}
	}
	fromDoor := c.door(ctx, o.ItemID)
	if fromDoor {
		if c.afterDoor != nil {
			c.afterDoor()
		}
		if soldOut() {
			// The first buyer out of the line found it sold out while
			// this one waited at the door.
			c.leaveDoor(o.ItemID)
			c.refused(RefusedRemembered)
			return errRememberedSoldOut
		}
	}
	if n, wait, ok := c.enter(o.ItemID, fromDoor); !ok {
		c.refused(RefusedBounced)
		return &Busy{ItemID: o.ItemID, Queue: n, Wait: wait}
	}
	began := c.opts.Now()
	var last, err error
	if l, ok := w.next.(LastUnitSeller); ok && remembered {
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
		w.m.remember(o.ItemID, epoch, 1, until(began, last))
	case errors.Is(err, ErrSoldOut):
		c.refused(RefusedSoldOut)
		if remembered && !errors.Is(err, ErrMayReturn) {
			// Before exit opens the door: whoever waits there learns it.
			w.m.remember(o.ItemID, epoch, o.Quantity, until(began, err))
		}
	case errors.Is(err, ErrSaleNotOpen), errors.Is(err, ErrSaleClosed):
		c.refused(RefusedWindow)
		if remembered {
			w.m.learnWindow(o.ItemID, epoch, began, err)
		}
	}
	c.exit(o.ItemID, end.Sub(began), end)
	return err
}

// until is how long a sell-out found by a buy sent at began may be
// trusted: the zero time (for good) unless the sale closes. The stage
// measured the time left until the closing on its reference clock at some
// moment after began, so the closing comes no earlier than began plus
// that time, on any clock that measures durations right (the Crowd's is
// monotonic, whatever its wall reading).
func until(began time.Time, err error) time.Time {
	var left closesIn
	if errors.As(err, &left) {
		return began.Add(time.Duration(left) - refGrain)
	}
	return time.Time{}
}

// refGrain bounds the error of the stages' reference clocks: the scripts
// read Redis's TIME in whole milliseconds, and SQLite's 'now' has no finer
// grain, with its time left worked out from floating-point day numbers
// (julianday, about 50 µs off at most). A clock that reads a moment early
// reports the time left until the closing (or the opening) that much too
// long, so what is learnt from it is trusted that much less: never past
// the real moment.
const refGrain = 2 * time.Millisecond

// learnWindow remembers a stage's window refusal of a buy sent at began.
// The stage read its reference clock after began, so the opening it
// reported comes no earlier than began plus the wait it reported: until
// then this instance may say "not open yet" itself, and never after.
func (m *memo) learnWindow(id int64, epoch string, began time.Time, err error) {
	mark := windowMark{epoch: epoch, closed: errors.Is(err, ErrSaleClosed)}
	var no *NotOpen
	if !mark.closed {
		if !errors.As(err, &no) || no.Wait <= 0 {
			return
		}
		mark.opensBy = began.Add(no.Wait - refGrain)
	}
	m.mu.Lock()
	m.window[id] = mark
	m.mu.Unlock()
}

// outsideWindow answers a buy at now from memory when the sale is known
// to be closed, or known not to be open yet (with the least wait left);
// nil when the stage must decide.
func (m *memo) outsideWindow(id int64, epoch string, now time.Time) error {
	m.mu.Lock()
	mark, ok := m.window[id]
	m.mu.Unlock()
	switch {
	case !ok || mark.epoch != epoch:
		return nil
	case mark.closed:
		return fmt.Errorf("item %d: %w (remembered on this instance)", id, ErrSaleClosed)
	case now.Before(mark.opensBy):
		return &NotOpen{ItemID: id, Wait: mark.opensBy.Sub(now)}
	}
	return nil
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

func (m *memo) isSoldOut(id int64, epoch string, qty int, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	mark, ok := m.soldOut[id]
	return ok && mark.epoch == epoch && qty >= mark.minQty && (mark.until.IsZero() || now.Before(mark.until))
}

func (m *memo) remember(id int64, epoch string, qty int, until time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if mark, ok := m.soldOut[id]; ok && mark.epoch == epoch {
		qty = min(qty, mark.minQty)
	}
	m.soldOut[id] = soldOutMark{epoch: epoch, minQty: qty, until: until}
}

func (m *memo) forget(id int64) {
	m.mu.Lock()
	delete(m.soldOut, id)
	delete(m.window, id)
	m.mu.Unlock()
}

// door makes a buyer who finds the line of item id full before anyone
// has left it wait at its door for the first to leave, at most half of
// Within, and reports whether it did: a fresh line is about to show its
// pace, and a buyer sent away now would only come straight back. A buyer
// that waited counts at the door until it joins the line (enter) or goes
// away (leaveDoor): the pace its wait showed must last until then, even
// if the line empties meanwhile.
func (c *Crowd) door(ctx context.Context, id int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.inside[id]
	if _, known := c.spent[id]; known || c.opts.Queue <= 0 || n < c.opts.Queue || c.opts.Within <= 0 || n+c.atDoor[id] >= c.opts.QueueMax {
		return false
	}
	door, ok := c.doors[id]
	if !ok {
		door = make(chan struct{})
		c.doors[id] = door
	}
	c.atDoor[id]++
	c.mu.Unlock()
	t := time.NewTimer(c.opts.Within / 2)
	select {
	case <-door:
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	c.mu.Lock()
	return true
}

// offDoor stops counting a buyer of item id at its door; c.mu is held.
func (c *Crowd) offDoor(id int64) {
	if c.atDoor[id]--; c.atDoor[id] <= 0 {
		delete(c.atDoor, id)
	}
}

// leaveDoor is the answer of a buyer from the door that does not join
// the line: the line forgets its pace if nobody else needs it.
func (c *Crowd) leaveDoor(id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offDoor(id)
	if c.inside[id] == 0 && c.atDoor[id] == 0 {
		c.forget(id)
	}
}

// enter admits a buyer of item id, or says how many are inside and how
// long one spends there when the line is full; fromDoor says that the
// buyer comes from the door (see door).
func (c *Crowd) enter(id int64, fromDoor bool) (int, time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if fromDoor {
		c.offDoor(id)
	}
	n := c.inside[id]
	if c.opts.Queue > 0 && n >= c.opts.Queue && !c.servedInTime(id, n) {
		return n, c.spent[id], false
	}
	c.inside[id]++
	return n, 0, true
}

// servedInTime says whether the line of item id may grow past n, up to
// opts.QueueMax: while its last buyers got through it (queueing included)
// in at most half of opts.Within, or while buyers leave it so fast that
// n+1 of them would be out in that time. Counting the line alone would not
// do: in a flash sale most of it only hears "sold out", which takes no
// turn at the lock, so a long line can be served in moments. The first
// measure lags (it counts the whole wait of whoever leaves); the second
// sees at once a line that started to move, as one does when the last
// unit is sold and the rest of the line hears "sold out". The half leaves
// room for the line to lengthen before either catches up. Before anyone
// has left, nothing is known: the line stays at Queue.
func (c *Crowd) servedInTime(id int64, n int) bool {
	if n+1 > c.opts.QueueMax || c.opts.Within <= 0 {
		return false
	}
	if spent, ok := c.spent[id]; ok && spent <= c.opts.Within/2 {
		return true
	}
	gap, ok := c.gap[id]
	return ok && time.Duration(n+1)*gap <= c.opts.Within/2
}

// exit lets a buyer out after d inside, at end. It folds d into the item's
// moving average of the time inside, and the time since the buyer before
// left into that of the gap between leavers (an eighth per buyer: a
// sale's last few dozen buyers); both last while anyone is inside or at
// the door. It opens the door to whoever waits there.
func (c *Crowd) exit(id int64, d time.Duration, end time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spent[id] = movingAverage(c.spent, id, d)
	if prev, ok := c.left[id]; ok {
		c.gap[id] = movingAverage(c.gap, id, max(end.Sub(prev), 0))
	}
	c.left[id] = end
	if door, ok := c.doors[id]; ok {
		close(door)
		delete(c.doors, id)
	}
	if c.inside[id]--; c.inside[id] <= 0 {
		// Nobody waits: the averages are only read while the line is
		// full, and ids of items that do not exist must not pile up.
		// Buyers at the door, or let out of it and not yet in the
		// line, still need them: they are forgotten once the last of
		// those has joined and the line empties again (or the last
		// goes away, see leaveDoor).
		delete(c.inside, id)
		if c.atDoor[id] == 0 {
			c.forget(id)
		}
	}
}

// forget drops what the line of item id has measured; c.mu is held.
func (c *Crowd) forget(id int64) {
	delete(c.spent, id)
	delete(c.gap, id)
	delete(c.left, id)
}

// movingAverage moves m[id] an eighth of the way to d, or starts it at d.
func movingAverage(m map[int64]time.Duration, id int64, d time.Duration) time.Duration {
	if avg, ok := m[id]; ok {
		return avg + (d-avg)/8
	}
	return d
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
		return fmt.Errorf("%w: new restock epoch for %s (retried by RetryRestocks): %w", ErrUnavailable, c.key(id), err)
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

// reopened is Restocked for a reset: it also waits until no instance can
// answer the item sold out from memory (see settler).
func (c *Crowd) reopened(ctx context.Context, id int64) error {
	if err := c.Restocked(ctx, id); err != nil {
		return err
	}
	if s, ok := c.opts.Epochs.(settler); ok {
		if err := s.Settle(ctx, c.key(id)); err != nil {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	return nil
}

// Reset passes a reset on to a stage that keeps its own copy of the stock.
func (w crowded) Reset(ctx context.Context, id int64, n int) error {
	if r, ok := w.next.(Resetter); ok {
		return r.Reset(ctx, id, n)
	}
	return nil
}

// Queues passes on whether the stage only queues its orders (Queuer).
func (w crowded) Queues() bool {
	q, ok := w.next.(Queuer)
	return ok && q.Queues()
}

// QueuedOrderOf passes the lookup of a queued order on to a stage that
// queues its orders (see Service.Buy's retries).
func (w crowded) QueuedOrderOf(ctx context.Context, id int64, user string) (Order, bool, error) {
	if q, ok := w.next.(queuedOrders); ok {
		return q.QueuedOrderOf(ctx, id, user)
	}
	return Order{}, false, nil
}
