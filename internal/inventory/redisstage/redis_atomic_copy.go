package redisstage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// The Redis copy of the stock that redis-atomic sells from: loading it on
// a reset and on the first buy that finds none (nothing is copied at
// start: see first_load.go), and the reconcile job's side, settling
// reservations whose request is over and correcting a copy that drifted
// from the database (after a flush, a failover, or a bug).

// Reset loads the Redis copy of a freshly reset item.
func (s *RedisAtomic) Reset(ctx context.Context, id int64, _ int) error {
	return s.loadOne(ctx, id, true)
}

// Copies lists the items that have a Redis copy (or had one, before
// Redis lost it): the reconcile job's work. It fails with ErrUnavailable.
func (s *RedisAtomic) Copies(ctx context.Context) ([]int64, error) { return s.copies.list(ctx, s.rdb) }

// loadFirst loads item id's copy for a buy that found none, once however
// many buyers found none at once (first_load.go). A copy loaded again for
// an item that had one (Redis lost it) may bring back units that a
// remembered sell-out hides: it is logged, and announced as a restock.
func (s *RedisAtomic) loadFirst(ctx context.Context, id int64) error {
	return s.guard.once(ctx, s.rdb, id, s.key(id, "loading"), exists(s.rdb, s.keys(id)[0]), func(ctx context.Context) error {
		reloaded, err := s.load(ctx, id, false)
		if err != nil || !reloaded {
			return err
		}
		s.log.Warn("the Redis copy of the stock was missing and was reloaded from the database on a buy", "kind", s.kind, "item", id)
		if err := afterRepair(ctx, id, true, nil, s.restocked); err != nil {
			s.log.Warn("announcing the reloaded copy failed", "kind", s.kind, "item", id, "err", err)
		}
		return nil
	})
}

// loadOne copies the database stock of one item into Redis (see load).
func (s *RedisAtomic) loadOne(ctx context.Context, id int64, overwrite bool) error {
	_, err := s.load(ctx, id, overwrite)
	return err
}

// load copies the database stock of one item into Redis, registering the
// item first (copies). Buyers who already have an order are listed so the
// script can turn them away early; the unique key in the database stays
// the real guard. Without overwrite it keeps a copy that exists, and
// reports whether it loaded one for an item registered before (reloaded).
func (s *RedisAtomic) load(ctx context.Context, id int64, overwrite bool) (reloaded bool, err error) {
	before, err := s.copies.add(ctx, s.rdb, id)
	if err != nil {
		return false, err
	}
	it, err := s.store.Get(ctx, id)
	if err != nil {
		return false, err
	}
	flag := "0"
	if overwrite {
		flag = "1"
	}
	args := []any{it.Stock, flag, newGen(), unixMilli(it.Window.OpensAt), unixMilli(it.Window.ClosesAt)}
	users, err := buyersOf(ctx, s.store, id)
	if err != nil {
		return false, err
	}
	for _, u := range users {
		args = append(args, u)
	}
	keys := append(s.keys(id), s.key(id, "returned"), s.key(id, "gen"), s.key(id, "failed"), s.key(id, "window"), s.key(id, givenBackLog))
	n, err := load.Run(ctx, s.rdb, keys, args...).Int()
	if err != nil {
		return false, fmt.Errorf("%w: load %s %d into redis: %w", inventory.ErrUnavailable, s.kind, id, err)
	}
	return before && n == 1 && !overwrite, nil
}

// unixMilli is a window bound for load.lua: Unix ms, or "" for none.
func unixMilli(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(t.UnixMilli(), 10)
}

// buyersOf lists the buyers who already have an order for item id, when
// the store can say (a store without Buyers leaves the unique key in the
// database to turn repeat buyers away).
func buyersOf(ctx context.Context, store copyStore, id int64) ([]string, error) {
	b, ok := store.(interface {
		Buyers(ctx context.Context, id int64) ([]string, error)
	})
	if !ok {
		return nil, nil
	}
	return b.Buyers(ctx, id)
}

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
// reservation or queued order in flight and no change in Redis while the
// database was read), corrects the Redis stock to the database stock.
// Orders queued by redis-stream are left to its writers, which settle
// each one exactly once. A busy item is
// left for the next run: comparing it mid-purchase would "repair" a
// difference that the purchase itself is about to settle.
func (s *RedisAtomic) Repair(ctx context.Context, id int64, staleAfter time.Duration, orderExists func(ctx context.Context, no string) (bool, error)) (Drift, error) {
	d, back, err := s.repair(ctx, id, staleAfter, orderExists)
	return d, afterRepair(ctx, id, back, err, s.restocked)
}

// afterRepair tells restocked, when set, that units came back to a Redis
// copy (back: a reservation given back, a copy raised to the database's
// stock or reloaded where it was missing): a sell-out that an instance
// remembers may no longer hold. A repair that only took units away (a
// copy lowered to the database's stock, as a stage switch leaves the
// copies of the stages that did not sell) or confirmed reservations tells
// nobody: it cannot make a sold-out item buyable, and telling drops every
// instance's memory of the item, of every stage, so the post-sale wave
// that memory was answering rushes the stage again. It returns err with
// restocked's.
func afterRepair(ctx context.Context, id int64, back bool, err error, restocked func(ctx context.Context, id int64) error) error {
	if back && restocked != nil {
		if rerr := restocked(ctx, id); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// settleStale settles the reservations of one pending hash older than
// staleAfter by now (on the clock that stamped them): confirm (forget)
// those whose order exists or whose record cannot be read, giveBack the
// others. It returns how many it settled, and how many of those it gave
// back.
func settleStale(ctx context.Context, pending map[string]string, now time.Time, staleAfter time.Duration, orderExists func(ctx context.Context, no string) (bool, error),
	confirm func(no string) error, giveBack func(no, user string, qty int) error) (n, given int, err error) {
	for no, v := range pending {
		qty, user, at, ok := parsePending(v)
		if ok && now.Sub(time.UnixMilli(at)) < staleAfter {
			continue
		}
		exists, err := orderExists(ctx, no)
		if err != nil {
			return n, given, err
		}
		if exists || !ok {
			err = confirm(no)
		} else {
			err = giveBack(no, user, qty)
			given++
		}
		if err != nil {
			// A give-back that failed may have landed: count it as given.
			return n, given, fmt.Errorf("%w: %w", inventory.ErrUnavailable, err)
		}
		n++
	}
	return n, given, nil
}

// repair is Repair before it tells anyone; back says that units came
// back to the copy (see afterRepair).
func (s *RedisAtomic) repair(ctx context.Context, id int64, staleAfter time.Duration, orderExists func(ctx context.Context, no string) (bool, error)) (d Drift, back bool, err error) {
	keys := s.keys(id)
	pending, err := s.rdb.HGetAll(ctx, keys[2]).Result()
	if err != nil {
		return Drift{}, false, fmt.Errorf("%w: %w", inventory.ErrUnavailable, err)
	}
	var now time.Time
	if len(pending) > 0 {
		// reserve.lua stamps reservations with Redis's clock: age them by it.
		if now, err = s.rdb.Time(ctx).Result(); err != nil {
			return Drift{}, false, fmt.Errorf("%w: %w", inventory.ErrUnavailable, err)
		}
	}
	var given int
	d.Resolved, given, err = settleStale(ctx, pending, now, staleAfter, orderExists,
		func(no string) error { return s.rdb.HDel(ctx, keys[2], no).Err() },
		func(no, user string, qty int) error {
			return giveBack.Run(ctx, s.rdb, s.giveBackKeys(id), no, user, qty).Err()
		})
	back = given > 0
	if err != nil {
		return d, back, err
	}
	// The copy's generation, read before the database is: a reset that
	// reloads the copy after this point gives it a new one, and the
	// correction below then leaves the fresh copy alone, even when the
	// reset put back the very stock seen here.
	gen, err := s.rdb.Get(ctx, s.key(id, "gen")).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return d, back, fmt.Errorf("%w: %w", inventory.ErrUnavailable, err)
	}
	before, err := s.snapshot(ctx, keys)
	if err != nil {
		return d, back, err
	}
	it, err := s.store.Get(ctx, id)
	if err != nil {
		return d, back, err
	}
	after, err := s.snapshot(ctx, keys)
	if err != nil {
		return d, back, err
	}
	d.DBStock, d.RedisStock = it.Stock, int(before[0])
	if before != after || before[1] > 0 {
		d.Busy = true
		return d, back, nil
	}
	if before[0] < 0 {
		// A copy whose first load is in flight is not lost.
		if d.Busy, err = loading(ctx, s.rdb, s.key(id, "loading")); err != nil || d.Busy {
			return d, back, err
		}
		// A copy that was missing is loaded: units the buyers could
		// not reach before.
		d.Repaired = true
		return d, true, s.loadOne(ctx, id, false)
	}
	if d.RedisStock != d.DBStock {
		n, err := setIfQuiet.Run(ctx, s.rdb, []string{keys[0], keys[2], keys[3], s.key(id, "gen"), s.key(id, "returned"), s.key(id, "cancelling")}, before[0], it.Stock, newGen(), gen).Int()
		if err != nil {
			// The raise may have landed, its reply lost: announce it.
			return d, back || it.Stock > d.RedisStock, fmt.Errorf("%w: %w", inventory.ErrUnavailable, err)
		}
		d.Repaired, d.Busy = n == 1, n == 0
		back = back || d.Repaired && it.Stock > d.RedisStock
	}
	return d, back, nil
}

func (s *RedisAtomic) snapshot(ctx context.Context, keys []string) ([2]int64, error) {
	v, err := snapshot.Run(ctx, s.rdb, []string{keys[0], keys[2], keys[3]}).Int64Slice()
	if err != nil || len(v) != 2 {
		return [2]int64{}, fmt.Errorf("%w: snapshot: %w", inventory.ErrUnavailable, err)
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

// cancelMark is how long a cancellation in flight keeps Repair off its
// item if the canceller dies before EndCancel: longer than any database
// call of the cancellation takes.
const cancelMark = 30 * time.Second

// BeginCancel marks order no of item id as being cancelled and returns the
// copy's generation, to which the order's units will be owed. Until
// EndCancel, Repair does not correct the item's copy: it might read the
// database before the cancellation commits and start a new generation
// without its units. It fails with ErrUnavailable.
func (s *RedisAtomic) BeginCancel(ctx context.Context, id int64, no string) (string, error) {
	g, err := beginCancel.Run(ctx, s.rdb, []string{s.key(id, "cancelling"), s.key(id, "gen")}, no, cancelMark.Milliseconds()).Text()
	if err != nil {
		return "", fmt.Errorf("%w: mark order %s of %s %d as being cancelled: %w", inventory.ErrUnavailable, no, s.kind, id, err)
	}
	return g, nil
}

// EndCancel removes BeginCancel's mark, once the cancellation committed
// or failed. A mark left behind expires after cancelMark.
func (s *RedisAtomic) EndCancel(ctx context.Context, id int64, no string) error {
	if err := s.rdb.HDel(ctx, s.key(id, "cancelling"), no).Err(); err != nil {
		return fmt.Errorf("%w: unmark order %s of %s %d: %w", inventory.ErrUnavailable, no, s.kind, id, err)
	}
	return nil
}

// ReturnUnits gives a cancelled order's units back to the Redis copy, if
// they are owed to its current generation and were not given back before.
// It reports whether this call gave them back, or fails with
// ErrUnavailable.
func (s *RedisAtomic) ReturnUnits(ctx context.Context, o inventory.Order, gen string) (bool, error) {
	keys := []string{s.key(o.ItemID, "stock"), s.key(o.ItemID, "returned"), s.key(o.ItemID, "gen")}
	n, err := returnUnits.Run(ctx, s.rdb, keys, o.No, o.Quantity, gen).Int()
	if err != nil {
		return false, fmt.Errorf("%w: return units of %s to redis: %w", inventory.ErrUnavailable, o.No, err)
	}
	return n == 1, nil
}

// newGen names a new generation of a copy.
func newGen() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return hex.EncodeToString(b[:])
}
