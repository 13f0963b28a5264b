package redisstage

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// Group commit for redis-atomic's sales.
//
// Redis hands out the units, but every sale still commits on the item's one
// row in the database, and that row takes one writer at a time: about a
// thousand commits a second on a small MySQL. When a crowd arrives, the
// first hundred requests are the hundred sales, and they would queue on the
// row one after another while the buyers behind them wait for a free slot.
//
// groupCommit lets the sales that arrive while a write of their item is
// running wait for it to end and then go in together: one transaction, one
// multi-row INSERT and one decrement by their total (DeductAll), so the row
// is locked once for the group. A sale that finds the item (with across,
// its lane) idle is written at once and alone, so nothing waits for a
// timer. Which buyers get a unit is decided in Redis before this point;
// the group changes only how their orders reach the database.
//
// When many sales run at once, few sales of one item meet, and most would
// still be lone transactions. A store that can write orders of several
// items in one transaction (DeductAcross: one guarded decrement per item,
// in ascending id order, so that no two groups deadlock) gets a few lanes,
// each shared by the items whose id falls to it: a sale joins its lane's
// group whatever its item, and waits only when its lane is writing. An
// item keeps one lane, so one instance never writes an item in two groups
// at once. The embedded engine writes on one connection and gets one lane.
// In the lab's many scenario (200 items, Zipf buyers) on serve, MariaDB's
// CPU per answer fell from 110-167 µs to 83-88 (docs/scaling.md).
//
// Every sale gets its own answer:
//   - the group commits: every member is written;
//   - the group fails for a reason that may pass (the database is down,
//     full or slow): every member fails with it, and each gives its unit
//     back, as a lone sale would;
//   - the group is refused (one member's buyer already has a row, or the
//     stock does not cover them all, which only a wrong Redis copy can
//     cause): each member is then written alone and gets its own fate.
//
// Sales that arrived while their lane wrote are a sign of a crowd: more
// are on their way (reserved in Redis a moment after them). With a linger
// set (SetGroupLinger; off by default), the group that follows a write
// waits for them, at most linger, and less when a full group's worth
// already waits; the first group of an idle lane, a lone sale on a quiet
// item included, is written at once. Fewer, larger transactions cost
// MariaDB less per sale; but measured on serve, a 1 ms linger did not
// make a sale cheaper as a whole, and it made the buy row's sell-out
// later (docs/performance.md, "Lingering for the next sales").
//
// A sale waiting for its turn leaves when its request's context ends, and is
// then never written. Once a group is taken it is written under a context
// that no member can cancel and that ends at the earliest member's deadline,
// so each member learns whether its order committed, and learns it by its
// own deadline.
type groupCommit struct {
	store  batchDeducter
	across crossDeducter // nil: a lane per item
	max    int           // most sales in one group
	// linger is how long the group after a write waits for more sales
	// (0: not at all); lingering, a test hook, runs as it starts to.
	linger    time.Duration
	lingering func()

	mu    sync.Mutex
	lanes map[int64]*lane // by item id
	open  map[int64]*lane // with across: by lane number (group_commit_lanes.go)
}

// batchDeducter writes one order, or many orders of one item at once.
type batchDeducter interface {
	inventory.Deducter
	// DeductAll writes all of orders (one item's) in one transaction, or
	// none of them.
	DeductAll(ctx context.Context, orders []inventory.Order) error
}

// lane holds one item's sales (or, with across, its items') that wait for
// the write in progress.
type lane struct {
	writing bool
	waiting []*sale
	number  int64   // with across: its place in open
	ids     []int64 // the items it holds in lanes
	// full, set while the lane lingers, is closed when a group's worth
	// of sales waits.
	full chan struct{}
}

// sale is one order on its way to the database.
type sale struct {
	ctx   context.Context
	o     inventory.Order
	taken bool       // in a group being written; it can no longer leave
	done  chan error // its answer, sent once
}

// left is the answer of a sale whose request ended before it was taken
// into a group: it was not written.
func (s *sale) left() error {
	return fmt.Errorf("waiting to write order %s: %w", s.o.No, s.ctx.Err())
}

// groupMax bounds a group: one INSERT of at most this many rows.
const groupMax = 64

// writeCap bounds a group whose members have no deadline.
const writeCap = 30 * time.Second

// DefaultGroupLinger is how long the group after a write waits for more
// sales, by default (RedisAtomic.SetGroupLinger): not at all.
const DefaultGroupLinger = 0

func newGroupCommit(store batchDeducter) *groupCommit {
	g := &groupCommit{store: store, max: groupMax, linger: DefaultGroupLinger, lanes: map[int64]*lane{}}
	if c, ok := store.(crossDeducter); ok && c.GroupWriters() > 0 {
		g.across, g.open = c, map[int64]*lane{}
	}
	return g
}

// groupSales writes the sales of a Redis stage: through a group commit when
// the store can write many orders in one transaction, else one by one.
func groupSales(store inventory.Deducter) inventory.Deducter {
	if bd, ok := store.(batchDeducter); ok {
		return newGroupCommit(bd)
	}
	return store
}

// setLinger sets how long the group after a write waits for more sales,
// on sales that go through a group commit (0: not at all). It is to be
// called before the first sale.
func setLinger(sales inventory.Deducter, d time.Duration) {
	if g, ok := sales.(*groupCommit); ok {
		g.linger = max(0, d)
	}
}

// Deduct writes o, in a group with the other sales of its item that arrive
// while a write of the item is running.
func (g *groupCommit) Deduct(ctx context.Context, o inventory.Order) error {
	s := &sale{ctx: ctx, o: o, done: make(chan error, 1)}
	g.mu.Lock()
	l := g.laneOf(o.ItemID)
	l.waiting = append(l.waiting, s)
	if !l.writing {
		l.writing = true
		go g.drain(l)
	} else if l.full != nil && len(l.waiting) >= g.max {
		close(l.full)
		l.full = nil
	}
	g.mu.Unlock()

	select {
	case err := <-s.done:
		return err
	case <-ctx.Done():
	}
	g.mu.Lock()
	if !s.taken {
		l.waiting = without(l.waiting, s)
		g.mu.Unlock()
		return s.left()
	}
	g.mu.Unlock()
	// Its group is being written: the answer comes by the group's
	// deadline, which is no later than this sale's.
	return <-s.done
}

// drain writes the lane's waiting sales, a group at a time, until none are
// left; each group after the first lingers for more.
func (g *groupCommit) drain(l *lane) {
	for wrote := false; ; wrote = true {
		if wrote {
			g.lingerFor(l)
		}
		g.mu.Lock()
		var group []*sale
		rest := l.waiting[:0]
		for _, s := range l.waiting {
			switch {
			case s.ctx.Err() != nil:
				// Its request is over: it is not written, and an
				// expired member would cut the group's deadline.
				s.done <- s.left()
			case len(group) < g.max:
				s.taken = true
				group = append(group, s)
			default:
				rest = append(rest, s)
			}
		}
		l.waiting = rest
		if len(group) == 0 {
			l.writing = false
			g.close(l)
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		g.write(group)
	}
}

// lingerFor waits, after a write, for more sales to join the sales that
// arrived while it ran: until linger passed or a group's worth waits. It
// does not wait when none arrived (the lane is done) or a group is full.
func (g *groupCommit) lingerFor(l *lane) {
	if g.linger <= 0 {
		return
	}
	g.mu.Lock()
	if n := len(l.waiting); n == 0 || n >= g.max {
		g.mu.Unlock()
		return
	}
	full := make(chan struct{})
	l.full = full
	g.mu.Unlock()
	if g.lingering != nil {
		g.lingering()
	}
	t := time.NewTimer(g.linger)
	select {
	case <-t.C:
	case <-full:
	}
	t.Stop()
	g.mu.Lock()
	if l.full == full {
		l.full = nil
	}
	g.mu.Unlock()
}

// write commits one group and answers each of its sales.
func (g *groupCommit) write(group []*sale) {
	ctx, cancel := groupContext(group)
	defer cancel()
	if len(group) == 1 {
		group[0].done <- g.store.Deduct(ctx, group[0].o)
		return
	}
	orders := make([]inventory.Order, len(group))
	for i, s := range group {
		orders[i] = s.o
	}
	err := g.deductAll(ctx, orders)
	if err == nil || inventory.Transient(err) {
		for _, s := range group {
			s.done <- err
		}
		return
	}
	for _, s := range group {
		s.done <- g.store.Deduct(ctx, s.o)
	}
}

// groupContext is the context a group is written under: the values of its
// first sale's context, no member's cancellation, and the earliest member
// deadline (writeCap when none has one).
func groupContext(group []*sale) (context.Context, context.CancelFunc) {
	deadline := time.Now().Add(writeCap)
	for _, s := range group {
		if d, ok := s.ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(group[0].ctx), deadline)
}

// without returns list without s, in place.
func without(list []*sale, s *sale) []*sale {
	for i, x := range list {
		if x == s {
			return append(list[:i], list[i+1:]...)
		}
	}
	return list
}
