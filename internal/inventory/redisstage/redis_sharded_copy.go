package redisstage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// The buckets redis-sharded sells from: their keys, how a buyer is routed
// and walks them, loading them at a reset, giving reservations back, and
// the reconcile job's side (settling reservations whose request is over, correcting
// buckets whose sum drifted from the database stock). Nothing is loaded at
// start: the first buy that finds its bucket missing loads them
// (loadFirst).
//
// Units of a cancelled order of this stage go back to the database only;
// the reconcile job then finds the buckets short and adds them back.

// OnRestock makes Repair call f after units came back to the buckets (and
// after marking the item for the sweepers, redis_sharded_sweep.go).
func (s *RedisSharded) OnRestock(f func(ctx context.Context, id int64) error) {
	s.restocked = s.markedThen(f)
}

// SetGroupLinger sets how long the group commit of the sales waits for
// more, as RedisAtomic.SetGroupLinger does.
func (s *RedisSharded) SetGroupLinger(d time.Duration) { setLinger(s.sales, d) }

// Fallbacks counts the buys that visited a bucket other than their home.
func (s *RedisSharded) Fallbacks() int64 { return s.fallbacks.Load() }

// bucketKeys are one bucket's stock, reservations in flight, buyers and
// log of units given back: seckill:{<kind>:<id>:b<i>}:..., one Cluster
// slot per bucket.
func (s *RedisSharded) bucketKeys(id int64, b int) []string {
	p := "seckill:{" + s.kind + ":" + strconv.FormatInt(id, 10) + ":b" + strconv.Itoa(b) + "}:"
	return []string{p + "stock", p + "pending", p + "buyers", p + "givenback"}
}

// Home is the bucket a user is routed to first: FNV-1a of the user id,
// modulo the number of buckets.
func (s *RedisSharded) Home(user string) int {
	h := fnv.New32a()
	h.Write([]byte(user))
	return int(h.Sum32() % uint32(s.buckets))
}

// walk visits the buckets once, home first, taking up to o's units, and
// returns the buckets that gave some and the units still wanted. With
// claim it records the buyer in its home bucket; a buyer recorded there
// already is refused with ErrAlreadyPurchased (nothing taken) only when it
// holds an order (see recordHolds), and otherwise walks on under that
// record, taking over a reservation of its own that an earlier run left
// in its home bucket (bucket_take_over.lua).
func (s *RedisSharded) walk(ctx context.Context, o inventory.Order, claim bool) (parts []int, need int, mayReturn bool, err error) {
	first, need, loaded, recorded := s.Home(o.UserID), o.Quantity, false, false
	for i := 0; i < s.buckets && need > 0; i++ {
		b := (first + i) % s.buckets
		keys := s.bucketKeys(o.ItemID, b)[:3]
		if i > 0 || !claim || recorded {
			keys = keys[:2] // the buyer is recorded in its home bucket only, once
		}
		script := take
		if recorded && i == 0 {
			script = takeOver
		}
		res, err := script.Run(ctx, s.rdb, keys, o.UserID, need, o.No, time.Now().UnixMilli()).Int64Slice()
		if err != nil || len(res) != 2 {
			return parts, need, false, fmt.Errorf("%w: reserve in redis (answer %v): %w", inventory.ErrUnavailable, res, err)
		}
		switch res[1] {
		case -2: // not loaded: first use, or a shard lost its data
			if loaded {
				return parts, need, false, fmt.Errorf("%s %d: %w", s.kind, o.ItemID, inventory.ErrNotFound)
			}
			if err := s.loadFirst(ctx, o.ItemID); err != nil {
				return parts, need, false, err
			}
			loaded, i = true, i-1 // visit this bucket again
			continue
		case -3: // nothing taken
			bought, err := s.recordHolds(ctx, o)
			if err != nil || bought {
				return nil, need, false, cmp.Or(err, inventory.ErrAlreadyPurchased)
			}
			recorded, i = true, i-1 // visit home again, under the record found
			continue
		case 1:
			mayReturn = true
		}
		if i == 1 && claim {
			s.fallbacks.Add(1)
		}
		if res[0] > 0 {
			parts, need = append(parts, b), need-int(res[0])
		}
	}
	return parts, need, mayReturn, nil
}

// recordHolds reports whether a buyer recorded in its home bucket holds
// an order of the item, as the database says. The record alone does not
// tell: it is written with the reservation, before the order, and a buy
// that ends without an order forgets the buyer only if its home bucket's
// master is still there to hear it. A buy whose script ran on a master
// that died before it answered (its reply lost, the buyer told 503
// unavailable) leaves the record on the replica that takes over; so does
// one whose SREM went to the dead master. Refused on the record, the
// buyer's retry would hear "already purchased" with no order to show
// (issue 57). Only a buyer found recorded pays this read: a repeat buyer,
// or one whose earlier run was cut off. A store that cannot say (no
// OrderOf) leaves the record trusted, as before.
//
// A run of the same buyer still in flight (another request, between its
// bucket script and its commit) is not told apart from one cut off: both
// go on to the database, whose unique key lets one order through and
// refuses the other as a repeat, true either way. Where the later run took
// the earlier one's reservation over and then lost to it, its give-back
// leaves the bucket a unit over the database, which the guarded decrement
// keeps from being sold and the reconcile job corrects.
func (s *RedisSharded) recordHolds(ctx context.Context, o inventory.Order) (bool, error) {
	bo, ok := s.store.(inventory.BuyerOrders)
	if !ok {
		return true, nil
	}
	_, err := bo.OrderOf(ctx, o.ItemID, o.UserID)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, inventory.ErrOrderNotFound):
		return false, nil
	}
	return false, err
}

// giveBack returns each part of o's reservation to its bucket and, with
// forget, forgets the buyer in its home bucket unless another reservation
// of the buyer's is in flight there (bucket_unclaim.lua).
func (s *RedisSharded) giveBack(ctx context.Context, o inventory.Order, parts []int, forget bool) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var errs []error
	for _, b := range parts {
		keys := s.bucketKeys(o.ItemID, b)
		errs = append(errs, giveBackPart.Run(ctx, s.rdb, []string{keys[0], keys[1], keys[3]}, o.No).Err())
	}
	if forget {
		home := s.bucketKeys(o.ItemID, s.Home(o.UserID))
		errs = append(errs, unclaim.Run(ctx, s.rdb, []string{home[2], home[1]}, o.UserID).Err())
	}
	if len(parts) > 0 {
		s.changed(ctx, o.ItemID) // units came back: a sweeper may gather them
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: give back order %s: %w", inventory.ErrUnavailable, o.No, err)
	}
	return nil
}

// giveBackWithin is giveBack, waited for no longer than within allows: a
// give-back still under way then ends in the background, and one that
// fails leaves the units to the reconcile job, as any failed give-back.
func (s *RedisSharded) giveBackWithin(ctx context.Context, o inventory.Order, parts []int, forget bool) error {
	err := inventory.Within(ctx, func() error { return s.giveBack(context.WithoutCancel(ctx), o, parts, forget) }, func(err error) {
		if err != nil {
			s.log.Warn("giving back a reservation failed", "item", o.ItemID, "order", o.No, "err", err)
		}
	})
	if errors.Is(err, inventory.ErrStillUnderWay) {
		return fmt.Errorf("%w: give back order %s: %w", inventory.ErrUnavailable, o.No, err)
	}
	return err
}

// refuse gives back what a buy that could not get all its units took, and
// says how sold out the item is: for good only when the buy took nothing
// and saw no reservation in flight (see RedisSharded.reserve).
func (s *RedisSharded) refuse(ctx context.Context, o inventory.Order, parts []int, mayReturn bool) error {
	if err := s.giveBackWithin(ctx, o, parts, true); err != nil {
		return err
	}
	if mayReturn || len(parts) > 0 {
		return fmt.Errorf("%w: %w", inventory.ErrSoldOut, inventory.ErrMayReturn)
	}
	return inventory.ErrSoldOut
}

// share is bucket b's part of n units split over buckets: even, the first
// n mod buckets buckets holding one more.
func share(n, buckets, b int) int {
	q := n / buckets
	if b < n%buckets {
		q++
	}
	return q
}

// Reset splits a freshly reset item's stock over its buckets.
func (s *RedisSharded) Reset(ctx context.Context, id int64, _ int) error {
	err := s.loadOne(ctx, id, true)
	s.changed(ctx, id) // even a load cut short may have filled some buckets
	return err
}

// Copies lists the items that have buckets (or had, before Redis lost
// them): the reconcile job's work. It fails with ErrUnavailable.
func (s *RedisSharded) Copies(ctx context.Context) ([]int64, error) { return s.copies.list(ctx, s.rdb) }

// loadFirst loads the buckets of item id for a buy that found one
// missing, once however many buyers found theirs missing at once
// (first_load.go). The guard is one per item, in bucket 0's slot, beside
// the split; each buyer waits for every bucket. Buckets loaded again for
// an item that had them (a shard lost its data) are announced as a
// restock: a remembered sell-out may hide their units.
func (s *RedisSharded) loadFirst(ctx context.Context, id int64) error {
	return s.guard.once(ctx, s.rdb, id, s.loadGuardKey(id), s.everyBucket(id), func(ctx context.Context) error {
		reloaded, err := s.load(ctx, id, false)
		if err != nil || !reloaded {
			return err
		}
		s.log.Warn("buckets of the stock were missing and were loaded again on a buy", "kind", s.kind, "item", id)
		if err := afterRepair(ctx, id, true, nil, s.restocked); err != nil {
			s.log.Warn("announcing the reloaded buckets failed", "kind", s.kind, "item", id, "err", err)
		}
		return nil
	})
}

// everyBucket is the copied of item id's first loads: every bucket is
// there. Another instance loads them one by one, and a buyer who waited
// for bucket b alone could walk on to a bucket still to come and find it
// missing a second time. One EXISTS per bucket: on a Cluster they live in
// different slots.
func (s *RedisSharded) everyBucket(id int64) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		for b := range s.buckets {
			if ok, err := exists(s.rdb, s.bucketKeys(id, b)[0])(ctx); err != nil || !ok {
				return false, err
			}
		}
		return true, nil
	}
}

// loadGuardKey is the guard of item id's first loads.
func (s *RedisSharded) loadGuardKey(id int64) string { return s.splitKey(id) + ":loading" }

// loadOne is load, for a reset or a repair.
func (s *RedisSharded) loadOne(ctx context.Context, id int64, overwrite bool) error {
	_, err := s.load(ctx, id, overwrite)
	return err
}

// load splits the stock of one item over its buckets: only the buckets
// missing, or with overwrite (a reset) all of them. The buckets are
// separate keys, loaded one by one while buyers already sell from those
// loaded, so the total they split is fixed once, in a split key of bucket
// 0's slot, before any bucket exists: a loader that comes later splits that
// total, not the database stock its own read finds lower. A bucket missing
// while the others sold (a shard that lost its data) is loaded with its
// share of that total too, and the reconcile job corrects the sum. The
// item is registered first (copies); without overwrite, load reports
// whether it loaded a bucket of an item registered before (reloaded).
func (s *RedisSharded) load(ctx context.Context, id int64, overwrite bool) (reloaded bool, err error) {
	before, err := s.copies.add(ctx, s.rdb, id)
	if err != nil {
		return false, err
	}
	it, err := s.store.Get(ctx, id)
	if err != nil {
		return false, err
	}
	total := it.Stock
	if overwrite {
		// A reset forgets the moves in flight with the units they carry.
		err = s.rdb.Set(ctx, s.splitKey(id), total, 0).Err()
		if err == nil {
			err = s.rdb.Del(ctx, s.moveKeys(id)[0]).Err()
		}
	} else if err = s.rdb.SetNX(ctx, s.splitKey(id), total, 0).Err(); err == nil {
		total, err = s.rdb.Get(ctx, s.splitKey(id)).Int()
	}
	if err != nil {
		return false, fmt.Errorf("%w: split %s %d: %w", inventory.ErrUnavailable, s.kind, id, err)
	}
	users, err := buyersOf(ctx, s.store, id)
	if err != nil {
		return false, err
	}
	homed := make([][]any, s.buckets)
	for _, u := range users {
		homed[s.Home(u)] = append(homed[s.Home(u)], u)
	}
	flag := "0"
	if overwrite {
		flag = "1"
	}
	gen := newGen()
	for b := range s.buckets {
		args := append([]any{share(total, s.buckets, b), flag, gen}, homed[b]...)
		n, err := loadBucket.Run(ctx, s.rdb, append(s.bucketKeys(id, b), s.bucketGen(id, b)), args...).Int()
		if err != nil {
			return false, fmt.Errorf("%w: load bucket %d of %s %d into redis: %w", inventory.ErrUnavailable, b, s.kind, id, err)
		}
		reloaded = reloaded || before && n == 1 && !overwrite
	}
	return reloaded, nil
}

// bucketGen names bucket b's generation: a new one with every load, so
// that the reconcile job can tell a reloaded bucket from one that only
// holds the same stock.
func (s *RedisSharded) bucketGen(id int64, b int) string { return s.bucketKeys(id, b)[0] + ":gen" }

// splitKey holds the total that an item's buckets were loaded with.
func (s *RedisSharded) splitKey(id int64) string { return s.bucketKeys(id, 0)[0] + ":split" }

// Repair settles reservations older than staleAfter in every bucket
// (confirming those whose order exists, giving back the others), then, if
// the item is quiet (no reservation in flight, no bucket moved while the
// database was read), corrects the buckets so that their sum is the
// database stock: a missing sum is added in even shares, an excess taken
// from the buckets that hold units. Each bucket is corrected only if it
// still holds what was read, so a buy racing the repair makes it stop
// short (Busy), never overshoot.
func (s *RedisSharded) Repair(ctx context.Context, id int64, staleAfter time.Duration, orderExists func(ctx context.Context, no string) (bool, error)) (Drift, error) {
	d, back, err := s.repair(ctx, id, staleAfter, orderExists)
	return d, afterRepair(ctx, id, back, err, s.restocked)
}

// repair is Repair before it tells anyone; back says that units came
// back to a bucket (see afterRepair).
func (s *RedisSharded) repair(ctx context.Context, id int64, staleAfter time.Duration, orderExists func(ctx context.Context, no string) (bool, error)) (d Drift, back bool, err error) {
	for b := range s.buckets {
		keys := s.bucketKeys(id, b)
		pending, err := s.rdb.HGetAll(ctx, keys[1]).Result()
		if err != nil {
			return d, back, fmt.Errorf("%w: %w", inventory.ErrUnavailable, err)
		}
		// bucket_take.lua stamps reservations with the instance's clock.
		n, given, err := settleStale(ctx, pending, time.Now(), staleAfter, orderExists,
			func(no string) error { return s.rdb.HDel(ctx, keys[1], no).Err() },
			func(no, user string, _ int) error {
				return s.giveBack(ctx, inventory.Order{No: no, ItemID: id, UserID: user}, []int{b}, true)
			})
		d.Resolved += n
		back = back || given > 0
		if err != nil {
			return d, back, err
		}
	}
	// Moves cut between their halves are finished first; a move begun
	// while the buckets are read makes the item busy.
	begun, err := s.settleMoves(ctx, id)
	if err != nil {
		return d, back, err
	}
	// Each bucket's generation, read before the database is: a reset that
	// reloads a bucket after this point gives it a new one, and the
	// correction below then leaves it alone (see bucket_adjust.lua).
	gens := make([]string, s.buckets)
	for b := range s.buckets {
		if gens[b], err = s.rdb.Get(ctx, s.bucketGen(id, b)).Result(); err != nil && !errors.Is(err, redis.Nil) {
			return d, back, fmt.Errorf("%w: %w", inventory.ErrUnavailable, err)
		}
	}
	before, err := s.snapshot(ctx, id)
	if err != nil {
		return d, back, err
	}
	it, err := s.store.Get(ctx, id)
	if err != nil {
		return d, back, err
	}
	after, err := s.snapshot(ctx, id)
	if err != nil {
		return d, back, err
	}
	moves, err := moveState.Run(ctx, s.rdb, s.moveKeys(id)).Slice()
	if err != nil {
		return d, back, fmt.Errorf("%w: %w", inventory.ErrUnavailable, err)
	}
	sum, missing, inFlight := 0, 0, int64(0)
	for _, v := range before {
		if v[0] < 0 {
			missing++
		} else {
			sum += int(v[0])
		}
		inFlight += v[1]
	}
	d.DBStock, d.RedisStock = it.Stock, sum
	if missing == s.buckets {
		d.RedisStock = -1
	}
	if !slices.Equal(before, after) || inFlight > 0 || len(moves) != 1 || moves[0] != begun {
		d.Busy = true
		return d, back, nil
	}
	if missing == s.buckets {
		// Buckets whose first load is in flight are not lost.
		if d.Busy, err = loading(ctx, s.rdb, s.loadGuardKey(id)); err != nil || d.Busy {
			return d, back, err
		}
		// Every bucket is gone: split the stock the database has now.
		d.Repaired = true
		if err := s.rdb.Del(ctx, s.splitKey(id)).Err(); err != nil {
			return d, back, fmt.Errorf("%w: %w", inventory.ErrUnavailable, err)
		}
		return d, true, s.loadOne(ctx, id, false)
	}
	if sum == it.Stock && missing == 0 {
		return d, back, nil
	}
	excess := max(0, sum-it.Stock)
	for b, v := range before {
		held := max(0, int(v[0]))
		change := share(max(0, it.Stock-sum), s.buckets, b)
		if excess > 0 {
			change = -min(held, excess)
			excess += change
		}
		if change == 0 && v[0] >= 0 {
			continue
		}
		keys := s.bucketKeys(id, b)
		n, err := adjustBucket.Run(ctx, s.rdb, []string{keys[0], keys[1], s.bucketGen(id, b)}, v[0], held+change, gens[b]).Int()
		if err != nil {
			// The correction may have landed, its reply lost: announce
			// one that would have put units in.
			return d, back || change > 0 || v[0] < 0, fmt.Errorf("%w: correct bucket %d: %w", inventory.ErrUnavailable, b, err)
		}
		d.Repaired = d.Repaired || n == 1
		d.Busy = d.Busy || n == 0
		// Units into a bucket, or a missing bucket made again: buyers
		// can reach what they could not.
		back = back || n == 1 && (change > 0 || v[0] < 0)
	}
	return d, back, nil
}

// snapshot reads each bucket's stock (-1: missing) and its reservations in
// flight. The third key of snapshot.lua, redis-stream's queue, is a key of
// the bucket's slot that this stage never writes.
func (s *RedisSharded) snapshot(ctx context.Context, id int64) ([][2]int64, error) {
	out := make([][2]int64, s.buckets)
	for b := range s.buckets {
		keys := s.bucketKeys(id, b)
		v, err := snapshot.Run(ctx, s.rdb, []string{keys[0], keys[1], keys[0] + ":none"}).Int64Slice()
		if err != nil || len(v) != 2 {
			return nil, fmt.Errorf("%w: snapshot of bucket %d: %w", inventory.ErrUnavailable, b, err)
		}
		out[b] = [2]int64{v[0], v[1]}
	}
	return out, nil
}
