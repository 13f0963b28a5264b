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
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/web"
)

// backends are the shared services instances run on. Redis clients may be
// nil, which leaves the stages that need them out.
type backends struct {
	db      *store.DB
	redis   redis.UniversalClient
	redlock []redis.UniversalClient
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
	section := inventory.SectionOptions{Delay: cfg.CriticalSectionDelay, Fencing: cfg.Fencing, Logger: log}
	products := inventory.NewService(b.db.Products(), stagesFor(b.db.Products(), "product", section), cfg.Instance, "O")
	coupons := inventory.NewService(b.db.Coupons(), stagesFor(b.db.Coupons(), "coupon", section), cfg.Instance, "C")
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
	})
	return &instance{name: cfg.Instance, handler: h, close: func() error { return nil }}, nil
}

func stagesFor(st inventory.Store, kind string, section inventory.SectionOptions) map[string]inventory.Stage {
	return map[string]inventory.Stage{
		"unlocked":    inventory.NewUnlocked(st, kind, section),
		"local-mutex": inventory.NewLocalMutex(st, kind, section),
		"db-atomic":   inventory.NewDBAtomic(st),
	}
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

// newHTTPServer wraps h with the timeouts every listener needs.
func newHTTPServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    32 << 10,
	}
}
