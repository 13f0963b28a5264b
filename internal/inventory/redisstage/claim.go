package redisstage

import (
	"context"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// The Idempotency-Key claim's scripts (see inventory.RefusalCheck and
// inventory.Fold): the checks a claim runs, and the claims that take the
// units.

// Fold: the claim takes the units as reserve.lua would (inventory.Folder).
func (s *RedisAtomic) Fold(o inventory.Order) (inventory.RefusalCheck, bool) {
	keys := append(s.keys(o.ItemID), s.key(o.ItemID, "window"))
	return inventory.RefusalCheck{Client: s.rdb, Src: foldReserveSrc, Keys: keys, Args: []any{o.UserID, o.Quantity, o.No},
		Fold: inventory.NewFold(inventory.FoldSpec{Order: o, Pending: keys[2], ConfirmSrc: confirmSrc})}, true
}

// Fold: the claim takes the units and queues the order, as enqueue.lua
// would; not at DurabilityReplica.
func (s *RedisStream) Fold(o inventory.Order) (inventory.RefusalCheck, bool) {
	if s.opts.Durability == DurabilityReplica {
		return inventory.RefusalCheck{}, false
	}
	keys, args := s.enqueueKeys(o)
	return inventory.RefusalCheck{Client: s.rdb, Src: foldEnqueueSrc, Keys: keys, Args: args,
		Fold: inventory.NewFold(inventory.FoldSpec{Order: o, MayHaveQueued: mayHaveRun})}, true
}

// RefusalCheck checks the Redis copy the way reserve.lua does before it
// takes units (inventory.RefusalChecker).
func (s *RedisAtomic) RefusalCheck(o inventory.Order) (inventory.RefusalCheck, bool) {
	keys := append(s.keys(o.ItemID), s.key(o.ItemID, "window"))
	return inventory.RefusalCheck{Client: s.rdb, Src: refuseSrc, Keys: keys, Args: []any{o.UserID, o.Quantity}}, true
}

// RefusalCheck: redis-stream sells from redis-atomic's copy, with the same
// checks (enqueue.lua).
func (s *RedisStream) RefusalCheck(o inventory.Order) (inventory.RefusalCheck, bool) {
	return s.redisStock.RefusalCheck(o)
}

// BuyFolded finishes a buy whose claim reserved its units
// (inventory.FoldedBuyer): it writes the order, and leaves the confirm of
// the reservation to the settle of the buy's key.
func (s *RedisAtomic) BuyFolded(ctx context.Context, o inventory.Order, f *inventory.Fold) error {
	return s.buy(ctx, o, f)
}

// BuyFolded finishes a buy whose claim queued its order
// (inventory.FoldedBuyer): nothing is left to do but wake the writer.
func (s *RedisStream) BuyFolded(ctx context.Context, o inventory.Order, f *inventory.Fold) error {
	return s.buy(ctx, o, f)
}
