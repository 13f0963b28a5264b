package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/metrics"
	"github.com/seckill-lab/seckill/internal/reconcile"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/web"
)

// backends are the shared services instances run on. Redis clients may be
// nil, which leaves the stages that need them out.
type backends struct {
	db      *store.DB
	redis   redis.UniversalClient
	redlock []redis.UniversalClient
	// idem holds Idempotency-Key records; nil means redis. The demo gives
	// them a server of their own, so their volume never slows the locks.
	idem redis.UniversalClient
}

// instance is one API instance: its handler and its own in-process state
// (local mutexes, default stage), as a separate process would have.
type instance struct {
	name    string
	handler http.Handler
	close   func() error
}

// newInstance builds every stage the backends allow into a map keyed by
// name; a request picks its stage from that map.
func newInstance(cfg config.Config, b backends, log *slog.Logger) (*instance, error) {
	log = log.With("instance", cfg.Instance)
	m := metrics.New(cfg.Instance)
	r, err := newRig(cfg, b, log, m)
	if err != nil {
		return nil, err
	}
	product := r.stages(b.db.Products(), "product")
	coupon := r.stages(b.db.Coupons(), "coupon")
	for _, ra := range []*inventory.RedisAtomic{product.redisStock, coupon.redisStock} {
		if ra == nil {
			continue
		}
		if err := ra.LoadAll(context.Background()); err != nil {
			return nil, errors.Join(fmt.Errorf("load stock into redis: %w", err), r.close())
		}
	}
	// Products wait for payment; coupons are free, so grabs never expire.
	products := inventory.NewService(b.db.Products(), product.stages, cfg.Instance, "O").WithCrowd(product.crowd).OnReset(r.markReset("product")).
		WithLifecycle(inventory.Lifecycle{PaymentTimeout: cfg.PaymentTimeout, RedisStock: product.redisStock, Queue: product.queue})
	coupons := inventory.NewService(b.db.Coupons(), coupon.stages, cfg.Instance, "C").WithCrowd(coupon.crowd).OnReset(r.markReset("coupon")).
		WithLifecycle(inventory.Lifecycle{RedisStock: coupon.redisStock, Queue: coupon.queue})
	if !products.HasStage(cfg.Stage) {
		return nil, errors.Join(fmt.Errorf("SECKILL_STAGE=%s needs a backend this process does not have (available: %v)", cfg.Stage, products.Stages()), r.close())
	}
	h := httpapi.NewServer(httpapi.Deps{
		Logger:     log,
		Instance:   cfg.Instance,
		Products:   products,
		Coupons:    coupons,
		AdminToken: cfg.AdminToken,
		Stage:      cfg.Stage,
		Ready:      b.ready,
		Web:        web.Handler(),
		Dashboard:  dashboardFor(cfg, b.db.Bursts()),

		Idempotency:           r.idempotency(),
		RequireIdempotencyKey: cfg.RequireIdempotencyKey,
		LastReconcile:         r.lastReconcile(),
		Metrics:               m,
		RequestTimeout:        cfg.RequestTimeout,
		TrustedProxies:        cfg.TrustedProxies,
	})
	r.startReconcile([]reconcile.Target{
		{Kind: "product", Items: products, Repairer: repairer(product.redisStock), OrderExists: b.db.Products().OrderExists},
		{Kind: "coupon", Items: coupons, Repairer: repairer(coupon.redisStock), OrderExists: b.db.Coupons().OrderExists},
	})
	r.startExpiry([]reconcile.ExpiryTarget{{Kind: "product", Orders: products}})
	return &instance{name: cfg.Instance, handler: h, close: r.close}, nil
}

// rig holds one instance's lock clients: each instance has its own, as a
// separate process would.
type rig struct {
	cfg     config.Config
	b       backends
	log     *slog.Logger
	section inventory.SectionOptions
	lockOpt inventory.LockOptions
	locker  *lock.Client
	quorum  *lock.RedLock
	epochs  *redisEpochs // the fleet's restock epochs; nil without Redis
	metrics *metrics.Metrics
	// admit is the safe stages' rate limit (CrowdOptions.Admit); nil when
	// off.
	admit func(context.Context, inventory.Order) error

	// stops cancel the background work (the reconcile and payment-timeout
	// jobs, the order writers) and wait for it, in reverse order of start.
	stops []func()
}

// goEvery runs f once every period until the rig closes.
func (r *rig) goEvery(period time.Duration, f func(ctx context.Context)) {
	r.goBackground(func(ctx context.Context) {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				f(ctx)
			}
		}
	})
}

// goBackground runs f until the rig closes.
func (r *rig) goBackground(f func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f(ctx) }()
	r.stops = append(r.stops, func() { cancel(); <-done })
}

func newRig(cfg config.Config, b backends, log *slog.Logger, m *metrics.Metrics) (*rig, error) {
	r := &rig{
		metrics: m,
		cfg:     cfg,
		b:       b,
		log:     log,
		section: inventory.SectionOptions{Delay: cfg.CriticalSectionDelay, Fencing: cfg.Fencing, Logger: log},
		lockOpt: inventory.LockOptions{TTL: cfg.LockTTL, Wait: cfg.LockWait},
	}
	var err error
	if r.admit, err = admission(cfg, b.redis, log); err != nil {
		return nil, err
	}
	if len(b.redlock) > 0 {
		// The per-instance timeout must stay far below the TTL (the time
		// spent asking is subtracted from the validity), yet above the
		// queueing delay of a busy Redis: TTL/20 is 250ms for the default.
		r.quorum, err = lock.NewRedLock(b.redlock, lock.RedLockOptions{
			Options:         lock.Options{Hooks: m.LockHooks("redlock")},
			InstanceTimeout: max(50*time.Millisecond, cfg.LockTTL/20),
		})
		if err != nil {
			return nil, err
		}
	}
	if b.redis != nil {
		if r.locker, err = lock.New(b.redis, lock.Options{Hooks: m.LockHooks("redis")}); err != nil {
			return nil, errors.Join(err, r.close())
		}
		r.epochs = newRedisEpochs(b.redis, b.redis, cfg.SoldOutLease)
		r.goBackground(r.epochs.watch)
	}
	return r, nil
}

// kindStages are the stages of one kind of item, and the parts of them
// the rest of the instance needs.
type kindStages struct {
	stages     map[string]inventory.Stage
	redisStock *inventory.RedisAtomic // redis-atomic, over the Redis copy of the stock; nil without Redis
	queue      *inventory.RedisStream // redis-stream; nil without Redis
	crowd      *inventory.Crowd
}

// stages builds every stage the backends allow for one kind of item. The
// safe stages sit behind one crowd control (sold-out memory, bounded
// queue); the teaching stages do not, since their race is the lesson.
// With Redis, it also starts redis-stream's order writer.
func (r *rig) stages(st *store.Ledger, kind string) kindStages {
	co := inventory.CrowdOptions{Queue: r.cfg.ItemQueue, QueueMax: r.cfg.ItemQueueMax, Within: r.cfg.LockWait, Kind: kind, Refused: r.metrics.Refused(kind), Admit: r.admit}
	if r.b.redis != nil {
		co.Epochs = r.epochs
	}
	k := kindStages{crowd: inventory.NewCrowd(co)}
	if r.epochs != nil {
		// A unit given back whose announcement failed must not stay unsold
		// behind another instance's memory: tell the fleet again.
		r.goEvery(r.cfg.SoldOutLease, func(ctx context.Context) {
			if err := k.crowd.RetryRestocks(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("announcing a restock failed again; retrying", "kind", kind, "err", err)
			}
		})
	}
	k.stages = map[string]inventory.Stage{
		inventory.StageUnlocked:   inventory.NewUnlocked(st, kind, r.section),
		inventory.StageLocalMutex: inventory.NewLocalMutex(st, kind, r.section),
		inventory.StageDBAtomic:   k.crowd.Wrap(inventory.NewDBAtomic(st)),
	}
	if r.locker != nil {
		k.stages[inventory.StageRedisLock] = k.crowd.Wrap(inventory.NewRedisLock(r.locker, st, kind, r.section, r.lockOpt))
		k.redisStock = inventory.NewRedisAtomic(r.b.redis, st, kind, r.log)
		k.redisStock.OnRestock(k.crowd.Restocked)
		// The Redis stages remember sell-outs too: a remembered one costs
		// no round trip, where their script costs one.
		k.stages[inventory.StageRedisAtomic] = k.crowd.Wrap(k.redisStock)
		k.queue = inventory.NewRedisStream(k.redisStock, inventory.StreamOptions{MaxLen: int64(r.cfg.StreamMaxLen), Logger: r.log})
		k.stages[inventory.StageRedisStream] = k.crowd.Wrap(k.queue)
		w := inventory.NewOrderWriter(k.queue, st, inventory.WriterOptions{
			// Unique per process: a restarted instance is a new consumer,
			// and its predecessor's entries are claimed like any other's.
			Consumer:  r.cfg.Instance + "-" + kind + "-" + randomToken()[:8],
			ClaimIdle: r.cfg.StreamClaimIdle,
			Hooks:     r.metrics.WriterHooks(kind),
			Logger:    r.log,
		})
		w.OnRestock(k.crowd.Restocked)
		r.goBackground(func(ctx context.Context) {
			if err := w.Run(ctx); err != nil {
				r.log.Error("order writer stopped", "kind", kind, "err", err)
			}
		})
	}
	if r.quorum != nil {
		k.stages[inventory.StageRedLock] = k.crowd.Wrap(inventory.NewRedLock(r.quorum, st, kind, r.section, r.lockOpt))
	}
	return k
}

// idempotency returns the Idempotency-Key store, or nil without Redis.
func (r *rig) idempotency() *idempotency.Store {
	if r.b.redis == nil {
		if r.cfg.RequireIdempotencyKey {
			r.log.Warn("SECKILL_REQUIRE_IDEMPOTENCY_KEY is set but there is no Redis: keys are required yet not honoured")
		}
		return nil
	}
	rdb := r.b.idem
	if rdb == nil {
		rdb = r.b.redis
	}
	// A claim outlives any buy (each is cut off at the request timeout),
	// and a retry after a crash waits no longer than that for the key.
	return idempotency.New(rdb, idempotency.Options{Retention: r.cfg.IdempotencyTTL, Lease: 2 * r.cfg.RequestTimeout})
}

// startReconcile runs the fleet-wide reconcile job, which needs Redis for
// its lock.
func (r *rig) startReconcile(targets []reconcile.Target) {
	if r.cfg.ReconcileInterval <= 0 || r.locker == nil {
		return
	}
	job := reconcile.New(r.locker, r.b.redis, targets, reconcile.Options{
		Interval: r.cfg.ReconcileInterval,
		Instance: r.cfg.Instance,
		Logger:   r.log,
		OnRun:    r.metrics.ObserveReconcile,
		// A reservation older than two request deadlines belongs to a
		// request that is over: settle it (confirm or give back).
		StaleAfter: 2 * r.cfg.RequestTimeout,
	})
	r.goBackground(job.Run)
}

// startExpiry runs the fleet-wide payment-timeout job, on the reconcile
// job's schedule. Without Redis there is no fleet lock to take turns with:
// every instance then runs it, which is safe (a cancellation is a
// conditional UPDATE), only wasteful.
func (r *rig) startExpiry(targets []reconcile.ExpiryTarget) {
	if r.cfg.ReconcileInterval <= 0 || r.cfg.PaymentTimeout <= 0 {
		return
	}
	if r.locker == nil {
		r.goEvery(r.cfg.ReconcileInterval, func(ctx context.Context) {
			for _, tg := range targets {
				rep, err := tg.Orders.CancelUnpaid(ctx)
				if err != nil && ctx.Err() == nil {
					r.log.Warn("payment-timeout job failed", "kind", tg.Kind, "err", err)
				}
				r.metrics.ObserveExpiry(reconcile.ExpiryResult{Cancelled: rep.Cancelled, Units: rep.Units, Returned: rep.Returned})
			}
		})
		return
	}
	job := reconcile.NewExpiry(r.locker, r.b.redis, targets, reconcile.Options{
		Interval: r.cfg.ReconcileInterval,
		Instance: r.cfg.Instance,
		Logger:   r.log,
	}, r.metrics.ObserveExpiry)
	r.goBackground(job.Run)
}

func (r *rig) lastReconcile() func(context.Context, string, int64) (reconcile.Finding, bool, error) {
	if r.cfg.ReconcileInterval <= 0 || r.b.redis == nil {
		return nil
	}
	return func(ctx context.Context, kind string, id int64) (reconcile.Finding, bool, error) {
		return reconcile.LastFor(ctx, r.b.redis, "", kind, id)
	}
}

// markReset hides the item's reconcile finding from before a reset (see
// reconcile.LastFor).
func (r *rig) markReset(kind string) func(context.Context, int64) error {
	return func(ctx context.Context, id int64) error {
		if r.b.redis == nil {
			return nil
		}
		return reconcile.MarkReset(ctx, r.b.redis, "", kind, id)
	}
}

// repairer avoids handing reconcile a typed nil.
func repairer(ra *inventory.RedisAtomic) reconcile.Repairer {
	if ra == nil {
		return nil
	}
	return ra
}

func (r *rig) close() error {
	for i := len(r.stops) - 1; i >= 0; i-- {
		r.stops[i]()
	}
	var errs []error
	if r.locker != nil {
		errs = append(errs, r.locker.Close())
	}
	if r.quorum != nil {
		errs = append(errs, r.quorum.Close())
	}
	return errors.Join(errs...)
}

// ready pings every backend.
func (b backends) ready(ctx context.Context) error {
	var errs []error
	if err := b.db.Ping(ctx); err != nil {
		errs = append(errs, fmt.Errorf("database: %w", err))
	}
	if b.redis != nil {
		if err := b.redis.Ping(ctx).Err(); err != nil {
			errs = append(errs, fmt.Errorf("redis: %w", err))
		}
	}
	return errors.Join(errs...)
}

// newHTTPServer wraps h with the timeouts every listener needs. The write
// timeout leaves room for the request timeout, so a slow buy is answered
// (503 timeout) rather than cut off.
func newHTTPServer(addr string, h http.Handler, requestTimeout time.Duration) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      max(30*time.Second, requestTimeout+10*time.Second),
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    httpapi.MaxHeaderReadBytes, // over httpapi.MaxHeaderBytes is refused as problem+json
	}
}
