package redisstage

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// Stage "redis-stream": redis-atomic's Lua script, with the database write
// moved behind a queue. The script checks the Redis copy of the stock and
// the buyer, takes the units, records the buyer and appends the order to a
// Redis Stream, in one atomic step, and the buyer is answered at once:
// 202 Accepted, with the order pending. Writers (package orderwriter, one per
// instance, in one consumer group) read the stream and write each order
// with db-atomic's guarded decrement.
//
// What it fixes: redis-atomic still made every buyer who got a unit wait
// for a database transaction on the hot row. Here the database sees the
// orders at the pace the writers take them (peak shaving), and the buyer's
// answer costs one Redis round trip.
//
// What it costs: the answer is a promise, not an order. The order is
// written later, at least once: a writer that dies before it acknowledges
// an entry leaves it to another (XAUTOCLAIM), which writes it again, so
// every effect is made idempotent: the order number is unique in the
// database (a second write is a duplicate, treated as already done), and
// the Redis scripts settle an order only if it is still in flight. An
// order that can no longer be written (the database has no stock left for
// it) fails: its units go back to the copy and the entry to a dead-letter
// stream. The buyer asks GET /api/v1/orders/{no} to learn which.
//
// At all times: Redis stock + reservations + queued orders = database
// stock (for the units these two stages sold).

// RedisStream is the redis-stream stage. It sells from redisStock,
// redis-atomic's Redis copy of the stock, and shares its keys.
type RedisStream struct {
	redisStock *RedisAtomic
	rdb        redis.UniversalClient
	opts       StreamOptions
	cluster    bool // one set of items with work per slot (stream_work.go)
	// wake, when set, is told of every accepted order, so that this
	// instance's writer takes it at once rather than at its next recovery pass.
	wake func(id int64)
}

// NewRedisStream returns the redis-stream stage over redisStock, the Redis
// copy of the stock that redis-atomic sells from.
func NewRedisStream(redisStock *RedisAtomic, opts StreamOptions) *RedisStream {
	if opts.MaxLen <= 0 {
		opts.MaxLen = 100_000
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &RedisStream{redisStock: redisStock, rdb: redisStock.rdb, opts: opts.durable(), cluster: isCluster(redisStock.rdb)}
}

// Queues reports that a buy only accepts the order (see Queuer).
func (s *RedisStream) Queues() bool { return true }

// WindowNow reads the clock enqueue.lua checks the window against: the
// one redis-atomic's copy lives on (WindowClock).
func (s *RedisStream) WindowNow(ctx context.Context, id int64) (time.Time, error) {
	return s.redisStock.WindowNow(ctx, id)
}

// Buy takes the units in Redis and queues the order, in one script, which
// checks the sale window on Redis's clock. It fails with a *NotOpen,
// ErrSaleClosed, ErrSoldOut, ErrAlreadyPurchased, ErrNotFound,
// ErrOverloaded (the queue is full) or ErrUnavailable, or with the
// context's error alone when it was over before the script was sent; at
// DurabilityReplica, with ErrOutcomeUnknown when the order was queued but
// no replica confirmed it in time (the buyer must not hear 202: the order
// may not survive a failover).
func (s *RedisStream) Buy(ctx context.Context, o inventory.Order) error { return s.buy(ctx, o, nil) }

// buy is Buy, or the rest of a folded buy when fold holds o (claim.go).
func (s *RedisStream) buy(ctx context.Context, o inventory.Order, fold *inventory.Fold) error {
	keys, args := s.enqueueKeys(o)
	var left, replicas int64
	var ms time.Duration
	var err error
	if fold.Holds(o) {
		left = fold.Left() // the Idempotency-Key claim queued it (claim.go)
	} else {
		left, ms, replicas, err = s.enqueue(ctx, keys, args)
	}
	if err == nil && left == -2 {
		// No copy yet (or Redis lost it): load it from the database,
		// once for the fleet (first_load.go).
		if err = s.redisStock.loadFirst(ctx, o.ItemID); err != nil {
			return err
		}
		left, ms, replicas, err = s.enqueue(ctx, keys, args)
	}
	if err != nil {
		if mayHaveRun(err) {
			// The script may have queued the order, which the writers will
			// then write: "nothing was written" would be untrue.
			return fmt.Errorf("%w: queue in redis, reply lost: %w", inventory.ErrOutcomeUnknown, err)
		}
		if notSent(err) {
			// The buyer's deadline passed (or the buyer left) before the
			// script was sent: a timeout that bought nothing.
			return fmt.Errorf("queue in redis, not sent: %w", err)
		}
		return fmt.Errorf("%w: queue in redis: %w", inventory.ErrUnavailable, err)
	}
	if left == -5 {
		return fmt.Errorf("%w: the order queue of %s %d holds %d entries", inventory.ErrOverloaded, s.redisStock.kind, o.ItemID, s.opts.MaxLen)
	}
	if left < 0 {
		return s.redisStock.refusal(o.ItemID, left, ms)
	}
	if s.wake != nil {
		s.wake(o.ItemID)
	}
	if s.opts.Durability == DurabilityReplica && replicas < 1 {
		// Queued on the primary, which writers will serve while it lives;
		// but a failover now may promote a replica that never saw it.
		return fmt.Errorf("%w: order %s is queued, but no replica confirmed it within %s", inventory.ErrOutcomeUnknown, o.No, s.opts.ReplicaWait)
	}
	return nil
}
