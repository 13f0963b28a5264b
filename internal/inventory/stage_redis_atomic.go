package inventory

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
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
// hash in Redis; if persisting fails, the reservation is given back. If the
// process dies in between, the reconcile job finds the stale reservation,
// looks for its order in the database, and either confirms or returns it.
// At all times: Redis stock + pending reservations = database stock.

// RedisAtomic is the redis-atomic stage. It also implements Resetter and
// the repair hooks of the reconcile job.
type RedisAtomic struct {
	rdb   redis.UniversalClient
	store Store
	kind  string
	log   *slog.Logger
}

// NewRedisAtomic returns the redis-atomic stage for one kind of item.
func NewRedisAtomic(rdb redis.UniversalClient, store Store, kind string, log *slog.Logger) *RedisAtomic {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &RedisAtomic{rdb: rdb, store: store, kind: kind, log: log}
}

// keys of one item share a hash tag, so the scripts work on Redis Cluster.
func (s *RedisAtomic) keys(id int64) []string {
	tag := fmt.Sprintf("seckill:{%s:%d}:", s.kind, id)
	return []string{tag + "stock", tag + "buyers", tag + "pending"}
}

// reserve: KEYS stock, buyers, pending; ARGV user, quantity, order no, now ms.
// Returns the stock left, -1 sold out, -2 not loaded, -3 already bought.
var reserve = redis.NewScript(`
local stock = redis.call('GET', KEYS[1])
if not stock then return -2 end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then return -3 end
local q = tonumber(ARGV[2])
stock = tonumber(stock)
if stock < q then return -1 end
redis.call('DECRBY', KEYS[1], q)
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[3], ARGV[2] .. '|' .. ARGV[4] .. '|' .. ARGV[1])
return stock - q
`)

// giveBack: KEYS stock, buyers, pending; ARGV order no, user, quantity.
// Returns the unit only if the reservation is still pending, so a give-back
// racing with the reconcile job cannot return it twice.
var giveBack = redis.NewScript(`
if redis.call('HDEL', KEYS[3], ARGV[1]) == 1 then
  redis.call('INCRBY', KEYS[1], ARGV[3])
  redis.call('SREM', KEYS[2], ARGV[2])
  return 1
end
return 0
`)

// load: KEYS stock, buyers, pending; ARGV stock, overwrite flag, users...
var load = redis.NewScript(`
if ARGV[2] == '0' and redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('DEL', KEYS[2], KEYS[3])
redis.call('SET', KEYS[1], ARGV[1])
for i = 3, #ARGV do redis.call('SADD', KEYS[2], ARGV[i]) end
return 1
`)

// Buy reserves in Redis, then persists with the guarded decrement.
func (s *RedisAtomic) Buy(ctx context.Context, o Order) error {
	keys := s.keys(o.ItemID)
	args := []any{o.UserID, o.Quantity, o.No, time.Now().UnixMilli()}
	left, err := reserve.Run(ctx, s.rdb, keys, args...).Int64()
	if err == nil && left == -2 {
		// Not loaded (first use, or Redis lost its data): load from the
		// database, without overwriting a copy another instance loaded.
		if err = s.loadOne(ctx, o.ItemID, false); err != nil {
			return err
		}
		left, err = reserve.Run(ctx, s.rdb, keys, args...).Int64()
	}
	if err != nil {
		return fmt.Errorf("%w: reserve in redis: %w", ErrUnavailable, err)
	}
	switch left {
	case -1:
		return ErrSoldOut
	case -2:
		return fmt.Errorf("%s %d: %w", s.kind, o.ItemID, ErrNotFound)
	case -3:
		return ErrAlreadyPurchased
	}
	if err := s.store.Deduct(ctx, o); err != nil {
		if gerr := s.giveBack(context.WithoutCancel(ctx), o); gerr != nil {
			// The reconcile job returns it later.
			s.log.Warn("giving back a reservation failed", "item", o.ItemID, "order", o.No, "err", gerr)
		}
		return err
	}
	if err := s.rdb.HDel(context.WithoutCancel(ctx), keys[2], o.No).Err(); err != nil {
		// The order is committed; the stale reservation is confirmed by
		// the reconcile job, which finds the order in the database.
		s.log.Warn("confirming a reservation failed", "item", o.ItemID, "order", o.No, "err", err)
	}
	return nil
}

func (s *RedisAtomic) giveBack(ctx context.Context, o Order) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return giveBack.Run(ctx, s.rdb, s.keys(o.ItemID), o.No, o.UserID, o.Quantity).Err()
}

// Reset loads the Redis copy of a freshly reset item.
func (s *RedisAtomic) Reset(ctx context.Context, id int64, _ int) error {
	return s.loadOne(ctx, id, true)
}

// LoadAll copies every item's stock into Redis where no copy exists yet;
// the composition root calls it at start.
func (s *RedisAtomic) LoadAll(ctx context.Context) error {
	items, err := s.store.List(ctx)
	if err != nil {
		return err
	}
	for _, it := range items {
		if err := s.loadOne(ctx, it.ID, false); err != nil {
			return err
		}
	}
	return nil
}

// loadOne copies the database stock of one item into Redis. Buyers who
// already have an order are listed so the script can turn them away early;
// the unique key in the database stays the real guard.
func (s *RedisAtomic) loadOne(ctx context.Context, id int64, overwrite bool) error {
	it, err := s.store.Get(ctx, id)
	if err != nil {
		return err
	}
	flag := "0"
	if overwrite {
		flag = "1"
	}
	args := []any{it.Stock, flag}
	if b, ok := s.store.(interface {
		Buyers(ctx context.Context, id int64) ([]string, error)
	}); ok {
		users, err := b.Buyers(ctx, id)
		if err != nil {
			return err
		}
		for _, u := range users {
			args = append(args, u)
		}
	}
	if err := load.Run(ctx, s.rdb, s.keys(id), args...).Err(); err != nil {
		return fmt.Errorf("%w: load %s %d into redis: %w", ErrUnavailable, s.kind, id, err)
	}
	return nil
}

// snapshot: KEYS stock, pending. Returns {stock or -1, pending count}.
var snapshot = redis.NewScript(`
local stock = redis.call('GET', KEYS[1])
if not stock then stock = -1 end
return {tonumber(stock), redis.call('HLEN', KEYS[2])}
`)

// setIfQuiet: KEYS stock, pending; ARGV expected stock, new stock. Sets the
// stock only if nothing moved since the snapshot and nothing is in flight.
var setIfQuiet = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('HLEN', KEYS[2]) == 0 then
  redis.call('SET', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// Drift describes how the Redis copy of one item compared with the database.
type Drift struct {
	RedisStock int  // -1 when Redis had no copy
	DBStock    int  //
	Resolved   int  // stale reservations confirmed or given back
	Busy       bool // buys were in flight, so the copy was not compared
	Repaired   bool // the Redis copy was corrected to the database stock
}

// Repair settles reservations older than staleAfter (confirming those whose
// order exists, giving back the others), then, if the item is quiet (no
// reservation in flight and no change in Redis while the database was
// read), corrects the Redis stock to the database stock. A busy item is
// left for the next run: comparing it mid-purchase would "repair" a
// difference that the purchase itself is about to settle.
func (s *RedisAtomic) Repair(ctx context.Context, id int64, staleAfter time.Duration, orderExists func(ctx context.Context, no string) (bool, error)) (Drift, error) {
	keys := s.keys(id)
	pending, err := s.rdb.HGetAll(ctx, keys[2]).Result()
	if err != nil {
		return Drift{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var d Drift
	for no, v := range pending {
		qty, user, at, ok := parsePending(v)
		if ok && time.Since(time.UnixMilli(at)) < staleAfter {
			continue
		}
		exists, err := orderExists(ctx, no)
		if err != nil {
			return d, err
		}
		if exists || !ok {
			err = s.rdb.HDel(ctx, keys[2], no).Err()
		} else {
			err = giveBack.Run(ctx, s.rdb, keys, no, user, qty).Err()
		}
		if err != nil {
			return d, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		d.Resolved++
	}
	before, err := s.snapshot(ctx, keys)
	if err != nil {
		return d, err
	}
	it, err := s.store.Get(ctx, id)
	if err != nil {
		return d, err
	}
	after, err := s.snapshot(ctx, keys)
	if err != nil {
		return d, err
	}
	d.DBStock, d.RedisStock = it.Stock, int(before[0])
	if before != after || before[1] > 0 {
		d.Busy = true
		return d, nil
	}
	if before[0] < 0 {
		d.Repaired = true
		return d, s.loadOne(ctx, id, false)
	}
	if d.RedisStock != d.DBStock {
		n, err := setIfQuiet.Run(ctx, s.rdb, []string{keys[0], keys[2]}, before[0], it.Stock).Int()
		if err != nil {
			return d, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		d.Repaired, d.Busy = n == 1, n == 0
	}
	return d, nil
}

func (s *RedisAtomic) snapshot(ctx context.Context, keys []string) ([2]int64, error) {
	v, err := snapshot.Run(ctx, s.rdb, []string{keys[0], keys[2]}).Int64Slice()
	if err != nil || len(v) != 2 {
		return [2]int64{}, fmt.Errorf("%w: snapshot: %w", ErrUnavailable, err)
	}
	return [2]int64{v[0], v[1]}, nil
}

// parsePending reads "quantity|unix ms|user" (the user last: it may hold '|').
func parsePending(v string) (qty int, user string, atMillis int64, ok bool) {
	parts := strings.SplitN(v, "|", 3)
	if len(parts) != 3 {
		return 0, "", 0, false
	}
	q, err1 := strconv.Atoi(parts[0])
	at, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, "", 0, false
	}
	return q, parts[2], at, true
}
