package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/lock"
)

// Expiry is the fleet's payment-timeout job: every interval, one instance
// cancels the orders whose payment window has closed and returns their
// units, scheduled like the reconcile job (a lock and a slot claim, under
// names of its own, so the two jobs never wait for each other).
//
// The schedule only keeps the fleet from doing the work many times over.
// Correctness does not rest on it: a cancellation is a conditional UPDATE
// and a unit owed to Redis is given back by a script that remembers it, so
// two runs that overlap anyway (a lease lost mid-run) return each unit
// once (inventory.Service.CancelUnpaid).
type Expiry struct {
	locker  lock.Locker
	rdb     redis.UniversalClient
	targets []ExpiryTarget
	opts    Options
	onRun   func(ExpiryResult)
}

// Canceller cancels the unpaid orders of one kind of item: an
// inventory.Service.
type Canceller interface {
	CancelUnpaid(ctx context.Context) (inventory.CancelReport, error)
}

// ExpiryTarget is one kind of item whose orders expire.
type ExpiryTarget struct {
	Kind   string // "product" or "coupon"
	Orders Canceller
}

// ExpiryResult is what one run of the payment-timeout job did.
type ExpiryResult struct {
	At        time.Time `json:"at"`
	Instance  string    `json:"instance"`
	Slot      int64     `json:"slot"`
	Cancelled int       `json:"cancelled"` // orders cancelled
	Units     int       `json:"units"`     // units back in the database stock
	Returned  int       `json:"returned"`  // units back in the Redis copy
	Errors    []string  `json:"errors,omitempty"`
}

// NewExpiry returns the payment-timeout job. opts are the reconcile job's
// (Interval, Instance, Prefix, Logger); onRun, when set, hears of every
// run this instance performed.
func NewExpiry(locker lock.Locker, rdb redis.UniversalClient, targets []ExpiryTarget, opts Options, onRun func(ExpiryResult)) *Expiry {
	if opts.Prefix == "" {
		opts.Prefix = "seckill:reconcile:"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Expiry{locker: locker, rdb: rdb, targets: targets, opts: opts, onRun: onRun}
}

// Run wakes at every slot boundary until ctx ends.
func (e *Expiry) Run(ctx context.Context) {
	for {
		slot, ok := nextSlot(ctx, e.opts.Interval)
		if !ok {
			return
		}
		if _, ran, err := e.RunSlot(ctx, slot); err != nil && ctx.Err() == nil {
			e.opts.Logger.Warn("payment-timeout job failed", "slot", slot, "ran", ran, "err", err)
		}
	}
}

// RunSlot cancels the expired orders for one slot unless another instance
// already did. It reports whether this instance ran it; the error joins
// those of the orders it could not settle, which the next run retries.
func (e *Expiry) RunSlot(ctx context.Context, slot int64) (ExpiryResult, bool, error) {
	res := ExpiryResult{Instance: e.opts.Instance, Slot: slot}
	ran, err := onceInSlot(ctx, e.locker, e.rdb, e.opts, "expire", "expire-slot:", slot, func(lctx context.Context) error {
		res.At = time.Now().UTC()
		var errs []error
		for _, t := range e.targets {
			rep, err := t.Orders.CancelUnpaid(lctx)
			res.Cancelled += rep.Cancelled
			res.Units += rep.Units
			res.Returned += rep.Returned
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", t.Kind, err))
				res.Errors = append(res.Errors, err.Error())
			}
		}
		if res.Cancelled > 0 || res.Returned > 0 {
			e.opts.Logger.Info("cancelled unpaid orders", "orders", res.Cancelled, "units", res.Units, "returned_to_redis", res.Returned)
		}
		if e.onRun != nil {
			e.onRun(res)
		}
		return errors.Join(errs...)
	})
	return res, ran, err
}
