// Package httpapi is seckill's HTTP surface, built on gin: the buy and grab
// endpoints, the audits that prove whether anything was oversold, and the
// admin routes a workshop uses to reset stock and switch stages. gin appears
// in this package only; handlers take exactly the dependencies they use.
package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/reconcile"
	"github.com/seckill-lab/seckill/internal/room"
)

// MaxBody caps every request body but a session's.
const MaxBody = 64 << 10

// MaxSessionBody caps a session's body (POST /admin/sessions): 1,000
// items with the longest ids and stocks, indented, are about 120 KB.
const MaxSessionBody = 256 << 10

// Deps are what the server needs. Products is required; the rest may be
// zero, which turns the matching feature off.
type Deps struct {
	Logger     *slog.Logger
	Instance   string
	Products   *inventory.Service
	Coupons    *inventory.Service
	AdminToken string
	// Stage is the initial default stage of this instance.
	Stage string
	// Ready reports whether the backends answer; nil means always ready.
	Ready func(context.Context) error
	// Web serves the dashboard at / when set.
	Web http.Handler
	// Dashboard is the dashboard's server side (burst.go); zero turns the
	// burst, fleet and lab routes off.
	Dashboard Dashboard
	// Idempotency stores Idempotency-Key records; nil (no Redis) means
	// keys are validated but not honoured.
	Idempotency *idempotency.Store
	// RequireIdempotencyKey answers buys and grabs without a key with 400.
	RequireIdempotencyKey bool
	// LastReconcile returns the item's finding in the fleet's newest
	// reconcile run (reconcile.LastFor), shown in the audits; nil when the
	// job does not run.
	LastReconcile func(ctx context.Context, kind string, id int64) (reconcile.Finding, bool, error)
	// Metrics, when set, is served at /metrics and told about every
	// request and every buy outcome.
	Metrics Observer
	// RequestTimeout bounds each request's work (0: no bound), so that a
	// backend that never answers costs the client a 503, not a hang.
	RequestTimeout time.Duration
	// TrustedProxies are the peers whose X-Forwarded-For names a buy's
	// client (inventory.ClientAddr, for limits per address); from any
	// other peer the header is ignored.
	TrustedProxies []netip.Prefix
	// LockFair says that redis-lock runs the lock's fair mode; shown in
	// GET /api/v1/info.
	LockFair bool
	// RateLimits is the instance's rate limit, switched at runtime (GET
	// and PUT /api/v1/admin/rate-limit); nil without Redis.
	RateLimits RateLimits
	// Rooms are the products' waiting rooms (room.go); nil without Redis.
	// RoomLimit counts joins and polls against the buy's rate limit.
	Rooms     *room.Manager
	RoomLimit RoomLimit
}

type server struct {
	log      *slog.Logger
	instance string
	// instanceHeader is the X-Seckill-Instance value, shared by every
	// answer that sets it straight into the header map (never written to).
	instanceHeader []string
	stage          atomic.Pointer[string]
	admin          [32]byte // sha256 of the admin token
	adminOn        bool
	// requestTimeout is Deps.RequestTimeout: what a duplicate of a
	// request still running is told to wait.
	requestTimeout time.Duration
	process        string // host/pid, for api.Info
	pidNamespace   string // the pid's namespace, for api.Info
	trusted        []netip.Prefix
	lockFair       bool // for api.Info
}

// NewServer returns the HTTP handler of one instance.
func NewServer(d Deps) http.Handler {
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	s := &server{log: d.Logger, instance: d.Instance, instanceHeader: []string{d.Instance}, requestTimeout: d.RequestTimeout, process: processName(), pidNamespace: pidNamespace(), trusted: d.TrustedProxies, lockFair: d.LockFair}
	stage := d.Stage
	s.stage.Store(&stage)
	if d.AdminToken != "" {
		s.admin, s.adminOn = sha256.Sum256([]byte(d.AdminToken)), true
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.ContextWithFallback = true
	r.Use(s.recoverer(), s.requestLog(), s.limitHeaders)
	if d.Metrics != nil {
		r.Use(observe(d.Metrics))
	}
	if d.RequestTimeout > 0 {
		r.Use(deadline(d.RequestTimeout))
	}
	addRoutes(r, s, d)
	return headAsGet(unalias(r))
}

// MaxHeaderBytes bounds a request's line and headers. The instance answers
// a request over it 431 headers-too-large, as problem+json; its
// http.Server reads up to MaxHeaderReadBytes, past which Go's own plain
// 431 answers.
const (
	MaxHeaderBytes     = 32 << 10
	MaxHeaderReadBytes = 256 << 10
)

// limitHeaders refuses a request whose line and headers, counted as they
// came on the wire, exceed MaxHeaderBytes.
func (s *server) limitHeaders(c *gin.Context) {
	r := c.Request
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4 + len(r.Host) + len("Host: \r\n")
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	if n > MaxHeaderBytes {
		c.Header("Connection", "close")
		s.writeError(c, fmt.Errorf("%w: %d bytes, over %d", errHeadersTooLarge, n, MaxHeaderBytes))
		c.Abort()
	}
}

// longRunning are the routes that carry bounds of their own and outlast a
// buy: the dashboard's burst (N buys, each with its own timeout) and CPU or
// trace profiles.
var longRunning = map[string]bool{
	"/api/v1/admin/burst": true,
	"/debug/pprof/*name":  true,
}

// deadline gives every request but the long-running ones a context that
// ends after d.
func deadline(d time.Duration) gin.HandlerFunc {
	return func(c *gin.Context) {
		if longRunning[c.FullPath()] {
			c.Next()
			return
		}
		ctx, cancel := context.WithTimeout(c.Request.Context(), d)
		defer cancel()
		c.Request = c.Request.WithContext(ctx)
		c.Next()
	}
}

// recoverer turns a panic into a logged 500 problem.
func (s *server) recoverer() gin.HandlerFunc {
	return gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, rec any) {
		s.writeError(c, fmt.Errorf("%w: %s", errPanic, toString(rec)))
	})
}

// errPanic marks a recovered panic: a bug, answered 500 even though the
// request's context is over by then (the deadline middleware's cancel ran
// as the panic unwound).
var errPanic = errors.New("panic")

func toString(v any) string {
	if e, ok := v.(error); ok {
		return e.Error()
	}
	if s, ok := v.(string); ok {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// requestLog logs each request at Debug, so load tests measure the lock and
// not the logger.
func (s *server) requestLog() gin.HandlerFunc {
	return func(c *gin.Context) {
		c.Next()
		if s.log.Enabled(c.Request.Context(), slog.LevelDebug) {
			s.log.Debug("request", "method", c.Request.Method, "path", c.Request.URL.Path, "status", c.Writer.Status())
		}
	}
}

// checkAdmin compares the bearer token in constant time (over digests, so
// the token's length does not leak either).
func (s *server) checkAdmin(c *gin.Context) error {
	if !s.adminOn {
		return errAdminDisabled
	}
	// The scheme's name is case-insensitive (RFC 9110 section 11.1).
	scheme, token, _ := strings.Cut(c.GetHeader("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return errUnauthorized
	}
	got := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(got[:], s.admin[:]) != 1 {
		return errForbidden
	}
	return nil
}

func (s *server) requireAdmin() gin.HandlerFunc {
	return func(c *gin.Context) {
		if err := s.checkAdmin(c); err != nil {
			s.writeError(c, err)
		}
	}
}

// stageFor picks the stage of a buy: the X-Seckill-Stage header (or its
// former name, X-Seckill-Mode) when the admin token is also sent, else the
// instance default.
func (s *server) stageFor(c *gin.Context, svc *inventory.Service) (string, error) {
	want, err := aliased(api.StageHeader, c.GetHeader(api.StageHeader), api.StageHeaderAlias, c.GetHeader(api.StageHeaderAlias))
	if err != nil {
		return "", err
	}
	if want == "" {
		return *s.stage.Load(), nil
	}
	if err := s.checkAdmin(c); err != nil {
		return "", err
	}
	return want, checkStage(want, svc)
}

func checkStage(name string, svc *inventory.Service) error {
	if !inventory.ValidStage(name) {
		return fmt.Errorf("%w %q; want one of %s", inventory.ErrUnknownStage, name, strings.Join(inventory.Stages, ", "))
	}
	if !svc.HasStage(name) {
		return errStageDisabled
	}
	return nil
}

// decodeJSON reads one JSON object into dst: application/json only, at most
// MaxBody bytes, no unknown fields, nothing after the object.
func decodeJSON(c *gin.Context, dst any) error {
	return decodeJSONUpTo(c, dst, MaxBody)
}

// decodeJSONUpTo is decodeJSON with a cap of its own.
func decodeJSONUpTo(c *gin.Context, dst any, limit int64) error {
	if err := checkMediaType(c); err != nil {
		return err
	}
	body, err := readBodyUpTo(c, limit)
	if err != nil {
		return err
	}
	return decodeBody(body, dst)
}

// checkMediaType refuses a body that is not application/json.
func checkMediaType(c *gin.Context) error {
	if ct := c.GetHeader("Content-Type"); ct != "application/json" {
		// Anything but the plain form (a charset, other case, spaces) is
		// parsed; the plain form needs no parsing.
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return errMediaType
		}
	}
	return nil
}

// readBody reads the request body, at most MaxBody bytes (errTooLarge past
// them, and the connection is not reused).
func readBody(c *gin.Context) ([]byte, error) { return readBodyUpTo(c, MaxBody) }

// readBodyUpTo is readBody with a cap of its own.
func readBodyUpTo(c *gin.Context, limit int64) ([]byte, error) {
	if c.Request.ContentLength > limit {
		return nil, errTooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, limit))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, errTooLarge
	case err != nil:
		return nil, errors.Join(errMalformed, err)
	}
	return body, nil
}

// decodeBody decodes one JSON object from body into dst: no unknown
// fields, nothing after the object.
func decodeBody(body []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return classifyDecodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.Join(errMalformed, errors.New("unexpected data after the JSON object"))
	}
	return nil
}

func classifyDecodeError(err error) error {
	var mbe *http.MaxBytesError
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &mbe):
		return errTooLarge
	case errors.As(err, &te) && te.Field == "":
		return errors.Join(errMalformed, errors.New("the body must be a JSON object"))
	case errors.As(err, &te):
		return fieldError("field %q must be %s", te.Field, jsonKind(te.Type.Kind().String()))
	case errors.As(err, &se), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return errors.Join(errMalformed, err)
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return errors.Join(errMalformed, err)
	}
	return errors.Join(errMalformed, err)
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int", "int64", "int32":
		return "an integer in range"
	case "string":
		return "a string"
	}
	return "of the documented type"
}

// pathID parses the :id path parameter as a positive integer.
func pathID(c *gin.Context) (int64, error) {
	raw := c.Param("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 {
		return 0, fieldError("id %q must be a positive integer", raw)
	}
	return id, nil
}

// stageHeaders holds one X-Seckill-Stage value per stage name, shared as
// instanceHeader is. Only names a service has reach it, so it stays small.
var stageHeaders sync.Map // string -> []string

func stageHeader(stage string) []string {
	if v, ok := stageHeaders.Load(stage); ok {
		return v.([]string)
	}
	v, _ := stageHeaders.LoadOrStore(stage, []string{stage})
	return v.([]string)
}

func jsonEncode(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// writeJSON answers v with the given status.
func (s *server) writeJSON(c *gin.Context, status int, v any) {
	c.Header("Content-Type", "application/json; charset=utf-8")
	c.Header("Cache-Control", "no-store")
	c.Status(status)
	if err := jsonEncode(c.Writer, v); err != nil {
		s.log.Debug("writing response failed", "err", err)
	}
}

// pidNamespace names the pid namespace this process runs in (see
// api.Info), or "" where /proc/self/ns/pid cannot be read.
func pidNamespace() string {
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	return ns
}

// processName is host/pid: which process serves an instance. Instances of
// one demo share it.
func processName() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}
