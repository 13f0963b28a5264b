package httpapi

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/seckill/internal/api"
)

func noop(*gin.Context) {}

// addRoutes lists every route of an instance.
func addRoutes(r *gin.Engine, s *server, d Deps) {
	products := itemEndpoints{svc: d.Products, coupon: false}
	coupons := itemEndpoints{svc: d.Coupons, coupon: true}

	r.GET("/healthz", s.handleHealth())
	r.GET("/readyz", s.handleReady(d.Ready))
	r.GET("/problems/:slug", s.problemDocs)

	api := r.Group("/api/v1")
	api.GET("/info", s.handleInfo(d.Products))
	api.GET("/openapi.json", handleOpenAPI)
	api.GET("/products", s.handleList(products))
	api.GET("/products/:id", s.handleGet(products))
	api.GET("/products/:id/audit", s.handleAudit(products, d.LastReconcile, d.Dashboard.Verdicts))
	idem := s.idempotent(d.Idempotency, d.RequireIdempotencyKey, nil)
	buyObs, grabObs := noop, noop
	if d.Metrics != nil {
		buyObs, grabObs = observeBuy(d.Metrics, "product"), observeBuy(d.Metrics, "coupon")
		r.GET("/metrics", gin.WrapH(d.Metrics.Handler()))
	}
	r.GET("/debug/pprof/*name", s.requireAdmin(), pprofHandler)
	api.POST("/products/:id/buy", buyObs, s.readBuy(products), s.roomPass(d.Rooms), s.idempotent(d.Idempotency, d.RequireIdempotencyKey, s.refusalCheck(products)), s.handleBuy(products))
	if d.Coupons != nil {
		api.GET("/coupons", s.handleList(coupons))
		api.GET("/coupons/:id", s.handleGet(coupons))
		api.GET("/coupons/:id/audit", s.handleAudit(coupons, d.LastReconcile, d.Dashboard.Verdicts))
		api.POST("/coupons/:id/grab", grabObs, s.readBuy(coupons), s.idempotent(d.Idempotency, d.RequireIdempotencyKey, s.refusalCheck(coupons)), s.handleBuy(coupons))
	}

	// An order of any stage, and its payment (orders.go).
	addOrderRoutes(api, s, d, idem)

	admin := api.Group("/admin", s.requireAdmin())
	admin.POST("/products/:id/reset", s.handleReset(products, d.Dashboard.Marks))
	if d.Coupons != nil {
		admin.POST("/coupons/:id/reset", s.handleReset(coupons, d.Dashboard.Marks))
	}
	// The catalogue (catalogue.go): create or replace by id, archive, and
	// schedule a session of many items.
	admin.PUT("/products/:id", s.handlePut(products, d.Dashboard.Marks))
	admin.POST("/products/:id/archive", s.handleArchive(products, d.Dashboard.Marks))
	if d.Coupons != nil {
		admin.PUT("/coupons/:id", s.handlePut(coupons, d.Dashboard.Marks))
		admin.POST("/coupons/:id/archive", s.handleArchive(coupons, d.Dashboard.Marks))
	}
	admin.POST("/sessions", s.handleSession(products, coupons, d.Dashboard.Marks))
	admin.PUT("/stage", s.handleSetStage(d.Products, d.Coupons))
	admin.GET("/redis-ping", s.handleRedisPing(d.Idempotency))
	admin.GET("/rate-limit", s.handleGetRateLimit(d.RateLimits))
	admin.PUT("/rate-limit", s.handleSetRateLimit(d.RateLimits))

	if d.Web != nil {
		r.NoRoute(func(c *gin.Context) {
			api := strings.HasPrefix(c.Request.URL.Path, "/api/")
			if !api && (c.Request.Method == http.MethodGet || c.Request.Method == http.MethodHead) {
				s.serveWeb(c, d.Web)
				return
			}
			s.writeError(c, errRouteNotFound)
		})
	} else {
		r.NoRoute(func(c *gin.Context) { s.writeError(c, errRouteNotFound) })
	}
	r.NoMethod(func(c *gin.Context) { s.writeError(c, errMethod) })

	// The waiting rooms (room.go); a buy's pass is checked by roomPass.
	if d.Rooms != nil {
		api.GET("/products/:id/room", s.handleRoom(d.Rooms))
		api.POST("/products/:id/room/join", s.handleJoin(d.Rooms, d.RoomLimit))
		api.POST("/products/:id/room/poll", s.handlePoll(d.Rooms, d.RoomLimit))
		admin.PUT("/products/:id/room", s.handleSetRoom(d.Rooms, d.Products))
		admin.DELETE("/products/:id/room", s.handleRemoveRoom(d.Rooms))
	}

	// The dashboard's server side (burst.go): GET /api/v1/fleet,
	// POST /api/v1/admin/burst, PUT /api/v1/admin/fleet/stage,
	// GET /api/v1/lab/latest and GET /api/v1/lab/runs/:run/*file.
	addDashboardRoutes(api, admin, s, d)
}

// RouteAliases are routes under their former names ("METHOD /path"),
// each with the route that now answers it. They are accepted, answered as
// their route is, and listed in CHANGELOG.md; the OpenAPI document and
// docs/api.md name only the routes.
var RouteAliases = map[string]string{
	"PUT /api/v1/admin/mode":       "PUT /api/v1/admin/stage",
	"PUT /api/v1/admin/fleet/mode": "PUT /api/v1/admin/fleet/stage",
}

// headAsGet answers a HEAD as the GET of the same path would be answered,
// without its body (RFC 9110: HEAD is GET without the content), so every
// GET route takes HEAD; gin alone answers it 405.
func headAsGet(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			r = r.Clone(r.Context())
			r.Method = http.MethodGet
			w = bodiless{w}
		}
		h.ServeHTTP(w, r)
	})
}

// bodiless passes on the status and headers of an answer, not its body.
type bodiless struct{ http.ResponseWriter }

func (b bodiless) Write(p []byte) (int, error) { return len(p), nil }

// unalias serves a request to a route's former name as one to the route:
// gin sees only the routes.
func unalias(h http.Handler) http.Handler {
	paths := make(map[string]string, len(RouteAliases))
	for old, now := range RouteAliases {
		_, nowPath, _ := strings.Cut(now, " ")
		paths[old] = nowPath
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if now, ok := paths[r.Method+" "+r.URL.Path]; ok {
			r = r.Clone(r.Context())
			r.URL.Path, r.URL.RawPath = now, ""
		}
		h.ServeHTTP(w, r)
	})
}

// handleOpenAPI serves the OpenAPI document of this API (internal/api).
func handleOpenAPI(c *gin.Context) {
	c.Data(http.StatusOK, "application/json", api.OpenAPI)
}

// serveWeb serves a page of web, or answers a 404 route-not-found problem
// where web has no such page.
func (s *server) serveWeb(c *gin.Context, web http.Handler) {
	w := &notFoundCatcher{ResponseWriter: c.Writer}
	web.ServeHTTP(w, c.Request)
	if w.notFound {
		for _, h := range []string{"Content-Type", "X-Content-Type-Options", "Content-Length"} {
			c.Writer.Header().Del(h)
		}
		s.writeError(c, errRouteNotFound)
	}
}

// notFoundCatcher passes an answer on, unless it is a 404: that one it
// swallows, and says so. A body written with no status is a 200, as
// net/http has it (gin's NoRoute has set 404 on the writer underneath).
type notFoundCatcher struct {
	http.ResponseWriter
	notFound, headed bool
}

func (w *notFoundCatcher) WriteHeader(status int) {
	w.headed = true
	if status == http.StatusNotFound {
		w.notFound = true
		return
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *notFoundCatcher) Write(b []byte) (int, error) {
	if !w.headed {
		w.WriteHeader(http.StatusOK)
	}
	if w.notFound {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}
