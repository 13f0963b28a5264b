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
	r := newRig(cfg, b, log, m)
	productStages, productAtomic := r.stages(b.db.Products(), "product")
	couponStages, couponAtomic := r.stages(b.db.Coupons(), "coupon")
	for _, ra := range []*inventory.RedisAtomic{productAtomic, couponAtomic} {
		if ra == nil {
			continue
		}
		if err := ra.LoadAll(context.Background()); err != nil {
			return nil, errors.Join(fmt.Errorf("load stock into redis: %w", err), r.close())
		}
	}
	products := inventory.NewService(b.db.Products(), productStages, cfg.Instance, "O")
	coupons := inventory.NewService(b.db.Coupons(), couponStages, cfg.Instance, "C")
	if !products.HasStage(cfg.Mode) {
		return nil, fmt.Errorf("SECKILL_MODE=%s needs a backend this process does not have (available: %v)", cfg.Mode, products.Stages())
	}
	h := httpapi.NewServer(httpapi.Deps{
		Logger:     log,
		Instance:   cfg.Instance,
		Products:   products,
		Coupons:    coupons,
		AdminToken: cfg.AdminToken,
		Mode:       cfg.Mode,
		Ready:      b.ready,
		Web:        web.Handler(),
		Dashboard:  dashboardFor(cfg),

		Idempotency:           r.idempotency(),
		RequireIdempotencyKey: cfg.RequireIdempotencyKey,
		LastReconcile:         r.lastReconcile(),
		Metrics:               m,
		RequestTimeout:        cfg.RequestTimeout,
	})
	r.startReconcile([]reconcile.Target{
		{Kind: "product", Items: products, Repairer: repairer(productAtomic), OrderExists: b.db.Products().OrderExists},
		{Kind: "coupon", Items: coupons, Repairer: repairer(couponAtomic), OrderExists: b.db.Coupons().OrderExists},
	})
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
	metrics *metrics.Metrics

	stopReconcile func() // cancels the job and waits for it
}

func newRig(cfg config.Config, b backends, log *slog.Logger, m *metrics.Metrics) *rig {
	r := &rig{
		metrics: m,
		cfg:     cfg,
		b:       b,
		log:     log,
		section: inventory.SectionOptions{Delay: cfg.CriticalSectionDelay, Fencing: cfg.Fencing, Logger: log},
		lockOpt: inventory.LockOptions{TTL: cfg.LockTTL, Wait: cfg.LockWait},
	}
	if b.redis != nil {
		r.locker = lock.New(b.redis, lock.Options{Hooks: m.LockHooks("redis")})
	}
	if len(b.redlock) > 0 {
		// The per-instance timeout must stay far below the TTL (the time
		// spent asking is subtracted from the validity), yet above the
		// queueing delay of a busy Redis: TTL/20 is 250ms for the default.
		r.quorum = lock.NewRedLock(b.redlock, lock.RedLockOptions{
			Options:         lock.Options{Hooks: m.LockHooks("redlock")},
			InstanceTimeout: max(50*time.Millisecond, cfg.LockTTL/20),
		})
	}
	return r
}

// stages builds every stage the backends allow for one kind of item.
func (r *rig) stages(st *store.Ledger, kind string) (map[string]inventory.Stage, *inventory.RedisAtomic) {
	m := map[string]inventory.Stage{
		"unlocked":    inventory.NewUnlocked(st, kind, r.section),
		"local-mutex": inventory.NewLocalMutex(st, kind, r.section),
		"db-atomic":   inventory.NewDBAtomic(st),
	}
	var ra *inventory.RedisAtomic
	if r.locker != nil {
		m["redis-lock"] = inventory.NewRedisLock(r.locker, st, kind, r.section, r.lockOpt)
		ra = inventory.NewRedisAtomic(r.b.redis, st, kind, r.log)
		m["redis-atomic"] = ra
	}
	if r.quorum != nil {
		m["redlock"] = inventory.NewRedLock(r.quorum, st, kind, r.section, r.lockOpt)
	}
	return m, ra
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
	return idempotency.New(rdb, idempotency.Options{Retention: r.cfg.IdempotencyTTL})
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); job.Run(ctx) }()
	r.stopReconcile = func() { cancel(); <-done }
}

func (r *rig) lastReconcile() func(context.Context) (reconcile.Result, bool, error) {
	if r.cfg.ReconcileInterval <= 0 || r.b.redis == nil {
		return nil
	}
	return func(ctx context.Context) (reconcile.Result, bool, error) { return reconcile.Last(ctx, r.b.redis, "") }
}

// repairer avoids handing reconcile a typed nil.
func repairer(ra *inventory.RedisAtomic) reconcile.Repairer {
	if ra == nil {
		return nil
	}
	return ra
}

func (r *rig) close() error {
	if r.stopReconcile != nil {
		r.stopReconcile()
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
		MaxHeaderBytes:    32 << 10,
	}
}
