package redisstage

import (
	"context"
	"fmt"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// Forget drops the item's copy of the stock and its window: the next buy
// finds no copy, loads it from the database, and finds no item.
func (s *RedisAtomic) Forget(ctx context.Context, id int64) error {
	if err := s.rdb.Del(ctx, s.key(id, "stock"), s.key(id, "window")).Err(); err != nil {
		return fmt.Errorf("%w: forget the copy of %s %d: %w", inventory.ErrUnavailable, s.kind, id, err)
	}
	return nil
}

// Forget drops the copy redis-stream sells from (redis-atomic's).
func (s *RedisStream) Forget(ctx context.Context, id int64) error {
	return s.redisStock.Forget(ctx, id)
}

// Forget drops every bucket's stock and the split, one key at a time (the
// buckets live on different Cluster slots).
func (s *RedisSharded) Forget(ctx context.Context, id int64) error {
	keys := []string{s.splitKey(id)}
	for b := 0; b < s.buckets; b++ {
		keys = append(keys, s.bucketKeys(id, b)[0])
	}
	for _, k := range keys {
		if err := s.rdb.Del(ctx, k).Err(); err != nil {
			return fmt.Errorf("%w: forget the copy of %s %d: %w", inventory.ErrUnavailable, s.kind, id, err)
		}
	}
	return nil
}
