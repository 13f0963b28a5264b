package main

import (
	"context"
	"fmt"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/room"
)

// rooms builds the products' waiting rooms (package room), or nil without
// Redis, where they keep their state. The signing keys come from
// SECKILL_ROOM_KEYS (or its file); without them the process signs with a
// random key of its own, which no other instance accepts.
func (p *parts) rooms(products *inventory.Service, copies *redisstage.RedisAtomic) (*room.Manager, error) {
	if p.b.redis == nil {
		return nil, nil
	}
	signer := room.RandomSigner()
	if p.cfg.RoomKeys != "" {
		keys, err := room.ParseKeys(p.cfg.RoomKeys)
		if err == nil {
			signer, err = room.NewSigner(keys)
		}
		if err != nil {
			return nil, fmt.Errorf("SECKILL_ROOM_KEYS: %w", err)
		}
	} else if len(p.cfg.Peers) > 0 {
		p.log.Warn("SECKILL_ROOM_KEYS is not set: this instance signs waiting room tickets with a key of its own, which its peers refuse")
	}
	m := room.New(room.Options{RDB: p.b.redis, Signer: signer, Namespace: "product", Log: p.log,
		Stock: roomStock(products, copies)})
	p.bg.run(func(ctx context.Context) { <-ctx.Done(); m.Close() })
	p.metrics.CountRoom(func() (joins, polls, passes, spends, expiries int64) {
		c := m.Counts()
		return c.Joins, c.Polls, c.Passes, c.Spends, c.Expiries
	})
	return m, nil
}

// roomStock is the units a room counts as left: the lower of the
// database's stock and the Redis copy's, when there is one. The Redis
// stages take a unit from the copy before any order is written (under
// redis-stream, long before), and the SQL stages from the database, whose
// copy a Redis stage's may lag: whichever sold the last unit, one of them
// says 0 at once.
func roomStock(products *inventory.Service, copies *redisstage.RedisAtomic) func(ctx context.Context, id int64) (int, error) {
	return func(ctx context.Context, id int64) (int, error) {
		it, err := products.Get(ctx, id)
		if err != nil || copies == nil {
			return it.Stock, err
		}
		n, ok, err := copies.CopyStock(ctx, id)
		if err != nil || !ok {
			return it.Stock, err
		}
		return min(n, it.Stock), nil
	}
}
