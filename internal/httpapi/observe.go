package httpapi

import (
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/seckill/internal/api"
)

// Observer receives what /metrics exports; internal/metrics implements it.
type Observer interface {
	// InFlight adds delta to the requests in flight on route.
	InFlight(route string, delta int)
	ObserveRequest(method, route string, status int, d time.Duration)
	ObserveBuy(kind, stage, outcome string)
	Handler() http.Handler
}

// problemKey is where writeError leaves the problem slug for observers.
const problemKey = "seckill.problem"

// observe times every request by route pattern and status.
func observe(o Observer) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		route := c.FullPath()
		o.InFlight(route, 1)
		defer o.InFlight(route, -1)
		c.Next()
		o.ObserveRequest(c.Request.Method, route, c.Writer.Status(), time.Since(start))
	}
}

// observeBuy counts buy and grab outcomes by stage: "created", "accepted"
// (queued by redis-stream), "replayed", or the problem type.
func observeBuy(o Observer, kind string) gin.HandlerFunc {
	return func(c *gin.Context) {
		c.Next()
		outcome := c.GetString(problemKey)
		switch {
		case c.Writer.Header().Get("Idempotent-Replayed") == "true":
			outcome = "replayed"
		case outcome == "" && c.Writer.Status() == http.StatusCreated:
			outcome = "created"
		case outcome == "" && c.Writer.Status() == http.StatusAccepted:
			outcome = "accepted"
		case outcome == "":
			outcome = "status-" + http.StatusText(c.Writer.Status())
		}
		stage := c.Writer.Header().Get(api.StageHeader)
		if stage == "" {
			stage = "none"
		}
		o.ObserveBuy(kind, stage, outcome)
	}
}

// pprofHandler serves net/http/pprof under /debug/pprof/ (admin only).
func pprofHandler(c *gin.Context) {
	switch strings.TrimPrefix(c.Param("name"), "/") {
	case "cmdline":
		pprof.Cmdline(c.Writer, c.Request)
	case "profile":
		pprof.Profile(c.Writer, c.Request)
	case "symbol":
		pprof.Symbol(c.Writer, c.Request)
	case "trace":
		pprof.Trace(c.Writer, c.Request)
	default:
		pprof.Index(c.Writer, c.Request)
	}
}
