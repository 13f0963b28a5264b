package admission

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// The memory: what one wrapped stage remembers of its items' sell-outs
// and sale windows, under the fleet's restock epochs (see Crowd).

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
	seen   time.Time // the last buyer it was learnt from or answered (idle.go)
}

// windowMark says: under epoch, the sale is closed, or it does not open
// before opensBy (on the Crowd's clock; a lower bound of the opening, see
// learnWindow).
type windowMark struct {
	epoch   string
	closed  bool
	opensBy time.Time
	seen    time.Time // the last buyer it was learnt from or answered (idle.go)
}

// until is how long a sell-out found by a buy sent at began may be
// trusted: the zero time (for good) unless the sale closes. The stage
// measured the time left until the closing on its reference clock at some
// moment after began, so the closing comes no earlier than began plus
// that time, on any clock that measures durations right (the Crowd's is
// monotonic, whatever its wall reading).
func until(began time.Time, err error) time.Time {
	if left, ok := inventory.ClosesIn(err); ok {
		return began.Add(left - inventory.RefGrain)
	}
	return time.Time{}
}

// learnWindow remembers a stage's window refusal of a buy sent at began.
// The stage read its reference clock after began, so the opening it
// reported comes no earlier than began plus the wait it reported: until
// then this instance may say "not open yet" itself, and never after.
func (m *memo) learnWindow(id int64, epoch string, began time.Time, err error) {
	mark := windowMark{epoch: epoch, closed: errors.Is(err, inventory.ErrSaleClosed), seen: began}
	var no *inventory.NotOpen
	if !mark.closed {
		if !errors.As(err, &no) || no.Wait <= 0 {
			return
		}
		mark.opensBy = began.Add(no.Wait - inventory.RefGrain)
	}
	m.mu.Lock()
	m.window[id] = mark
	m.mu.Unlock()
}

// outsideWindow answers a buy at now from memory when the sale is known
// to be closed, or known not to be open yet (with the least wait left);
// nil when the stage must decide. A buyer asking counts as activity.
func (m *memo) outsideWindow(id int64, epoch string, now time.Time) error {
	m.mu.Lock()
	mark, ok := m.window[id]
	if ok && now.Sub(mark.seen) >= touchGrain {
		mark.seen = now
		m.window[id] = mark
	}
	m.mu.Unlock()
	switch {
	case !ok || mark.epoch != epoch:
		return nil
	case mark.closed:
		return fmt.Errorf("item %d: %w (remembered on this instance)", id, inventory.ErrSaleClosed)
	case now.Before(mark.opensBy):
		return &inventory.NotOpen{ItemID: id, Wait: mark.opensBy.Sub(now)}
	}
	return nil
}

// isSoldOut reports whether a buyer of qty units at now is answered sold
// out from memory; asking counts as activity, so a sell-out answered from
// memory during a sale is never idle.
func (m *memo) isSoldOut(id int64, epoch string, qty int, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	mark, ok := m.soldOut[id]
	if ok && now.Sub(mark.seen) >= touchGrain {
		mark.seen = now
		m.soldOut[id] = mark
	}
	return ok && mark.epoch == epoch && qty >= mark.minQty && (mark.until.IsZero() || now.Before(mark.until))
}

// remember keeps a sell-out of item id for buyers of qty units or more,
// learnt at now under epoch. news says whether it was not known before:
// under another epoch, or for fewer buyers.
func (m *memo) remember(id int64, epoch string, qty int, until, now time.Time) (news bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	news = true
	if mark, ok := m.soldOut[id]; ok && mark.epoch == epoch {
		news = qty < mark.minQty
		qty = min(qty, mark.minQty)
	}
	m.soldOut[id] = soldOutMark{epoch: epoch, minQty: qty, until: until, seen: now}
	return news
}

func (m *memo) forget(id int64) {
	m.mu.Lock()
	delete(m.soldOut, id)
	delete(m.window, id)
	m.mu.Unlock()
}
