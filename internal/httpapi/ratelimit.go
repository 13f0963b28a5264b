package httpapi

import (
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/seckill/internal/api"
)

// RateLimits is an instance's rate limit of the safe stages' buys and
// grabs, read and changed while it runs (GET and PUT
// /api/v1/admin/rate-limit).
type RateLimits interface {
	RateLimit() api.RateLimit
	// SetRateLimit replaces the limit; interval 0 turns it off. The
	// handler has checked the values.
	SetRateLimit(interval time.Duration, burst int, by []string) (api.RateLimit, error)
}

// Bounds of PUT /api/v1/admin/rate-limit, as SECKILL_RATE_INTERVAL and
// SECKILL_RATE_BURST have them.
const (
	maxRateIntervalMS = 3_600_000 // an hour
	maxRateBurst      = 1_000_000
)

// rateLimitBody is PUT /api/v1/admin/rate-limit's body; a field left out
// keeps its value.
type rateLimitBody struct {
	IntervalMS *float64 `json:"interval_ms"`
	Burst      *int     `json:"burst"`
	By         []string `json:"by"`
}

func (s *server) handleGetRateLimit(rl RateLimits) gin.HandlerFunc {
	return func(c *gin.Context) {
		if rl == nil {
			s.writeError(c, errNoRedis)
			return
		}
		out := rl.RateLimit()
		out.Instance = s.instance
		s.writeJSON(c, http.StatusOK, out)
	}
}

func (s *server) handleSetRateLimit(rl RateLimits) gin.HandlerFunc {
	return func(c *gin.Context) {
		if rl == nil {
			s.writeError(c, errNoRedis)
			return
		}
		var b rateLimitBody
		if err := decodeJSON(c, &b); err != nil {
			s.writeError(c, err)
			return
		}
		cur := rl.RateLimit()
		interval, burst, by := time.Duration(cur.IntervalMS*float64(time.Millisecond)), cur.Burst, cur.By
		if b.IntervalMS != nil {
			ms := *b.IntervalMS
			// Under a microsecond a limiter cannot count (ratelimit.New).
			if math.IsNaN(ms) || ms < 0 || ms > maxRateIntervalMS || (ms > 0 && ms < 0.001) {
				s.writeError(c, fieldError("interval_ms %v: want 0 (off) or 0.001 to %d", ms, maxRateIntervalMS))
				return
			}
			interval = time.Duration(ms * float64(time.Millisecond))
		}
		if b.Burst != nil {
			if *b.Burst < 1 || *b.Burst > maxRateBurst {
				s.writeError(c, fieldError("burst %d: want 1 to %d", *b.Burst, maxRateBurst))
				return
			}
			burst = *b.Burst
		}
		if b.By != nil {
			if err := checkRateBy(b.By); err != nil {
				s.writeError(c, err)
				return
			}
			by = b.By
		}
		out, err := rl.SetRateLimit(interval, burst, by)
		if err != nil {
			s.writeError(c, err)
			return
		}
		out.Instance = s.instance
		s.log.Info("rate limit changed", "on", out.On, "interval_ms", out.IntervalMS, "burst", out.Burst, "by", out.By)
		s.writeJSON(c, http.StatusOK, out)
	}
}

// checkRateBy accepts "account", "address", or both, once each.
func checkRateBy(by []string) error {
	if len(by) == 0 {
		return fieldError(`by is empty: want "account", "address", or both`)
	}
	for i, v := range by {
		if v != "account" && v != "address" {
			return fieldError(`by %q: want "account" or "address"`, v)
		}
		if slices.Contains(by[:i], v) {
			return fieldError("by names %q twice", v)
		}
	}
	return nil
}
