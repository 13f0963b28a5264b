package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/ratelimit"
	"github.com/seckill-lab/seckill/internal/room"
)

// Errors the HTTP layer itself detects.
var (
	errMalformed       = errors.New("malformed JSON body")
	errTooLarge        = errors.New("request body too large")
	errHeadersTooLarge = errors.New("request headers too large")
	errMediaType       = errors.New("unsupported content type")
	errUnauthorized    = errors.New("missing admin token")
	errForbidden       = errors.New("wrong admin token")
	errAdminDisabled   = errors.New("admin routes are disabled")
	errRouteNotFound   = errors.New("no such route")
	errMethod          = errors.New("method not allowed")
	errStageDisabled   = errors.New("stage not available on this instance")
	errNotReady        = errors.New("not ready")
	errNoRedis         = errors.New("no Redis keeps this instance's Idempotency-Key records")
	errIdemMissing     = errors.New("Idempotency-Key header required")
	errOrderNo         = errors.New("invalid order number")
	// errBurstInProgress is in burstmark.go.
)

// problemType is one row of the error table: which error, which status,
// and the stable problem type clients may switch on.
type problemType struct {
	err    error
	status int
	slug   string
	key    keyRule // what the answer does to its Idempotency-Key
	title  string
	about  string // served at /problems/<slug>
}

// keyRule is what an answer does to the Idempotency-Key it ran under (see
// idempotent).
type keyRule int

const (
	// keyStore: a final answer, stored and replayed to every retry.
	keyStore keyRule = iota
	// keyLetGo: a refusal that took nothing (sold out, already bought):
	// the key is let go, so a retry runs afresh, and may buy after a
	// restock.
	keyLetGo
	// keyRetry: "not now", with nothing written: let go like keyLetGo,
	// unless the request's deadline passed or its client left (then
	// keyUnknown: a cut-off backend call may have taken effect).
	keyRetry
	// keyUnknown: the answer may hide a write (a deadline, a failure): a
	// retry with the key must first learn what happened.
	keyUnknown
)

// keyRuleKey is where writeError leaves the keyRule of its answer.
const keyRuleKey = "seckill.keyRule"

// problemTable maps every error a handler can return to its answer. The
// first row whose error matches (errors.Is) wins; anything else is a 500.
var problemTable = []problemType{
	// The waiting room's (room.go), first: none wraps another row's error.
	{room.ErrNoRoom, 404, "room-not-found", keyStore, "No waiting room", "This product's sale has no waiting room: buy it directly."},
	{room.ErrMalformed, 400, "room-token-malformed", keyStore, "Malformed room token", "The ticket or pass is not one this API issues, or a pass was sent where a ticket goes (or back)."},
	{room.ErrForged, 403, "room-token-forged", keyStore, "Forged room token", "The ticket or pass is not signed by any of the fleet's room keys (SECKILL_ROOM_KEYS)."},
	{room.ErrExpired, 403, "room-token-expired", keyStore, "Room token expired", "The pass was not spent within its validity (pass_ttl_ms from its place's admission), the turn of the ticket's place passed unused, or the room was set again since the ticket was given: join again."},
	{room.ErrWrongItem, 403, "room-token-wrong-item", keyStore, "Room token for another item", "The ticket or pass was given for another product's room."},
	{room.ErrWrongBuyer, 403, "room-token-wrong-buyer", keyStore, "Room token for another buyer", "The ticket or pass was given to another user_id."},
	{errPassRequired, 403, "pass-required", keyStore, "Pass required", "This product's sale has a waiting room: join it (the Link header names the route), poll the ticket until it answers a pass, and send the pass in X-Seckill-Pass."},
	{room.ErrSpent, 409, "pass-spent", keyStore, "Pass already spent", "The pass was spent by an earlier buy. A retry of that buy with its Idempotency-Key hears that buy's answer."},
	{room.ErrUnavailable, 503, "unavailable", keyRetry, "Backend unavailable", "The database or Redis could not be reached; nothing was written. Retry."},
	{inventory.ErrInvalid, 400, "invalid-request", keyStore, "Invalid request", "A field is missing, out of range or of the wrong type; detail names it."},
	{errMalformed, 400, "malformed-json", keyStore, "Malformed JSON", "The body is not a single JSON object of the documented shape; unknown fields are rejected."},
	{inventory.ErrUnknownStage, 400, "unknown-stage", keyStore, "Unknown stage", "The stage is not one of " + strings.Join(inventory.Stages, ", ") + "."},
	{errStageDisabled, 400, "stage-unavailable", keyStore, "Stage unavailable", "This instance was started without the backend that stage needs (for example no Redis for redis-lock)."},
	{errOrderNo, 400, "invalid-order-number", keyStore, "Invalid order number", "An order number is 1 to 40 ASCII letters, digits, hyphens and underscores, as a buy answered it."},
	{errIdemMissing, 400, "idempotency-key-required", keyStore, "Idempotency-Key required", "This server requires an Idempotency-Key header on buys, grabs and payments (SECKILL_REQUIRE_IDEMPOTENCY_KEY)."},
	{idempotency.ErrInvalidKey, 400, "idempotency-key-invalid", keyStore, "Invalid Idempotency-Key", "An Idempotency-Key is 1 to 255 visible ASCII characters."},
	{errUnauthorized, 401, "unauthorized", keyStore, "Admin token required", "Send Authorization: Bearer <SECKILL_ADMIN_TOKEN>."},
	{errForbidden, 403, "forbidden", keyStore, "Wrong admin token", "The bearer token does not match SECKILL_ADMIN_TOKEN."},
	{errAdminDisabled, 404, "admin-disabled", keyStore, "Admin routes disabled", "Admin routes are off because SECKILL_ADMIN_TOKEN is not set."},
	{inventory.ErrNotFound, 404, "not-found", keyStore, "Not found", "No product or coupon batch has this id."},
	{inventory.ErrOrderNotFound, 404, "order-not-found", keyStore, "Order not found", "No order has this number (an order accepted by redis-stream is found as soon as it is accepted; one lost with a Redis that restarted empty is not)."},
	{errNoRedis, 404, "no-redis", keyStore, "No Redis", "This instance runs without Redis (no SECKILL_REDIS_ADDR): it keeps no Idempotency-Key records, and the Redis stages are off."},
	{errRouteNotFound, 404, "route-not-found", keyStore, "No such route", "See docs/api.md for the API."},
	{errMethod, 405, "method-not-allowed", keyStore, "Method not allowed", "The route exists but not with this method; the Allow header lists its methods."},
	// Outside the sale window: the item's state refuses the buy, as sold
	// out does (docs/api.md says why 409). First, as the window comes
	// before the sell-out. Nothing was taken: the key is let go, so a
	// retry after the opening buys.
	{inventory.ErrSaleNotOpen, 409, "sale-not-open", keyLetGo, "Sale not open yet", "The item's sale window has not opened by the server's reference clock; Retry-After says in how many seconds it opens (GET the item for opens_at and server_time)."},
	{inventory.ErrSaleClosed, 409, "sale-closed", keyLetGo, "Sale closed", "The item's sale window closed by the server's reference clock; nothing is sold until an admin reset opens it again."},
	{inventory.ErrSoldOut, 409, "sold-out", keyLetGo, "Sold out", "Not enough stock is left for this quantity."},
	{inventory.ErrAlreadyPurchased, 409, "already-purchased", keyLetGo, "Already purchased", "Each user may buy a product (or grab a coupon batch) once."},
	{inventory.ErrOrderCancelled, 409, "order-cancelled", keyStore, "Order cancelled", "The order was not paid within the payment window (SECKILL_PAYMENT_TIMEOUT): it is cancelled and its units are back in stock."},
	{inventory.ErrOrderFailed, 409, "order-failed", keyStore, "Order failed", "The order was accepted but could not be written (for example the database had no stock left for it): nothing was sold and its units went back. GET the order for the reason."},
	{inventory.ErrOrderPending, 409, "order-pending", keyRetry, "Order not written yet", "The order was accepted and is waiting in the queue to be written; retry after the Retry-After delay."},
	{errBurstInProgress, 409, "burst-in-progress", keyStore, "Burst in progress", "A burst of this item (from the dashboard or `seckill story`) is in flight on an instance of the fleet: a second burst, or a reset, of the item would mix its buyers into that burst's numbers. Nothing was fired or written; try again when it has ended (a burst whose instance died frees the item within 30 s)."},
	{inventory.ErrArchived, 409, "archived", keyStore, "Item archived", "This id belongs to an archived product or coupon batch, whose orders are kept under it: no new item may take it. Create the item under another id."},
	{idempotency.ErrInFlight, 409, "idempotency-in-flight", keyRetry, "Request in flight", "The first request with this Idempotency-Key has not finished; retry later to get its answer."},
	{errTooLarge, 413, "body-too-large", keyStore, "Body too large", "Request bodies are capped at 64 KiB, a session's at 256 KiB."},
	{errHeadersTooLarge, 431, "headers-too-large", keyStore, "Headers too large", "The request line and headers are capped at 32 KiB."},
	{errMediaType, 415, "unsupported-media-type", keyStore, "Unsupported media type", "Send Content-Type: application/json."},
	{idempotency.ErrMismatch, 422, "idempotency-mismatch", keyStore, "Idempotency-Key reused", "This Idempotency-Key was first used, by this user on this route, with a different body."},
	// A write that may have landed says so, before anything else its
	// error carries: the store's error for a write cut off on its way
	// also wraps the deadline (or the broken connection, or the lost
	// lock) that cut it, and a buyer whose order committed must not hear
	// "timeout", which promises that nothing was bought.
	{inventory.ErrRestockIncomplete, 503, "restock-incomplete", keyRetry, "Restock not everywhere yet", "The reset, session or replace is written in the database, but a Redis copy of an item's stock could not be reloaded, or the fleet could not be told: an instance may still sell from the old stock or answer sold out. Send the same request again: it writes the same again (a reset also deletes any orders taken since) and reloads the copies."},
	{inventory.ErrOutcomeUnknown, 503, "outcome-unknown", keyUnknown, "Outcome unknown", "The write was sent but its answer did not come back (the request's deadline passed while it was on its way, the connection to the database broke during the commit, or the lock was lost while the write was on its way): it may have taken effect. GET the order, or retry with the same Idempotency-Key, which finds it first."},
	{ratelimit.ErrLimited, 429, "rate-limited", keyRetry, "Too many requests", "This buyer (its account, or its address when the instance limits addresses) sent more than its rate allows (SECKILL_RATE_INTERVAL and SECKILL_RATE_BURST, or PUT /api/v1/admin/rate-limit); nothing was written. Retry after the Retry-After delay."},
	{inventory.ErrLockTimeout, 429, "lock-timeout", keyRetry, "Lock wait timed out", "Too many buyers queue for this item's lock; retry after the Retry-After delay."},
	{inventory.ErrOverloaded, 503, "overloaded", keyRetry, "Overloaded", "Too many buyers arrived at once for this instance or its database; nothing was written. Retry after the Retry-After delay."},
	{inventory.ErrLockLost, 503, "lock-lost", keyRetry, "Lock lost", "The lock expired before the stock write, or a reset or a cancelled order changed the stock under it, and the fencing token rejected the write; nothing was written. Retry."},
	{inventory.ErrUnavailable, 503, "unavailable", keyRetry, "Backend unavailable", "The database or Redis could not be reached; nothing was written. Retry."},
	{idempotency.ErrUnavailable, 503, "unavailable", keyRetry, "Backend unavailable", "The database or Redis could not be reached; nothing was written. Retry."},
	{errNotReady, 503, "not-ready", keyRetry, "Not ready", "A backend this instance needs is not reachable."},
	{context.Canceled, 503, "cancelled", keyUnknown, "Request cancelled", "The server is shutting down (or the client went away) before the request finished; its outcome may be unknown. Retry with the same Idempotency-Key."},
	{context.DeadlineExceeded, 503, "timeout", keyUnknown, "Timed out", "The request did not finish within its deadline. A buy or grab timed out before its sale's write could commit (it waited for a connection, a lock or its turn): it bought nothing; one whose write was already on its way is answered outcome-unknown instead. Retry with the same Idempotency-Key, which still looks first for what the earlier run did."},
}

// saysWhen reports whether answers of this type carry Retry-After: every
// answer that means "not now" says when to come back.
func (p problemType) saysWhen() bool {
	return p.status == http.StatusTooManyRequests || p.status == http.StatusServiceUnavailable || p.err == idempotency.ErrInFlight || p.err == inventory.ErrOrderPending ||
		p.err == inventory.ErrSaleNotOpen
}

var internalProblem = problemType{nil, 500, "internal", keyUnknown, "Internal error", "Something unexpected failed; see the server log."}

// proxyProblems are answered by the proxy in front of the instances in
// docker-compose.yml (deploy/nginx.conf serves them from deploy/problems/),
// never by an instance; every instance documents them at /problems/{slug}
// like its own, so a client that follows a proxy answer's type learns
// what it means.
var proxyProblems = []problemType{
	{nil, 502, "bad-gateway", keyUnknown, "Bad gateway", "The proxy in front of the instances got no usable answer from any of them (none was up, or the one it asked broke the connection). A buy that reached an instance may have taken effect: retry with the same Idempotency-Key, which finds it first."},
	{nil, 504, "gateway-timeout", keyUnknown, "Gateway timeout", "The proxy in front of the instances gave up waiting for an instance's answer. The buy may have taken effect: retry with the same Idempotency-Key, which finds it first."},
}

// documentedProblems are every problem type /problems/{slug} explains,
// sorted by slug: the error table's, the internal error's and the proxy's.
func documentedProblems() []problemType {
	all := slices.Concat(problemTable, []problemType{internalProblem}, proxyProblems)
	sort.SliceStable(all, func(i, j int) bool { return all[i].slug < all[j].slug })
	return all
}

// ProblemDoc returns what GET /problems/{slug} answers a JSON client, and
// whether the type exists.
func ProblemDoc(slug string) (api.Problem, bool) {
	for _, p := range documentedProblems() {
		if p.slug == slug {
			return api.Problem{Type: api.ProblemTypePrefix + p.slug, Title: p.title, Status: p.status, Detail: p.about}, true
		}
	}
	return api.Problem{}, false
}

func lookupProblem(err error) problemType {
	for _, p := range problemTable {
		if errors.Is(err, p.err) {
			return p
		}
	}
	return internalProblem
}

// writeError answers err as application/problem+json. Unknown errors are
// logged here, once, and answered 500 without their text.
func (s *server) writeError(c *gin.Context, err error) {
	p := lookupProblem(err)
	if cerr := c.Request.Context().Err(); p.status == http.StatusInternalServerError && cerr != nil && !errors.Is(err, errPanic) {
		// The request's deadline (or the client leaving) cut a backend call
		// short, and the driver said so in its own words (the embedded
		// SQLite says "interrupted"): that is the deadline's answer.
		err = fmt.Errorf("%w (backend reported: %w)", cerr, err)
		p = lookupProblem(err)
	}
	// Only the errors that describe the caller's own input carry their text;
	// the others get the table's sentence, so no driver message leaks out.
	detail := p.about
	switch p.slug {
	case "invalid-request", "malformed-json", "unknown-stage", "idempotency-key-invalid", "invalid-order-number":
		detail = err.Error()
	case "internal":
		s.log.Error("request failed", "method", c.Request.Method, "path", c.Request.URL.Path, "err", err)
	default:
		// Refusals are most of a flash crowd's answers: their log line's
		// arguments are not even built unless it is written.
		if s.log.Enabled(c.Request.Context(), slog.LevelDebug) {
			s.log.Debug("request refused", "path", c.Request.URL.Path, "problem", p.slug, "err", err)
		}
	}
	if p.saysWhen() {
		c.Header("Retry-After", strconv.Itoa(s.retryAfter(err, p)))
	}
	c.Set(problemKey, p.slug)
	c.Set(keyRuleKey, p.key)
	body := api.Problem{Type: api.ProblemTypePrefix + p.slug, Title: p.title, Status: p.status, Detail: detail, Instance: c.Request.URL.Path}
	// Set straight into the map, under keys already canonical: a refusal
	// is most of a crowd's answers. The value slices are shared and never
	// written to (Header.Add on one allocates a new slice).
	h := c.Writer.Header()
	h["Content-Type"], h["Cache-Control"] = problemJSON, noStore
	c.Status(p.status)
	buf := answerBufs.Get().(*[]byte)
	*buf = appendProblem((*buf)[:0], body)
	if _, err := c.Writer.Write(*buf); err != nil {
		s.log.Debug("writing problem failed", "err", err)
	}
	if cap(*buf) <= 64<<10 {
		answerBufs.Put(buf)
	}
	c.Abort()
}

// The header values of every problem answer, shared (see writeError).
var (
	problemJSON = []string{"application/problem+json"}
	noStore     = []string{"no-store"}
)

// answerBufs are the buffers problem answers are written from.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// maxRetryAfter bounds what Retry-After says: past it the number means
// "much later", which a buyer of a flash sale never wants to hear.
const maxRetryAfter = 30

// retryAfter is the Retry-After of a "not now" answer, in whole seconds
// (at least 1, at most maxRetryAfter):
//   - a buyer turned away by the per-item cap: the time one buyer of the
//     item has lately spent inside the stage, queueing included
//     (admission.Busy), which is when a place is expected to free up;
//   - a duplicate of an Idempotency-Key whose first request still runs:
//     the request timeout, within which that request has its answer;
//   - anything else (a lock wait that ran out, a backend that failed or
//     was slow, an order still in the queue): 1, since none of them says
//     how long it will last.
//
// A sale not open yet says the seconds until the opening by the reference
// clock, rounded up, at least 1 and without the cap: that wait is known.
func (s *server) retryAfter(err error, p problemType) int {
	var early *inventory.NotOpen
	if errors.As(err, &early) {
		return max(int((early.Wait+time.Second-1)/time.Second), 1)
	}
	var wait time.Duration
	var hint interface{ RetryAfter() time.Duration }
	switch {
	case errors.As(err, &hint):
		wait = hint.RetryAfter()
	case p.err == idempotency.ErrInFlight:
		wait = s.requestTimeout
	}
	secs := int((wait + time.Second - 1) / time.Second)
	return min(max(secs, 1), maxRetryAfter)
}

// problemDocs explains a problem type: as application/problem+json (the
// type's title and status, with its explanation as the detail) to a client
// that accepts JSON, as plain text to anyone else. An unknown type is a 404
// route-not-found problem.
func (s *server) problemDocs(c *gin.Context) {
	slug := c.Param("slug")
	for _, p := range documentedProblems() {
		if p.slug != slug {
			continue
		}
		if strings.Contains(c.GetHeader("Accept"), "json") {
			c.Header("Content-Type", "application/problem+json")
			c.Status(http.StatusOK)
			body := api.Problem{Type: api.ProblemTypePrefix + p.slug, Title: p.title, Status: p.status, Detail: p.about}
			if err := jsonEncode(c.Writer, body); err != nil {
				s.log.Debug("writing problem docs failed", "err", err)
			}
			return
		}
		c.String(http.StatusOK, "%s (HTTP %d)\n\n%s\n", p.title, p.status, p.about)
		return
	}
	s.writeError(c, fmt.Errorf("%w: no problem type %q", errRouteNotFound, slug))
}

// fieldError reports a bad field as an invalid request.
func fieldError(format string, args ...any) error {
	return fmt.Errorf("%w: %s", inventory.ErrInvalid, fmt.Sprintf(format, args...))
}
