package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/ratelimit"
)

// admission builds the safe stages' rate limit from the settings: nil when
// SECKILL_RATE_INTERVAL is 0. Each buyer is counted by account, by client
// address, or by both (each on its own), fleet-wide in rdb. A limiter that
// cannot reach Redis lets the buyer through: the stage behind it answers
// for the outage.
func admission(cfg config.Config, rdb redis.UniversalClient, log *slog.Logger) (func(context.Context, inventory.Order) error, error) {
	if cfg.RateInterval == 0 {
		return nil, nil
	}
	if rdb == nil {
		return nil, errors.New("SECKILL_RATE_INTERVAL: the rate limit is kept in Redis, and this instance has none (set SECKILL_REDIS_ADDR)")
	}
	l, err := ratelimit.New(rdb, ratelimit.Options{Interval: cfg.RateInterval, Burst: cfg.RateBurst, Prefix: "seckill:rate:"})
	if err != nil {
		return nil, fmt.Errorf("SECKILL_RATE_INTERVAL: %w", err)
	}
	byAccount, byAddress := slices.Contains(cfg.RateLimitBy, "account"), slices.Contains(cfg.RateLimitBy, "address")
	return func(ctx context.Context, o inventory.Order) error {
		var keys []string
		if byAccount {
			keys = append(keys, "acct:"+o.UserID)
		}
		if addr := inventory.ClientAddr(ctx); byAddress && addr != "" {
			keys = append(keys, "addr:"+addr)
		}
		for _, k := range keys {
			err := l.Allow(ctx, k)
			if errors.Is(err, ratelimit.ErrLimited) {
				return err
			}
			if err != nil && log.Enabled(ctx, slog.LevelDebug) {
				log.Debug("rate limit not checked; buyer let through", "key", k, "err", err)
			}
		}
		return nil
	}, nil
}
