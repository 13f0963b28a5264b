package redisstage

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The sweeper's test hooks (redis_sharded_sweep.go).

// SetAfterMoveTakeForTest makes f run between the two halves of every move
// of the sweeper; an error from f cuts the move there, as a crash would.
func (s *RedisSharded) SetAfterMoveTakeForTest(f func(move int64) error) { s.sw.afterTake = f }

// MovesInFlightForTest reads item id's journal: the moves begun and not
// finished, and the units their first halves took.
func (s *RedisSharded) MovesInFlightForTest(ctx context.Context, id int64) (moves, units int, err error) {
	journal, err := s.rdb.HGetAll(ctx, s.moveKeys(id)[0]).Result()
	if err != nil {
		return 0, 0, err
	}
	for mid, rec := range journal {
		var from int
		if _, err := fmt.Sscanf(rec, "%d|", &from); err != nil {
			return 0, 0, err
		}
		n, err := s.rdb.HGet(ctx, s.bucketKeys(id, from)[0]+":out", mid).Int()
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, 0, err
		}
		moves, units = moves+1, units+n
	}
	return moves, units, nil
}

// MoveForTest moves up to units from bucket from to bucket to as the
// sweeper does, whatever its rule would choose.
func (s *RedisSharded) MoveForTest(ctx context.Context, id int64, from, to, units int) (int, error) {
	mid, err := moveBegin.Run(ctx, s.rdb, s.moveKeys(id), from, to, units).Int64()
	if err != nil {
		return 0, err
	}
	return s.finishMove(ctx, id, mid, from, to, units)
}

// ChangedKeysForTest names the kind's marks of changed items and their
// sequence (see redis_sharded_sweep.go).
func (s *RedisSharded) ChangedKeysForTest() []string { return s.changedKeys() }

// ChangedForTest reads the kind's marks: item id -> mark.
func (s *RedisSharded) ChangedForTest(ctx context.Context) (map[string]string, error) {
	return s.rdb.HGetAll(ctx, s.changedKeys()[0]).Result()
}
