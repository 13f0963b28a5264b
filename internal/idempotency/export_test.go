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
