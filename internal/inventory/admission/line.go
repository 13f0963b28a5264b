package admission

import (
	"context"
	"fmt"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// The line: how many buyers of an item may be inside a wrapped stage on
// this instance, the door a buyer waits at while the line's pace is not
// known yet, and the answer of a buyer turned away (see Crowd).

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
	return fmt.Sprintf("%v: %d buyers of item %d already queued on this instance (each spends about %v inside)", inventory.ErrOverloaded, b.Queue, b.ItemID, b.Wait.Round(time.Millisecond))
}

func (b *Busy) Unwrap() error { return inventory.ErrOverloaded }

// RetryAfter is the wait a turned-away buyer is told.
func (b *Busy) RetryAfter() time.Duration { return b.Wait }

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
