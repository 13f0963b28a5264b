package inventory

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// givenBackLog names the key, in the item's (or the bucket's) slot, where
// the give-back scripts log what they returned (scripts/giveback_log.lua).
const givenBackLog = "givenback"

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

// giveBackKeys are give_back.lua's keys: stock, buyers, pending, the log.
func (s *RedisAtomic) giveBackKeys(id int64) []string {
	return append(s.keys(id)[:3], s.key(id, givenBackLog))
}

// GivenBack returns the reservations of this item given back to its Redis
// copy since it was last loaded: by a buy that failed after it reserved,
// or by the reconcile job settling a stale reservation.
func (s *RedisAtomic) GivenBack(ctx context.Context, id int64) ([]GiveBack, error) {
	return readGiveBacks(ctx, s.rdb, s.key(id, givenBackLog))
}

// GivenBack returns the reservations given back to any of the item's
// buckets since they were last loaded. Units the sweeper moves between
// buckets are not in it: they are never a reservation.
func (s *RedisSharded) GivenBack(ctx context.Context, id int64) ([]GiveBack, error) {
	var out []GiveBack
	for b := range s.buckets {
		g, err := readGiveBacks(ctx, s.rdb, s.bucketKeys(id, b)[3])
		if err != nil {
			return nil, fmt.Errorf("bucket %d: %w", b, err)
		}
		out = append(out, g...)
	}
	sortGiveBacks(out)
	return out, nil
}

func readGiveBacks(ctx context.Context, rdb redis.Cmdable, key string) ([]GiveBack, error) {
	raw, err := rdb.LRange(ctx, key, 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %w", ErrUnavailable, key, err)
	}
	out := make([]GiveBack, 0, len(raw))
	for _, e := range raw {
		g, err := parseGiveBack(e)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		out = append(out, g)
	}
	return out, nil
}

// parseGiveBack reads one log entry: 'reserved ms|given back ms|units'.
func parseGiveBack(e string) (GiveBack, error) {
	f := strings.Split(e, "|")
	if len(f) != 3 {
		return GiveBack{}, fmt.Errorf("give-back entry %q: want reserved|at|units", e)
	}
	var n [3]int64
	for i, s := range f {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return GiveBack{}, fmt.Errorf("give-back entry %q: %w", e, err)
		}
		n[i] = v
	}
	return GiveBack{ReservedAt: time.UnixMilli(n[0]).UTC(), At: time.UnixMilli(n[1]).UTC(), Units: int(n[2])}, nil
}

func sortGiveBacks(g []GiveBack) {
	slices.SortFunc(g, func(a, b GiveBack) int { return a.At.Compare(b.At) })
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
