package inventory

import (
	"context"
	"slices"
	"time"
)

// GiveBack is one reservation whose units left the stock and came back:
// reserved at ReservedAt, given back at At. A buyer told "sold out"
// between the two may have been refused only because these units were in
// flight; the lab nets such refusals out of its refused-with-stock count.
// At is on Redis's clock. ReservedAt is on the clock that stamped the
// reservation: Redis's for redis-atomic, the instance's for redis-sharded
// (bucket_take.lua), so the two agree on one machine. redis-stream holds
// no reservation: its units leave with the order it queues.
type GiveBack struct {
	ReservedAt time.Time
	At         time.Time
	Units      int
}

// GiveBackLog is a stage that keeps a log of the units it gave back.
type GiveBackLog interface {
	// GivenBack returns the item's log since its last load, newest
	// entries only (each log keeps 1,000).
	GivenBack(ctx context.Context, id int64) ([]GiveBack, error)
}

// WithGiveBackLog makes GivenBack read l's log too. It returns s.
func (s *Service) WithGiveBackLog(l GiveBackLog) *Service {
	s.giveBacks = append(s.giveBacks, l)
	return s
}

// GivenBack returns every reservation of the item given back since its
// last reset, by every stage that keeps a log, oldest first; nil when no
// stage keeps one (the SQL and lock stages hold no reservation outside a
// transaction).
func (s *Service) GivenBack(ctx context.Context, id int64) ([]GiveBack, error) {
	var out []GiveBack
	for _, l := range s.giveBacks {
		g, err := l.GivenBack(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, g...)
	}
	sortGiveBacks(out)
	return out, nil
}

func sortGiveBacks(g []GiveBack) {
	slices.SortFunc(g, func(a, b GiveBack) int { return a.At.Compare(b.At) })
}
