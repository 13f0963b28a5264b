package redisstage

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// copies is the registry of the items that have a Redis copy of one
// stage's stock, for one kind: a set, which names the reconcile job's work
// (an item never bought has no copy, and nothing to repair). An item is
// added before its copy is loaded, so that no copy exists unregistered: a
// copy found missing then is a copy lost (Redis lost its data), unless
// its first load is still in flight. The set lives in Redis, so a Redis
// that loses the copies loses it too; the reconcile job remembers the
// items it saw (reconcile.Job), and each stage tells a copy it reloads
// for a registered item (reload) from a first load.
type copies string

// copiesOf names the registry of stage's copies of kind.
func copiesOf(stage, kind string) copies { return copies("seckill:copies:" + stage + ":" + kind) }

// add registers item id; it reports whether id was registered before
// (its copy is being loaded again).
func (c copies) add(ctx context.Context, rdb redis.UniversalClient, id int64) (before bool, err error) {
	n, err := rdb.SAdd(ctx, string(c), id).Result()
	if err != nil {
		return false, fmt.Errorf("%w: register the copy of %d: %w", inventory.ErrUnavailable, id, err)
	}
	return n == 0, nil
}

// Register registers item id's copy, found unregistered: its first load
// registered it in a Redis that restarted before the copy was written
// (the reconcile job adopts such a copy when its item is in play).
func (s *RedisAtomic) Register(ctx context.Context, id int64) error {
	_, err := s.copies.add(ctx, s.rdb, id)
	return err
}

// Register registers item id's buckets, found unregistered (see
// RedisAtomic.Register).
func (s *RedisSharded) Register(ctx context.Context, id int64) error {
	_, err := s.copies.add(ctx, s.rdb, id)
	return err
}

// list returns the registered items.
func (c copies) list(ctx context.Context, rdb redis.UniversalClient) ([]int64, error) {
	ms, err := rdb.SMembers(ctx, string(c)).Result()
	if err != nil {
		return nil, fmt.Errorf("%w: list %s: %w", inventory.ErrUnavailable, c, err)
	}
	ids := make([]int64, 0, len(ms))
	for _, m := range ms {
		id, err := strconv.ParseInt(m, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s holds %q: %w", c, m, err)
		}
		ids = append(ids, id)
	}
	return ids, nil
}
