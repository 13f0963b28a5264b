package idempotency

// UsedWaiting is how many reads of Used wait behind the one in flight.
func UsedWaiting(s *Store) int {
	s.used.mu.Lock()
	defer s.used.mu.Unlock()
	return len(s.used.waiting)
}
