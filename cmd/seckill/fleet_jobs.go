package main

import (
	"context"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/reconcile"
)

// The fleet-wide jobs of an instance (reconcile, payment timeout) and what
// the API reads and writes of their findings.

// startReconcile runs the fleet-wide reconcile job, which needs Redis for
// its lock.
func (p *parts) startReconcile(targets []reconcile.Target) {
	if !p.reconciles() {
		return
	}
	job := reconcile.New(p.locks.locker, p.b.redis, targets, reconcile.Options{
		Interval: p.cfg.ReconcileInterval,
		Instance: p.cfg.Instance,
		Logger:   p.log,
		OnRun:    p.metrics.ObserveReconcile,
		// A reservation older than two request deadlines belongs to a
		// request that is over: settle it (confirm or give back).
		StaleAfter: 2 * p.cfg.RequestTimeout,
	})
	p.bg.run(job.Run)
}

// reconciles says whether this instance takes part in the reconcile job.
func (p *parts) reconciles() bool { return p.cfg.ReconcileInterval > 0 && p.locks.locker != nil }

// activity collects svc's buys for the reconcile job, which checks the
// items bought since its last run; nil when no reconcile job runs.
func (p *parts) activity(svc *inventory.Service) *reconcile.Activity {
	if !p.reconciles() {
		return nil
	}
	a := &reconcile.Activity{}
	svc.OnBuy(a.Mark)
	return a
}

// startExpiry runs the fleet-wide payment-timeout job, on the reconcile
// job's schedule. Without Redis there is no fleet lock to take turns with:
// every instance then runs it, which is safe (a cancellation is a
// conditional UPDATE), only wasteful.
func (p *parts) startExpiry(targets []reconcile.ExpiryTarget) {
	if p.cfg.ReconcileInterval <= 0 || p.cfg.PaymentTimeout <= 0 {
		return
	}
	if p.locks.locker == nil {
		p.bg.every(p.cfg.ReconcileInterval, func(ctx context.Context) {
			for _, tg := range targets {
				rep, err := tg.Orders.CancelUnpaid(ctx)
				if err != nil && ctx.Err() == nil {
					p.log.Warn("payment-timeout job failed", "kind", tg.Kind, "err", err)
				}
				p.metrics.ObserveExpiry(reconcile.ExpiryResult{Cancelled: rep.Cancelled, Units: rep.Units, Returned: rep.Returned})
			}
		})
		return
	}
	job := reconcile.NewExpiry(p.locks.locker, p.b.redis, targets, reconcile.Options{
		Interval: p.cfg.ReconcileInterval,
		Instance: p.cfg.Instance,
		Logger:   p.log,
	}, p.metrics.ObserveExpiry)
	p.bg.run(job.Run)
}

// lastReconcile reads an item's latest reconcile finding; it is nil when
// no reconcile job runs.
func (p *parts) lastReconcile() func(context.Context, string, int64) (reconcile.Finding, bool, error) {
	if p.cfg.ReconcileInterval <= 0 || p.b.redis == nil {
		return nil
	}
	return func(ctx context.Context, kind string, id int64) (reconcile.Finding, bool, error) {
		return reconcile.LastFor(ctx, p.b.redis, "", kind, id)
	}
}

// markReset hides the item's reconcile finding from before a reset (see
// reconcile.LastFor).
func (p *parts) markReset(kind string) func(context.Context, int64) error {
	return func(ctx context.Context, id int64) error {
		if p.b.redis == nil {
			return nil
		}
		return reconcile.MarkReset(ctx, p.b.redis, "", kind, id)
	}
}

// repairer avoids handing reconcile a typed nil.
func repairer(ra *redisstage.RedisAtomic) reconcile.Repairer {
	if ra == nil {
		return nil
	}
	return ra
}

// buckets is repairer for redis-sharded's buckets.
func buckets(rs *redisstage.RedisSharded) reconcile.Repairer {
	if rs == nil {
		return nil
	}
	return rs
}
