package inventory

// ErrMayReturnForTest lets the external tests build the sell-out that
// redis-atomic reports while reserved units may still come back.
var ErrMayReturnForTest = errMayReturn

// WaitingToWrite counts the sales of item id that wait behind a database
// write of the item in progress (0 without a group commit).
func (s *RedisAtomic) WaitingToWrite(id int64) int {
	g, ok := s.sales.(*groupCommit)
	if !ok {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if l := g.lanes[id]; l != nil {
		return len(l.waiting)
	}
	return 0
}

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

// BucketKeysForTest are bucket b's stock, reservations and buyers keys.
func (s *RedisSharded) BucketKeysForTest(id int64, b int) []string { return s.bucketKeys(id, b) }

// FoldForTest is a Fold whose claim took o's units, as the HTTP layer has
// it once the claim answered.
func FoldForTest(o Order) *Fold { return &Fold{order: o, took: true} }

// ShardedScriptsForTest are the SHA1s of redis-sharded's bucket script
// (bucket_take.lua) and of the script that forgets a buyer
// (bucket_unclaim.lua), by which a test picks their requests on the wire.
func ShardedScriptsForTest() (bucketTake, forget string) { return take.Hash(), unclaim.Hash() }
