package idempotency

import "time"

// UsedWaiting is how many reads of Used wait behind the one in flight.
func UsedWaiting(s *Store) int {
	s.used.mu.Lock()
	defer s.used.mu.Unlock()
	return len(s.used.waiting)
}

// SetUsedStall makes every read of Used that waits behind another give up
// waiting, and go alone, once stall is closed, in place of its own
// patience (half the time left to its deadline).
func SetUsedStall(s *Store, stall <-chan time.Time) {
	s.used.mu.Lock()
	defer s.used.mu.Unlock()
	s.used.stall = stall
}

// RecordKey is the Redis key of (user, route, key)'s record.
func RecordKey(s *Store, user, route, key string) string { return s.recordKey(user, route, key) }
