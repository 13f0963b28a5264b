package redisstage

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// CopyStock reads the units left in item id's Redis copy, which a buy
// takes from before any order is written: ok is false when the item has
// no copy. The waiting room reads it to say "sold out" as soon as the
// last unit is reserved.
func (s *RedisAtomic) CopyStock(ctx context.Context, id int64) (n int, ok bool, err error) {
	n, err = s.rdb.Get(ctx, s.key(id, "stock")).Int()
	switch {
	case errors.Is(err, redis.Nil):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("reading the Redis copy of item %d: %w", id, err)
	}
	return n, true, nil
}
