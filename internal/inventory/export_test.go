package inventory

// ErrMayReturnForTest lets the external tests build the sell-out that
// redis-atomic reports while reserved units may still come back.
var ErrMayReturnForTest = ErrMayReturn

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

// FoldForTest is a Fold whose claim took o's units, as the HTTP layer has
// it once the claim answered.
func FoldForTest(o Order) *Fold { return &Fold{order: o, took: true} }
