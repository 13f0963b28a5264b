package redisstage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// Stage "redis-atomic": no lock. A Lua script checks and decrements a copy
// of the stock held in Redis, and records the buyer, in one atomic step;
// only buyers that got a unit go on to the database.
//
// Redis runs one script at a time, so the check and the decrement cannot
// interleave, and the hot row in MySQL sees only as many writers as there
// are units, not as many as there are buyers. The database write is the
// guarded decrement of db-atomic, so even a Redis copy that is wrong (after
// a flush or a failover) cannot oversell; it can only turn buyers away.
//
// When is an order confirmed? When the database transaction commits and the
// buyer gets 201. Until then the unit is a reservation, listed in a pending
// hash in Redis; if persisting fails, the reservation is given back. Once
// the order is committed the reservation is forgotten, off the buyer's
// path (confirm.go). If the process dies in between, or the confirm is
// lost, the reconcile job finds the stale reservation, looks for its order
// in the database, and either confirms or returns it.
// At all times: Redis stock + pending reservations = database stock.

// copyStore is what redis-atomic needs: the guarded write, and the items to
// load its Redis copy from (see redis_atomic_copy.go). A store that also
// lists an item's buyers (Buyers) lets the copy turn repeat buyers away.
type copyStore interface {
	inventory.Deducter
	List(ctx context.Context) ([]inventory.Item, error)
	Get(ctx context.Context, id int64) (inventory.Item, error)
}

// RedisAtomic is the redis-atomic stage. It also implements Resetter and
// the repair hooks of the reconcile job.
type RedisAtomic struct {
	rdb redis.UniversalClient
	// batches sends the batches of reservation scripts: rdb, or a client
	// that checks its connections before use (SetBatchClient).
	batches redis.UniversalClient
	store   copyStore
	// sales writes the orders of the buyers Redis gave a unit: through a
	// group commit (group_commit.go) when the store can write many orders
	// in one transaction.
	sales inventory.Deducter
	kind  string
	log   *slog.Logger
	// restocked, when set, hears of units that came back to Redis (see
	// Repair, loadFirst): remembered sell-outs are dropped.
	restocked func(ctx context.Context, id int64) error
	copies    copies       // the items with a copy (copies.go)
	guard     loadGuard    // over first loads (first_load.go)
	confirms  *confirmer   // off the buyers' path (confirm.go)
	reserves  reserveQueue // gathers concurrent scripts (reserve_batch.go)
}

// OnRestock makes Repair call f after it returned units to the Redis copy
// (a Crowd's Restocked).
func (s *RedisAtomic) OnRestock(f func(ctx context.Context, id int64) error) { s.restocked = f }

// SetBatchClient makes the stage send its batches of concurrent buyers'
// reservation scripts through rdb, a client of the same Redis as its own
// (reserve_batch.go says why one would). It is to be called before the
// first buy.
func (s *RedisAtomic) SetBatchClient(rdb redis.UniversalClient) { s.batches = rdb }

// NewRedisAtomic returns the redis-atomic stage for one kind of item.
func NewRedisAtomic(rdb redis.UniversalClient, store copyStore, kind string, log *slog.Logger) *RedisAtomic {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &RedisAtomic{rdb: rdb, batches: rdb, store: store, sales: groupSales(store), kind: kind, log: log, copies: copiesOf("redis-atomic", kind),
		confirms: newConfirmer(rdb, log), reserves: reserveQueue{limit: maxFlying}}
}

// WaitConfirms waits until the confirms of the sales committed so far have
// been sent to Redis (or have failed, and are left to the reconcile job),
// or until ctx ends, and then returns ctx's error. A sale is answered
// before its confirm is sent (confirm.go).
func (s *RedisAtomic) WaitConfirms(ctx context.Context) error { return s.confirms.flush(ctx) }

// WindowNow reads the clock the script checks item id's window against:
// the TIME of the Redis server that holds the item (WindowClock).
func (s *RedisAtomic) WindowNow(ctx context.Context, id int64) (time.Time, error) {
	t, err := clock.Run(ctx, s.rdb, s.keys(id)[:1]).Int64Slice()
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %w", inventory.ErrUnavailable, err)
	}
	if len(t) != 2 {
		return time.Time{}, fmt.Errorf("%w: TIME answered %v", inventory.ErrUnavailable, t)
	}
	return time.Unix(t[0], t[1]*1000), nil
}

// SetGroupLinger sets how long the group commit of the sales, after a
// write during which more sales arrived, waits for the ones still on
// their way (DefaultGroupLinger; 0: never; group_commit.go). It is to be
// called before the first sale.
func (s *RedisAtomic) SetGroupLinger(d time.Duration) { setLinger(s.sales, d) }

// Buy reserves in Redis, then persists with the guarded decrement. The
// script checks the sale window on Redis's clock; the write that follows
// does not check it again.
func (s *RedisAtomic) Buy(ctx context.Context, o inventory.Order) error { return s.buy(ctx, o, nil) }

// buy is Buy, or the rest of a folded buy when fold holds o (claim.go).
func (s *RedisAtomic) buy(ctx context.Context, o inventory.Order, fold *inventory.Fold) error {
	keys := append(s.keys(o.ItemID), s.key(o.ItemID, "window"))
	args := []any{o.UserID, o.Quantity, o.No}
	var left int64
	var ms time.Duration
	var err error
	if fold.Holds(o) {
		left = fold.Left() // the Idempotency-Key claim reserved (claim.go)
	} else {
		left, ms, err = scriptAnswer(s.reserveRun(ctx, keys, args))
	}
	if err == nil && left == -2 {
		// Not loaded (first use, or Redis lost its data): load from the
		// database, once for the fleet (first_load.go).
		if err = s.loadFirst(ctx, o.ItemID); err != nil {
			return err
		}
		left, ms, err = scriptAnswer(s.reserveRun(ctx, keys, args))
	}
	if err != nil {
		return fmt.Errorf("%w: reserve in redis: %w", inventory.ErrUnavailable, err)
	}
	if left < 0 {
		return s.refusal(o.ItemID, left, ms)
	}
	if err := s.sales.Deduct(ctx, o); err != nil {
		// The reconcile job returns the units of a give-back that failed.
		failed := func(gerr error) {
			if gerr != nil {
				s.log.Warn("giving back a reservation failed", "item", o.ItemID, "order", o.No, "err", gerr)
			}
		}
		if gerr := inventory.Within(ctx, func() error { return s.giveBack(context.WithoutCancel(ctx), o) }, failed); !errors.Is(gerr, inventory.ErrStillUnderWay) {
			failed(gerr)
		}
		return err
	}
	if fold.ConfirmLater(o) {
		return nil // the key's settle confirms it, in the same script
	}
	// The order is committed: the buyer is answered now, and the
	// reservation forgotten after, with the other sales' (confirm.go).
	s.confirms.add(confirm{pending: keys[2], no: o.No})
	return nil
}
