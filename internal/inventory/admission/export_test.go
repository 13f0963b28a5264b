package admission

import (
	"context"
	"time"
)

// AtDoor counts the buyers of item id waiting at the door of its line, or
// let out of it and not yet in the line.
func (c *Crowd) AtDoor(id int64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.atDoor[id]
}

// SetAfterDoor makes f run whenever a buyer has left the door of a line and
// is about to join it.
func (c *Crowd) SetAfterDoor(f func()) { c.afterDoor = f }

// Tracked counts the entries this crowd keeps per item: its line's
// (inside, measures, doors), every wrapped stage's memory, the draw's
// openings and, when the epochs are RedisEpochs, the epochs and bumps
// remembered.
func (c *Crowd) Tracked() int {
	c.mu.Lock()
	n := len(c.inside) + len(c.spent) + len(c.gap) + len(c.left) + len(c.doors) + len(c.atDoor) + len(c.owed)
	memos := c.memos
	c.mu.Unlock()
	for _, m := range memos {
		m.mu.Lock()
		n += len(m.soldOut) + len(m.window)
		m.mu.Unlock()
	}
	if d := c.opts.Draw; d != nil {
		d.mu.Lock()
		n += len(d.opens)
		d.mu.Unlock()
	}
	if e, ok := c.opts.Epochs.(*RedisEpochs); ok {
		n += e.Tracked()
	}
	return n
}

// Tracked counts the epochs and bumps e remembers.
func (e *RedisEpochs) Tracked() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.known) + len(e.bumped)
}

// SetClock makes e read its time from now.
func (e *RedisEpochs) SetClock(now func() time.Time) { e.now = now }

// SetBeforeDrop makes f run in DropIdle after the crowd has listed its
// memories and before it drops anything.
func (c *Crowd) SetBeforeDrop(f func()) { c.beforeDrop = f }

// SetPause makes Watch call f between subscriptions instead of waiting.
func (e *RedisEpochs) SetPause(f func(ctx context.Context, d time.Duration)) { e.pause = f }

// CommandCounter counts the commands a client sends (a redis.Hook).
type CommandCounter = commandCounter

// Sent is how many commands went through c.
func (c *commandCounter) Sent() int64 { return c.n.Load() }

// SetHeard makes f run after each sell-out message e hears, with whether
// it was passed on to the crowds.
func (e *RedisEpochs) SetHeard(f func(payload string, applied bool)) { e.heard = f }

// SetCompared makes f run after a sell-out message's epoch was compared
// with the one e trusts, before the sell-out is passed on.
func (e *RedisEpochs) SetCompared(f func()) { e.compared = f }

// SoldOutChannel is the channel the sell-outs are announced on.
const SoldOutChannel = soldOutChannel

// SoldOutMessage is the message of a sell-out of item by stage under the
// epoch stored in Redis.
func SoldOutMessage(item, stage, stored string, qty int) string {
	return soldOutMessage(item, stage, stored, qty)
}

// Trusts reports whether e trusts an epoch of item it remembers.
func (e *RedisEpochs) Trusts(item string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.trusted(item)
	return ok
}
