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
	"github.com/seckill-lab/seckill/internal/inventory/admission"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
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
	// batches, when set, is a client of the same Redis as redis that
	// checks each connection before use: redis-atomic sends its batches of
	// reservation scripts through it (newBatchClient), and the
	// Idempotency-Key store its pipelines of Used reads when its records
	// are on redis. nil means redis.
	batches redis.UniversalClient
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
	p, err := newParts(cfg, b, log)
	if err != nil {
		return nil, err
	}
	product := p.stages(b.db.Products(), "product")
	coupon := p.stages(b.db.Coupons(), "coupon")
	// Nothing is copied into Redis here: an item's copy is loaded by its
	// reset or its first buy (redisstage's first_load.go), so a start
	// costs the same with two items as with 100,000.
	if product.queue != nil {
		// Both kinds share one Redis and one level: checking one checks both.
		if err := product.queue.CheckDurability(context.Background()); err != nil {
			return nil, errors.Join(fmt.Errorf("SECKILL_STREAM_DURABILITY=%s: %w", cfg.StreamDurability, err), p.close())
		}
	}
	// Products wait for payment; coupons are free, so grabs never expire.
	products := inventory.NewService(b.db.Products(), product.stages, cfg.Instance, "O").WithCrowd(product.crowd).OnReset(p.markReset("product")).
		WithLifecycle(product.lifecycle(cfg.PaymentTimeout))
	coupons := inventory.NewService(b.db.Coupons(), coupon.stages, cfg.Instance, "C").WithCrowd(coupon.crowd).OnReset(p.markReset("coupon")).
		WithLifecycle(coupon.lifecycle(0))
	productBuys, couponBuys := p.activity(products), p.activity(coupons)
	product.logGiveBacks(products)
	coupon.logGiveBacks(coupons)
	if !products.HasStage(cfg.Stage) {
		return nil, errors.Join(fmt.Errorf("SECKILL_STAGE=%s needs a backend this process does not have (available: %v)", cfg.Stage, products.Stages()), p.close())
	}
	deps := httpapi.Deps{
		Logger:     log,
		Instance:   cfg.Instance,
		Products:   products,
		Coupons:    coupons,
		AdminToken: cfg.AdminToken,
		Stage:      cfg.Stage,
		LockFair:   cfg.LockFair,
		Ready:      b.ready,
		Web:        web.Handler(),
		Dashboard:  dashboardFor(cfg, b.db.Bursts()),

		Idempotency:           p.idempotency(),
		RequireIdempotencyKey: cfg.RequireIdempotencyKey,
		LastReconcile:         p.lastReconcile(),
		Metrics:               p.metrics,
		RequestTimeout:        cfg.RequestTimeout,
		TrustedProxies:        cfg.TrustedProxies,
	}
	if p.rate != nil { // a nil *rateSwitch in the interface would not be nil
		deps.RateLimits = p.rate
		deps.RoomLimit = p.rate.admit
	}
	if deps.Rooms, err = p.rooms(products, product.redisStock); err != nil {
		return nil, errors.Join(err, p.close())
	}
	h := httpapi.NewServer(deps)
	p.startReconcile([]reconcile.Target{
		{Kind: "product", Items: products, Repairer: repairer(product.redisStock), Buckets: buckets(product.sharded), OrderExists: b.db.Products().OrderExists, Activity: productBuys},
		{Kind: "coupon", Items: coupons, Repairer: repairer(coupon.redisStock), Buckets: buckets(coupon.sharded), OrderExists: b.db.Coupons().OrderExists, Activity: couponBuys},
	})
	p.startExpiry([]reconcile.ExpiryTarget{{Kind: "product", Orders: products}})
	return &instance{name: cfg.Instance, handler: h, close: p.close}, nil
}

// parts are what one instance is assembled from: the configuration and
// the shared backends, and what the instance has of its own, as a
// separate process would: its metrics, rate limit, lock clients, view of
// the fleet's restock epochs, and background work.
type parts struct {
	cfg     config.Config
	b       backends
	log     *slog.Logger
	metrics *metrics.Metrics
	// rate is the safe stages' rate limit (CrowdOptions.Admit), switched
	// at runtime; nil without Redis.
	rate   *rateSwitch
	locks  lockClients
	epochs *admission.RedisEpochs // nil without Redis
	bg     background
	// flushes send what the stages left to send after their answers
	// (redis-atomic's confirms), at close.
	flushes []func(context.Context) error
}

func newParts(cfg config.Config, b backends, log *slog.Logger) (*parts, error) {
	rate, err := newRateSwitch(cfg, b.redis, log)
	if err != nil {
		return nil, err
	}
	m := metrics.New(cfg.Instance)
	locks, err := newLockClients(cfg, b, m)
	if err != nil {
		return nil, err
	}
	p := &parts{cfg: cfg, b: b, log: log, metrics: m, rate: rate, locks: locks}
	if b.redis != nil {
		p.epochs = admission.NewRedisEpochs(b.redis, b.redis, cfg.SoldOutLease)
		p.bg.run(p.epochs.Watch)
	}
	return p, nil
}

// close stops the background work, then closes the lock clients it used.
func (p *parts) close() error {
	// The HTTP servers have shut down: the confirms of the last sales are
	// queued or on their way. One lost at exit is not lost for good (the
	// reconcile job keeps its unit, the order existing), but sent now it
	// costs the job no repair.
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	for _, f := range p.flushes {
		if err := f(ctx); err != nil {
			p.log.Warn("sending the last sales' confirms failed; the reconcile job settles them", "err", err)
		}
	}
	p.bg.stop()
	return p.locks.close()
}

// flushTimeout bounds the confirms' last send at close.
const flushTimeout = 2 * time.Second

// idempotency returns the Idempotency-Key store, or nil without Redis.
func (p *parts) idempotency() *idempotency.Store {
	if p.b.redis == nil {
		if p.cfg.RequireIdempotencyKey {
			p.log.Warn("SECKILL_REQUIRE_IDEMPOTENCY_KEY is set but there is no Redis: keys are required yet not honoured")
		}
		return nil
	}
	rdb := p.b.idem
	if rdb == nil {
		rdb = p.b.redis
	}
	// A claim outlives any buy (each is cut off at the request timeout),
	// and a retry after a crash waits no longer than that for the key.
	o := idempotency.Options{Retention: p.cfg.IdempotencyTTL, Lease: 2 * p.cfg.RequestTimeout}
	o.Replicas, o.ReplicaWait = p.cfg.IdempotencyReplicas, p.cfg.StreamReplicaWait
	if redisstage.Durability(p.cfg.StreamDurability) == redisstage.DurabilityReplica {
		// The records that replay redis-stream's 202s (and every other
		// keyed answer) are confirmed on a replica as its orders are.
		o.Replicas = max(o.Replicas, 1)
	}
	s := idempotency.New(rdb, o)
	if p.b.idem == nil {
		// Its pipelines of Used reads go through the checked client of
		// the same server, as redis-atomic's batches do.
		s.SetBatchClient(p.b.batches)
	}
	return s
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
