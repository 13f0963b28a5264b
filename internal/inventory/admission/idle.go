package admission

import "time"

// Idle items cost nothing. A shop's catalogue is large and its sales are
// few: what this instance keeps of an item (its remembered sell-out and
// sale window in every wrapped stage, its opening as the draw placed it,
// its epoch) is kept while buyers come, and dropped once the item has had
// none for IdleAfter, so that memory follows the items being sold, not
// every item ever touched. The line keeps nothing of an empty line
// already (line.go), and a line with buyers inside or at its door is never
// idle.
//
// Dropping only ever forgets: an item that comes back is learnt again as a
// fresh one, its first buyer going to the stage, which answers from the
// stock. Nothing dropped can make an instance refuse a buyer it would have
// let through. A sell-out answered from memory counts as activity (every
// buyer who hears it touches the mark), so during a sale's post-sale wave
// the cheap answer stays; only after IdleAfter with no buyer at all does
// the next one cost a stage round trip, once.

// DefaultIdleAfter is CrowdOptions.IdleAfter's default: many epoch leases
// (SECKILL_SOLD_OUT_LEASE, 1 s by default), so that a sale's crowd never
// sees its item dropped between two of its waves.
const DefaultIdleAfter = time.Minute

// touchGrain is how stale a mark's last buyer may be before a buyer
// writes its time again: the post-sale wave hears "sold out" by the
// thousand a second, and one write a second per mark is enough for an
// idle time of a minute (an item may so be dropped up to touchGrain
// early).
const touchGrain = time.Second

// tidier is Epochs that keeps epochs in memory, and can forget those it
// no longer trusts (RedisEpochs).
type tidier interface {
	DropStale()
}

// DropIdle forgets what this instance remembers of every item that has
// had no buyer for IdleAfter, and the epochs no longer trusted. It sends
// nothing to Redis or the database, and it is safe beside buyers of the
// same items: a buyer that finds nothing remembered goes to the stage.
// The composition root calls it now and then.
func (c *Crowd) DropIdle() {
	idle := c.opts.IdleAfter
	c.mu.Lock()
	memos := c.memos
	c.mu.Unlock()
	before := c.opts.Now().Add(-idle)
	if c.beforeDrop != nil {
		c.beforeDrop()
	}
	for _, m := range memos {
		m.dropIdle(before)
	}
	if c.opts.Draw != nil {
		c.opts.Draw.dropIdle(idle)
	}
	if t, ok := c.opts.Epochs.(tidier); ok {
		t.DropStale()
	}
}

// dropIdle forgets the marks no buyer has touched since before.
func (m *memo) dropIdle(before time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, mark := range m.soldOut {
		if !mark.seen.After(before) {
			delete(m.soldOut, id)
		}
	}
	for id, mark := range m.window {
		if !mark.seen.After(before) {
			delete(m.window, id)
		}
	}
}

// dropIdle forgets the openings no buyer has asked for in idle, on the
// draw's clock. A buyer held by the draw has its time to go in already;
// one who comes later reads the opening again.
func (d *Draw) dropIdle(idle time.Duration) {
	before := d.opts.Now().Add(-idle)
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, m := range d.opens {
		if !m.seen.After(before) {
			delete(d.opens, k)
		}
	}
}
