package redisstage

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

// BucketKeysForTest are bucket b's stock, reservations and buyers keys.
func (s *RedisSharded) BucketKeysForTest(id int64, b int) []string { return s.bucketKeys(id, b) }

// ShardedScriptsForTest are the SHA1s of redis-sharded's bucket script
// (bucket_take.lua) and of the script that forgets a buyer
// (bucket_unclaim.lua), by which a test picks their requests on the wire.
func ShardedScriptsForTest() (bucketTake, forget string) { return take.Hash(), unclaim.Hash() }
