package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"

	"github.com/seckill-lab/seckill/internal/api"
)

// RateLimits reads and sets the targets' rate limits.
type RateLimits struct {
	f      *Fleet
	before []api.RateLimit // each target's own, to restore
}

// TakeRateLimits reads every target's rate limit, and fails when a
// target keeps none (no Redis) or would not believe the lab's
// X-Forwarded-For.
func TakeRateLimits(ctx context.Context, f *Fleet) (*RateLimits, error) {
	rl := &RateLimits{f: f}
	for _, t := range f.Targets {
		var cur api.RateLimit
		if err := f.Do(ctx, http.MethodGet, t+"/api/v1/admin/rate-limit", nil, &cur); err != nil {
			return nil, fmt.Errorf("the scalper scenarios set the fleet's rate limit: %w", err)
		}
		if !trustsLoopback(cur.TrustedProxies) {
			return nil, fmt.Errorf("target %s does not believe X-Forwarded-For from the lab (trusted proxies %v): start it with SECKILL_TRUSTED_PROXIES=127.0.0.1,::1, as lab.sh does", t, cur.TrustedProxies)
		}
		rl.before = append(rl.before, cur)
	}
	return rl, nil
}

// trustsLoopback reports whether the lab's loopback address is among the
// trusted proxies.
func trustsLoopback(trusted []string) bool {
	for _, s := range trusted {
		p, err := netip.ParsePrefix(s)
		if err == nil && (p.Contains(netip.MustParseAddr("127.0.0.1")) || p.Contains(netip.IPv6Loopback())) {
			return true
		}
	}
	return false
}

// Set puts one limit, and one opening draw, on every target.
func (rl *RateLimits) Set(ctx context.Context, intervalMS float64, burst int, by []string, drawMS float64) error {
	body, err := json.Marshal(map[string]any{"interval_ms": intervalMS, "burst": burst, "by": by, "opening_draw_ms": drawMS})
	if err != nil {
		return err
	}
	for _, t := range rl.f.Targets {
		if err := rl.f.Do(ctx, http.MethodPut, t+"/api/v1/admin/rate-limit", body, nil); err != nil {
			return err
		}
	}
	return nil
}

// Restore gives every target its own limit back.
func (rl *RateLimits) Restore(ctx context.Context) error {
	var errs []error
	for i, t := range rl.f.Targets {
		b := rl.before[i]
		body, err := json.Marshal(map[string]any{"interval_ms": b.IntervalMS, "burst": b.Burst, "by": b.By, "opening_draw_ms": b.OpeningDrawMS})
		if err == nil {
			err = rl.f.Do(ctx, http.MethodPut, t+"/api/v1/admin/rate-limit", body, nil)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
