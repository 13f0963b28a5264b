package redisstage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// The Redis side of redis-stream's queue that is not the buy: how many
// orders are in flight, what became of one that has no row yet, and the
// keys and hooks its writers (internal/inventory/orderwriter) work with.

// StreamOptions tune the redis-stream stage.
type StreamOptions struct {
	// Durability is what must hold before a buyer hears 202 (see
	// durability.go); the zero value is DurabilityNone.
	Durability Durability
	// ReplicaWait bounds how long a buy at DurabilityReplica waits for a
	// replica to confirm its order. Default 100ms.
	ReplicaWait time.Duration
	// MaxLen bounds the entries the stream holds; a buy that finds it
	// full is turned away with ErrOverloaded. Writers trim what they have
	// acknowledged, so the length is the backlog.
	MaxLen int64
	Logger *slog.Logger
}

// QueueKeys are the Redis keys of one item's order queue. All share the
// item's hash tag (one Cluster slot), so one script can settle an order.
type QueueKeys struct {
	Stock  string // the Redis copy of the stock, where failed orders' units go back
	Queued string // a hash: the orders accepted and not yet written, by number
	Stream string // the order stream the writers read
	Dead   string // the dead-letter stream of orders given up on
	Failed string // a hash: the orders given up on without a row
	Work   string // the set of items with queued orders (stream_work.go)
}

// QueueKeys returns the keys of item id's order queue.
func (s *RedisStream) QueueKeys(id int64) QueueKeys {
	k := s.redisStock.key
	return QueueKeys{Stock: k(id, "stock"), Queued: k(id, "queued"), Stream: s.stream(id), Dead: k(id, "dead"), Failed: k(id, "failed"), Work: s.workKey(id)}
}

// Client is the Redis client the stage queues orders on.
func (s *RedisStream) Client() redis.UniversalClient { return s.rdb }

// OnAccept makes every order the stage accepts call f with its item, so
// that this instance's writer takes it at once rather than at its next
// recovery pass. Set it before the stage serves its first buy (it is unguarded).
func (s *RedisStream) OnAccept(f func(id int64)) { s.wake = f }

// Drain waits, up to drainWait (or ctx's end), until no order of the
// items is queued. A reset drains first, so that the orders accepted
// before it are written before it deletes them; a queue that does not
// drain in time is reset anyway, and its late orders are dropped (see
// Reset). A session drains all its items together: each look is one
// pipelined exchange that counts the queue of every item not yet drained
// (HLEN), not a round trip per item, so a 1,000-item session looks as
// often as one item does. Redis unreachable ends the wait: the reset
// then fails on its own reload.
func (s *RedisStream) Drain(ctx context.Context, ids ...int64) {
	ctx, cancel := context.WithTimeout(ctx, drainWait)
	defer cancel()
	for {
		queued, orders, err := s.queued(ctx, ids)
		if err != nil || len(queued) == 0 {
			return
		}
		ids = queued
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			s.opts.Logger.Warn("resetting with orders still queued; they will be dropped", "kind", s.redisStock.kind, "items", len(queued), "first", queued[0], "queued", orders)
			return
		case <-t.C:
		}
	}
}

// queued returns those of the items that have orders queued, and how many
// orders they have, asking for all of them in one pipeline.
func (s *RedisStream) queued(ctx context.Context, ids []int64) (queued []int64, orders int64, err error) {
	pipe := s.rdb.Pipeline()
	lens := make([]*redis.IntCmd, len(ids))
	for i, id := range ids {
		lens[i] = pipe.HLen(ctx, s.redisStock.key(id, "queued"))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, 0, fmt.Errorf("%w: count the order queues of %d %ss: %w", inventory.ErrUnavailable, len(ids), s.redisStock.kind, err)
	}
	for i, c := range lens {
		if n := c.Val(); n > 0 {
			queued = append(queued, ids[i])
			orders += n
		}
	}
	return queued, orders, nil
}

// drainWait bounds how long a reset waits for the queue; it stays below
// the request deadline so that the reset itself still answers.
const drainWait = 2 * time.Second

// Reset reloads the Redis copy of a freshly reset item; it fails with
// ErrUnavailable or the store's error. Entries still in the stream for the
// old stock (the queue did not drain in time, or an order was accepted
// during the reset) are dropped by the writers: their orders are no longer
// in flight. A writer caught between that check and its write can still
// let such an order in under the new stock; a reset is an admin's act,
// made when the sale is over.
func (s *RedisStream) Reset(ctx context.Context, id int64, _ int) error {
	return s.redisStock.loadOne(ctx, id, true)
}

// Backlog returns the orders of the item that were accepted and not yet
// written, and their units. It fails with ErrUnavailable.
func (s *RedisStream) Backlog(ctx context.Context, id int64) (orders, units int, err error) {
	vals, err := s.rdb.HVals(ctx, s.redisStock.key(id, "queued")).Result()
	if err != nil {
		return 0, 0, fmt.Errorf("%w: read the order queue of %s %d: %w", inventory.ErrUnavailable, s.redisStock.kind, id, err)
	}
	for _, v := range vals {
		if q, _, _, ok := parsePending(v); ok {
			units += q
		}
	}
	return len(vals), units, nil
}

// Lookup finds an order that has no row in the database: still queued
// (pending), or given up on without a row (failed; most failures have a
// row). found is false when Redis knows nothing of it. The order number
// does not say its item, so every item of the kind is asked, in one
// pipeline: fine for a sale's handful of items; a catalogue of thousands
// would want an index by order number. It fails with ErrUnavailable when
// Redis cannot be asked, or with the store's error listing the items.
func (s *RedisStream) Lookup(ctx context.Context, no string) (o inventory.Order, found bool, err error) {
	items, err := s.redisStock.store.List(ctx)
	if err != nil {
		return inventory.Order{}, false, err
	}
	pipe := s.rdb.Pipeline()
	queued := make([]*redis.StringCmd, len(items))
	failed := make([]*redis.StringCmd, len(items))
	for i, it := range items {
		queued[i] = pipe.HGet(ctx, s.redisStock.key(it.ID, "queued"), no)
		failed[i] = pipe.HGet(ctx, s.redisStock.key(it.ID, "failed"), no)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return inventory.Order{}, false, fmt.Errorf("%w: look order %s up in redis: %w", inventory.ErrUnavailable, no, err)
	}
	for i, it := range items {
		if v, err := queued[i].Result(); err == nil {
			return queuedOrder(no, it.ID, v, inventory.StatusPending), true, nil
		}
		if v, err := failed[i].Result(); err == nil {
			reason, rec, _ := strings.Cut(v, "|")
			o := queuedOrder(no, it.ID, rec, inventory.StatusFailed)
			o.Reason = reason
			return o, true, nil
		}
	}
	return inventory.Order{}, false, nil
}

// QueuedOrderOf finds the order the user has queued for the item and the
// writers have not written yet (pending); found is false when there is
// none. It reads the item's whole queue, so only the retry of a lost
// answer asks (Service.Buy): the queue holds no more than the writers are
// behind by. It fails with ErrUnavailable.
func (s *RedisStream) QueuedOrderOf(ctx context.Context, id int64, user string) (o inventory.Order, found bool, err error) {
	all, err := s.rdb.HGetAll(ctx, s.redisStock.key(id, "queued")).Result()
	if err != nil {
		return inventory.Order{}, false, fmt.Errorf("%w: read the order queue of %s %d: %w", inventory.ErrUnavailable, s.redisStock.kind, id, err)
	}
	for no, rec := range all {
		if _, u, _, ok := parsePending(rec); ok && u == user {
			if err := s.confirmQueued(ctx, id); err != nil {
				return inventory.Order{}, false, err
			}
			return queuedOrder(no, id, rec, inventory.StatusPending), true, nil
		}
	}
	return inventory.Order{}, false, nil
}

// confirmQueued holds a retry's answer about a queued order to the
// stage's durability: the order's own buy may have been answered
// "outcome unknown" because no replica confirmed it. At
// DurabilityReplica it writes a marker and WAITs for it on the same
// connection: the replication stream is ordered, so a replica that has the
// marker has every order queued before it. It fails with ErrOutcomeUnknown
// when no replica confirms in time, or ErrUnavailable.
func (s *RedisStream) confirmQueued(ctx context.Context, id int64) error {
	if s.opts.Durability != DurabilityReplica {
		return nil
	}
	pipe := s.rdb.Pipeline()
	pipe.Set(ctx, s.redisStock.key(id, "synced"), "1", time.Minute)
	wait := pipe.Do(ctx, "WAIT", 1, s.opts.ReplicaWait.Milliseconds())
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("%w: confirm the queue of %s %d on a replica: %w", inventory.ErrUnavailable, s.redisStock.kind, id, err)
	}
	if n, _ := wait.Int64(); n < 1 {
		return fmt.Errorf("%w: the queued order is not confirmed on a replica within %s", inventory.ErrOutcomeUnknown, s.opts.ReplicaWait)
	}
	return nil
}

// queuedOrder is the order a queued record ("quantity|unix ms|user")
// describes.
func queuedOrder(no string, id int64, rec, status string) inventory.Order {
	q, user, at, _ := parsePending(rec)
	return inventory.Order{No: no, ItemID: id, UserID: user, Quantity: q, Stage: inventory.StageRedisStream, CreatedAt: acceptedAt(at), Status: status}
}

// enqueueKeys are the keys and args of enqueue.lua for o.
func (s *RedisStream) enqueueKeys(o inventory.Order) ([]string, []any) {
	keys := append(s.redisStock.keys(o.ItemID), s.stream(o.ItemID), s.redisStock.key(o.ItemID, "window"), s.workKey(o.ItemID))
	args := []any{o.UserID, o.Quantity, o.No, o.CreatedAt.UnixMilli(), o.Stage, o.Instance, s.opts.MaxLen, o.ItemID}
	return keys, args
}

// stream names the item's order stream; it shares the copy's hash tag, so
// the script that queues an order touches one Cluster slot.
func (s *RedisStream) stream(id int64) string { return s.redisStock.key(id, "orders") }

// acceptedAt reads an order's acceptance time from milliseconds.
func acceptedAt(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
