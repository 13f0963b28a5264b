package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/ratelimit"
)

// rateSwitch is an instance's rate limit of the safe stages' buys and
// grabs (admission.CrowdOptions.Admit, Admitting and AdmitInScript). It starts as the settings say,
// off when SECKILL_RATE_INTERVAL is 0, and GET and PUT
// /api/v1/admin/rate-limit read and change it while the instance runs. Each
// buyer is counted by account, by client address, or by both (each on its
// own), fleet-wide in Redis; a change applies to this instance only (the
// lab sends it to every one). A limiter that cannot reach Redis lets the
// buyer through: the stage behind it answers for the outage.
type rateSwitch struct {
	rdb     redis.UniversalClient
	log     *slog.Logger
	trusted []netip.Prefix
	cur     atomic.Pointer[rateLimit]
	// drawSpan is the opening draw's span (admission.Draw), 0 for none.
	drawSpan atomic.Int64
}

// rateLimit is one setting of a rateSwitch.
type rateLimit struct {
	l        *ratelimit.Limiter // nil: off
	interval time.Duration
	burst    int
	by       []string // "account", "address"
}

// newRateSwitch returns the instance's rate limit from the settings: nil
// without Redis, where SECKILL_RATE_INTERVAL must be 0.
func newRateSwitch(cfg config.Config, rdb redis.UniversalClient, log *slog.Logger) (*rateSwitch, error) {
	if rdb == nil {
		if cfg.RateInterval != 0 {
			return nil, errors.New("SECKILL_RATE_INTERVAL: the rate limit is kept in Redis, and this instance has none (set SECKILL_REDIS_ADDR)")
		}
		return nil, nil
	}
	s := &rateSwitch{rdb: rdb, log: log, trusted: cfg.TrustedProxies}
	if _, err := s.SetRateLimit(cfg.RateInterval, cfg.RateBurst, cfg.RateLimitBy); err != nil {
		return nil, fmt.Errorf("SECKILL_RATE_INTERVAL: %w", err)
	}
	return s, nil
}

// draw is the opening draw's span now (admission.DrawOptions.Span).
func (s *rateSwitch) draw() time.Duration { return time.Duration(s.drawSpan.Load()) }

// SetOpeningDraw sets the opening draw's span; 0 turns it off.
func (s *rateSwitch) SetOpeningDraw(d time.Duration) api.RateLimit {
	s.drawSpan.Store(int64(d))
	return s.RateLimit()
}

// on reports whether the limit applies now (admission.CrowdOptions.Admitting).
func (s *rateSwitch) on() bool { return s.cur.Load().l != nil }

// admit counts one buyer against the limit (admission.CrowdOptions.Admit).
func (s *rateSwitch) admit(ctx context.Context, o inventory.Order) error {
	r := s.cur.Load()
	if r.l == nil {
		return nil
	}
	for _, k := range r.keys(ctx, o) {
		err := r.l.Allow(ctx, k)
		if errors.Is(err, ratelimit.ErrLimited) {
			return err
		}
		if err != nil && s.log.Enabled(ctx, slog.LevelDebug) {
			s.log.Debug("rate limit not checked; buyer let through", "key", k, "err", err)
		}
	}
	return nil
}

// admitInScript is admit as a gate of the claim's script
// (admission.CrowdOptions.AdmitInScript), on this instance's Redis: the
// crowd control folds it where that Redis is the claim's, one server. A
// script that fails fails the claim (503), where admit would let the
// buyer through: the stage's Redis is down too.
func (s *rateSwitch) admitInScript(ctx context.Context, o inventory.Order) (inventory.ScriptGate, bool) {
	r := s.cur.Load()
	if r.l == nil {
		return inventory.ScriptGate{Client: s.rdb}, true
	}
	g := r.l.Gate(r.keys(ctx, o)...)
	return inventory.ScriptGate{Client: s.rdb, Src: g.Src, Keys: g.Keys, Args: g.Args, Refused: g.Refused}, true
}

// keys are the limit's keys of o's buyer, by account and by address.
func (r *rateLimit) keys(ctx context.Context, o inventory.Order) []string {
	var keys []string
	if slices.Contains(r.by, "account") {
		keys = append(keys, "acct:"+o.UserID)
	}
	if addr := inventory.ClientAddr(ctx); slices.Contains(r.by, "address") && addr != "" {
		keys = append(keys, "addr:"+addr)
	}
	return keys
}

// RateLimit is the limit as GET /api/v1/admin/rate-limit shows it.
func (s *rateSwitch) RateLimit() api.RateLimit {
	r := s.cur.Load()
	out := api.RateLimit{On: r.l != nil, IntervalMS: float64(r.interval.Microseconds()) / 1000, Burst: r.burst,
		By: slices.Clone(r.by), TrustedProxies: []string{}, OpeningDrawMS: float64(s.draw().Microseconds()) / 1000}
	for _, p := range s.trusted {
		out.TrustedProxies = append(out.TrustedProxies, p.String())
	}
	return out
}

// SetRateLimit replaces the limit: interval 0 turns it off. Buyers already
// past the limiter are not asked again.
func (s *rateSwitch) SetRateLimit(interval time.Duration, burst int, by []string) (api.RateLimit, error) {
	r := &rateLimit{interval: interval, burst: burst, by: slices.Clone(by)}
	if interval != 0 {
		l, err := ratelimit.New(s.rdb, ratelimit.Options{Interval: interval, Burst: burst, Prefix: "seckill:rate:"})
		if err != nil {
			return api.RateLimit{}, err
		}
		r.l = l
	}
	s.cur.Store(r)
	return s.RateLimit(), nil
}
