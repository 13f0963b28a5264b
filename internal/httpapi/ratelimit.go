package httpapi

import (
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
)

// RateLimits is an instance's rate limit of the safe stages' buys and
// grabs, read and changed while it runs (GET and PUT
// /api/v1/admin/rate-limit).
type RateLimits interface {
	RateLimit() api.RateLimit
	// SetRateLimit replaces the limit; interval 0 turns it off. The
	// handler has checked the values.
	SetRateLimit(interval time.Duration, burst int, by []string) (api.RateLimit, error)
	// SetOpeningDraw sets the opening draw's span; 0 turns it off.
	SetOpeningDraw(span time.Duration) api.RateLimit
}

// Bounds of PUT /api/v1/admin/rate-limit, as SECKILL_RATE_INTERVAL and
// SECKILL_RATE_BURST have them.
const (
	maxRateIntervalMS = 3_600_000 // an hour
	maxRateBurst      = 1_000_000
	// maxOpeningDrawMS bounds the opening draw: a buyer may be held for
	// up to twice it and a hair (admission.DrawHoldMax), within the
	// request's deadline.
	maxOpeningDrawMS = 10_000
)

// rateLimitBody is PUT /api/v1/admin/rate-limit's body; a field left out
// keeps its value.
type rateLimitBody struct {
	IntervalMS *float64 `json:"interval_ms"`
	Burst      *int     `json:"burst"`
	By         []string `json:"by"`
	// OpeningDrawMS sets the opening draw (0: none).
	OpeningDrawMS *float64 `json:"opening_draw_ms"`
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
		draw := time.Duration(cur.OpeningDrawMS * float64(time.Millisecond))
		if b.OpeningDrawMS != nil {
			ms := *b.OpeningDrawMS
			// Under a microsecond, GET would show 0 (none) for a draw
			// that is on.
			if math.IsNaN(ms) || ms < 0 || ms > maxOpeningDrawMS || (ms > 0 && ms < 0.001) {
				s.writeError(c, fieldError("opening_draw_ms %v: want 0 (none) or 0.001 to %d", ms, maxOpeningDrawMS))
				return
			}
			draw = time.Duration(ms * float64(time.Millisecond))
			if hold := admission.DrawHoldMax(draw); s.requestTimeout > 0 && hold >= s.requestTimeout {
				s.writeError(c, fieldError("opening_draw_ms %v: a buyer may be held %v (twice that, and one who came a hair early), past this instance's request deadline (%v)", ms, hold, s.requestTimeout))
				return
			}
		}
		if _, err := rl.SetRateLimit(interval, burst, by); err != nil {
			s.writeError(c, err)
			return
		}
		out := rl.SetOpeningDraw(draw)
		out.Instance = s.instance
		s.log.Info("rate limit changed", "on", out.On, "interval_ms", out.IntervalMS, "burst", out.Burst, "by", out.By, "opening_draw_ms", out.OpeningDrawMS)
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
