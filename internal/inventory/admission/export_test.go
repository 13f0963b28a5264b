package admission

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
