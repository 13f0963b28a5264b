package redisstage

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// Stage "redis-sharded": redis-atomic with one item's stock split over N
// buckets, each a key with its own hash tag. redis-atomic's keys of one
// item share one tag, so on a Redis Cluster one hot product lives on one
// shard; here its buckets spread over the shards.
//
// A buyer is routed to a home bucket by a hash of the user id, where one
// script records the buyer and takes the units. When the home bucket is
// empty the buyer tries the others in a fixed order (home+1, home+2, ...)
// within the same request, so nobody hears sold out while a bucket holds a
// unit: a buyer is refused for good only when every bucket was empty with
// no reservation in flight, and units come back to a bucket only from its
// own reservations, a reset, the reconcile job, or a move of the sweeper,
// after which the buyer walks again. The buyer is recorded in
// its home bucket alone, which keeps one purchase per user across buckets;
// a recorded buyer is refused as a repeat only if the database holds its
// order (a record left by a run that ended without one, on a master that
// died, is taken over: see recordHolds). The database's unique key stays
// the backstop, and a unit reserved for a repeat buyer goes back to its
// bucket. The buyer hears 201 after the
// database commit, through redis-atomic's group commit.
//
// What it costs: a buyer whose home is empty pays a round trip per bucket
// it visits (Fallbacks counts them), a buy of several units may take them
// from several buckets, and a refusal is checked by a second walk once
// the sweeper, which gathers the last units in one bucket, has moved any.

// RedisSharded is the stage; its walk over the buckets, Reset and Repair
// are in redis_sharded_copy.go, its sweeper in redis_sharded_sweep.go.
type RedisSharded struct {
	rdb       redis.UniversalClient
	store     copyStore
	sales     inventory.Deducter
	kind      string
	buckets   int
	log       *slog.Logger
	restocked func(ctx context.Context, id int64) error
	copies    copies    // the items with buckets (copies.go)
	guard     loadGuard // over first loads (first_load.go)
	fallbacks atomic.Int64
	sw        sweepState // the sweeper's (redis_sharded_sweep.go)
}

// NewRedisSharded returns the stage for one kind, over buckets keys (≥ 1).
func NewRedisSharded(rdb redis.UniversalClient, store copyStore, kind string, buckets int, log *slog.Logger) *RedisSharded {
	s := &RedisSharded{rdb: rdb, store: store, sales: groupSales(store), kind: kind, buckets: max(1, buckets),
		log: cmp.Or(log, slog.New(slog.DiscardHandler)), copies: copiesOf("redis-sharded", kind)}
	s.restocked = s.markedThen(nil)
	return s
}

// Buy checks the sale window on the database's clock, reserves in the
// buckets, then persists with the guarded decrement. It fails with a
// *NotOpen, ErrSaleClosed, ErrSoldOut, ErrAlreadyPurchased, ErrNotFound,
// ErrUnavailable, or the store's error.
func (s *RedisSharded) Buy(ctx context.Context, o inventory.Order) error {
	win, err := inventory.CheckWindow(ctx, s.store, o.ItemID)
	if err != nil {
		return err
	}
	parts, err := s.reserve(ctx, o)
	if errors.Is(err, inventory.ErrSoldOut) {
		return inventory.SoldOutAt(win, err)
	}
	if err != nil {
		return err
	}
	s.changed(ctx, o.ItemID) // units left the buckets: a sweeper may gather the rest
	if err := s.sales.Deduct(ctx, o); err != nil {
		// A repeat buyer keeps its record; any other failure frees the buyer.
		forget := !errors.Is(err, inventory.ErrAlreadyPurchased)
		if gerr := s.giveBackWithin(ctx, o, parts, forget); gerr != nil {
			s.log.Warn("giving back a reservation failed", "item", o.ItemID, "order", o.No, "err", gerr)
		}
		return err
	}
	failed := func(err error) {
		if err != nil {
			s.log.Warn("confirming a reservation failed", "item", o.ItemID, "order", o.No, "err", err)
		}
	}
	if err := inventory.Within(ctx, func() error { return s.confirm(ctx, o, parts) }, failed); !errors.Is(err, inventory.ErrStillUnderWay) {
		failed(err)
	}
	return nil
}

// confirm drops o's reservations from the buckets that gave its units,
// its order written. It runs past the buyer's end (within).
func (s *RedisSharded) confirm(ctx context.Context, o inventory.Order, parts []int) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	var errs []error
	for _, b := range parts {
		errs = append(errs, s.rdb.HDel(ctx, s.bucketKeys(o.ItemID, b)[1], o.No).Err())
	}
	return errors.Join(errs...)
}

// reserve takes o's units, home bucket first, and returns the buckets that
// gave some. A buy that cannot get them all gives back what it took. A
// refusal stands only after a walk beside which no move of the sweeper ran
// (see redis_sharded_sweep.go); moves that keep beginning leave it "for
// now".
func (s *RedisSharded) reserve(ctx context.Context, o inventory.Order) ([]int, error) {
	parts, need, mayReturn, err := s.walk(ctx, o, true)
	for try, begun := 0, int64(-1); err == nil && need > 0; try++ {
		var now int64
		if now, err = s.settleMoves(ctx, o.ItemID); err != nil || now == begun || now == 0 {
			break // no move could have run beside the last walk
		}
		if try == 3 {
			mayReturn = true
			break
		}
		// Walk again, still claimed at home, from nothing taken.
		if err = s.giveBack(context.WithoutCancel(ctx), o, parts, false); err != nil {
			break
		}
		begun = now
		parts, need, mayReturn, err = s.walk(ctx, o, false)
	}
	if errors.Is(err, inventory.ErrAlreadyPurchased) {
		return nil, err // nothing taken, and the buyer stays recorded
	}
	if err != nil {
		return nil, errors.Join(err, s.giveBackWithin(ctx, o, parts, true))
	}
	if need == 0 {
		return parts, nil
	}
	return nil, s.refuse(ctx, o, parts, mayReturn)
}
