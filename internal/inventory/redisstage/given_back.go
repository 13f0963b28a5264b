package redisstage

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// givenBackLog names the key, in the item's (or the bucket's) slot, where
// the give-back scripts log what they returned (scripts/giveback_log.lua).
const givenBackLog = "givenback"

// giveBackKeys are give_back.lua's keys: stock, buyers, pending, the log.
func (s *RedisAtomic) giveBackKeys(id int64) []string {
	return append(s.keys(id)[:3], s.key(id, givenBackLog))
}

// GivenBack returns the reservations of this item given back to its Redis
// copy since it was last loaded: by a buy that failed after it reserved,
// or by the reconcile job settling a stale reservation.
func (s *RedisAtomic) GivenBack(ctx context.Context, id int64) ([]inventory.GiveBack, error) {
	return readGiveBacks(ctx, s.rdb, s.key(id, givenBackLog))
}

// GivenBack returns the reservations given back to any of the item's
// buckets since they were last loaded. Units the sweeper moves between
// buckets are not in it: they are never a reservation.
func (s *RedisSharded) GivenBack(ctx context.Context, id int64) ([]inventory.GiveBack, error) {
	var out []inventory.GiveBack
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

func readGiveBacks(ctx context.Context, rdb redis.Cmdable, key string) ([]inventory.GiveBack, error) {
	raw, err := rdb.LRange(ctx, key, 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: read %s: %w", inventory.ErrUnavailable, key, err)
	}
	out := make([]inventory.GiveBack, 0, len(raw))
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
func parseGiveBack(e string) (inventory.GiveBack, error) {
	f := strings.Split(e, "|")
	if len(f) != 3 {
		return inventory.GiveBack{}, fmt.Errorf("give-back entry %q: want reserved|at|units", e)
	}
	var n [3]int64
	for i, s := range f {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return inventory.GiveBack{}, fmt.Errorf("give-back entry %q: %w", e, err)
		}
		n[i] = v
	}
	return inventory.GiveBack{ReservedAt: time.UnixMilli(n[0]).UTC(), At: time.UnixMilli(n[1]).UTC(), Units: int(n[2])}, nil
}

func sortGiveBacks(g []inventory.GiveBack) {
	slices.SortFunc(g, func(a, b inventory.GiveBack) int { return a.At.Compare(b.At) })
}

// giveBack returns the units of o's reservation to the Redis copy.
func (s *RedisAtomic) giveBack(ctx context.Context, o inventory.Order) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return giveBack.Run(ctx, s.rdb, s.giveBackKeys(o.ItemID), o.No, o.UserID, o.Quantity).Err()
}
