package main

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// redisEpochs keeps the fleet's restock epochs (inventory.Epochs) in Redis:
// one key per item holding a random value, replaced on every restock. A
// key that is missing (first use, or a Redis that lost its data) gets a
// new value, so memory never outlives the data it was checked against.
type redisEpochs struct{ rdb redis.UniversalClient }

func epochKey(item string) string { return "seckill:epoch:{" + item + "}" }

func (e redisEpochs) Epoch(ctx context.Context, item string) (string, error) {
	v, err := e.rdb.Get(ctx, epochKey(item)).Result()
	if !errors.Is(err, redis.Nil) {
		return v, err
	}
	// First use: agree on one value with the other instances.
	if err := e.rdb.SetNX(ctx, epochKey(item), randomToken(), 0).Err(); err != nil {
		return "", err
	}
	return e.rdb.Get(ctx, epochKey(item)).Result()
}

func (e redisEpochs) Bump(ctx context.Context, item string) error {
	return e.rdb.Set(ctx, epochKey(item), randomToken(), 0).Err()
}
