package httpapi

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
)

// This file generates internal/api/openapi.json, the API's published
// contract. What can drift is derived, not copied: the schemas are
// reflected from the Go types the handlers encode and decode (their JSON
// names, types, and omitempty as "not required"), their descriptions are
// the types' doc comments, and each problem answer's status, type and
// Retry-After come from the error table (errors.go). What reflection
// cannot know (which operations exist, what each can answer, bounds and
// enums) is the table below. TestOpenAPIFileIsGenerated fails while the
// committed file differs from what this generates; run
// `go generate ./internal/api` to rewrite it.

var updateOpenAPI = flag.Bool("update-openapi", false, "rewrite internal/api/openapi.json")

const openAPIFile = "../api/openapi.json"

func TestOpenAPIFileIsGenerated(t *testing.T) {
	want, err := openAPIDocument()
	if err != nil {
		t.Fatal(err)
	}
	if *updateOpenAPI {
		if err := os.WriteFile(openAPIFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(api.OpenAPI, want) {
		got, gen := strings.Split(string(api.OpenAPI), "\n"), strings.Split(string(want), "\n")
		line := 0
		for line < min(len(got), len(gen)) && got[line] == gen[line] {
			line++
		}
		t.Errorf("internal/api/openapi.json is not what the code generates (first difference at line %d): run `go generate ./internal/api` and commit it", line+1)
	}
}

// TestOpenAPIListsEveryProblemType fails when a row of the error table is
// answered by no operation of the document, so a new problem type cannot
// stay out of the contract.
func TestOpenAPIListsEveryProblemType(t *testing.T) {
	used := map[string]bool{"internal": true, "route-not-found": true, "method-not-allowed": true, "headers-too-large": true}
	for _, op := range openAPIOps() {
		for _, slug := range op.problems {
			used[slug] = true
		}
	}
	for _, p := range problemTable {
		if !used[p.slug] {
			t.Errorf("no operation of the OpenAPI document answers the problem type %q: add it to openAPIOps", p.slug)
		}
	}
}

// opSpec is one operation of the document.
type opSpec struct {
	method, path, id, summary string
	tag                       string
	admin                     bool
	// body is the Go type the handler decodes the request body into (nil:
	// none); bodyOptional says the body may be left out.
	body         any
	bodyName     string
	bodyOptional bool
	bodyExample  string
	// answers are the successful answers: status to the Go type encoded
	// (a string: raw content, see rawContent).
	answers map[int]any
	// headers are the answer headers of the operation (see answerHeaders).
	headers []string
	// problems are the problem types the operation can answer.
	problems []string
	// stageHeader says the request may name its stage with
	// X-Seckill-Stage; idempotencyKey that it honours an Idempotency-Key.
	stageHeader, idempotencyKey bool
	// passHeader says the request may carry a waiting room's pass.
	passHeader bool
	// query are the query parameters of the operation (see pageParams).
	query []obj
}

// pageParams are the query parameters of a list: a page at a time, by id.
func pageParams() []obj {
	var states []any
	for _, s := range inventory.SaleStates {
		states = append(states, s)
	}
	return []obj{
		{"name": "limit", "in": "query", "required": false, "description": "How many items the page holds at most.",
			"schema": obj{"type": "integer", "minimum": 1, "maximum": maxPageLimit, "default": defaultPageLimit}},
		{"name": "cursor", "in": "query", "required": false, "description": "The next_cursor of the previous page; left out for the first page. Opaque.",
			"schema": obj{"type": "string"}},
		{"name": "state", "in": "query", "required": false,
			"description": "Only the items in this sale state by the reference clock: scheduled (before the window), open (in it, with stock), sold-out (in it, without), closed (past it). An item that changes state during a walk may be missed by it.",
			"schema":      obj{"type": "string", "enum": states}},
	}
}

// Problem types grouped the way operations share them.
var (
	backendProblems = []string{"unavailable", "timeout", "cancelled"}
	// commitProblems are the answers of a write whose commit's answer was
	// lost.
	commitProblems = []string{"outcome-unknown"}
	adminProblems  = []string{"unauthorized", "forbidden", "admin-disabled"}
	bodyProblems   = []string{"invalid-request", "malformed-json", "body-too-large", "unsupported-media-type"}
	keyProblems    = []string{"idempotency-key-required", "idempotency-key-invalid", "idempotency-in-flight", "idempotency-mismatch"}
	stageProblems  = []string{"unknown-stage", "stage-unavailable"}
	// passProblems are a buy's answers for its waiting room's pass.
	passProblems = []string{"pass-required", "pass-spent", "room-token-malformed", "room-token-forged", "room-token-expired", "room-token-wrong-item", "room-token-wrong-buyer"}
)

func join(lists ...[]string) []string { return slices.Concat(lists...) }

// stageRequest is the body of the stage switches as documented: "mode",
// its former name, is still read (stageBody) but no longer documented.
type stageRequest struct {
	Stage string `json:"stage"`
}

// Raw contents of answers that are not JSON of a Go type.
const (
	rawText       = "text/plain"
	rawPprof      = "pprof"
	rawLabFile    = "lab file"
	rawOpenAPI    = "openapi"
	rawProblemDoc = "problem doc"
)

// openAPIOps lists every operation of the API, in the order of the API
// table of docs/api.md.
func openAPIOps() []opSpec {
	buyHeaders := []string{api.InstanceHeader, api.StageHeader, "Idempotent-Replayed"}
	return []opSpec{
		{method: "GET", path: "/healthz", id: "health", tag: "probes", summary: "The process is up.",
			answers: map[int]any{200: api.Health{}}, problems: []string{"internal"}},
		{method: "GET", path: "/readyz", id: "ready", tag: "probes", summary: "The database and Redis answer.",
			answers: map[int]any{200: api.Health{}}, problems: []string{"not-ready", "internal"}},
		{method: "GET", path: "/problems/{slug}", id: "problemType", tag: "problems",
			summary: "What a problem type means: application/problem+json to a client that accepts JSON, plain text otherwise.",
			answers: map[int]any{200: rawProblemDoc}, problems: []string{"route-not-found", "internal"}},
		{method: "GET", path: "/api/v1/info", id: "info", tag: "instance", summary: "This instance: its default stage and the stages it can run.",
			answers: map[int]any{200: api.Info{}}, problems: []string{"internal"}},
		{method: "GET", path: "/api/v1/openapi.json", id: "openapi", tag: "instance", summary: "This document.",
			answers: map[int]any{200: rawOpenAPI}, problems: []string{"internal"}},
		{method: "GET", path: "/api/v1/products", id: "listProducts", tag: "products", summary: "One page of the products, by id; next_cursor asks for the next.",
			query: pageParams(), answers: map[int]any{200: api.Products{}}, problems: join([]string{"invalid-request"}, backendProblems, []string{"internal"})},
		{method: "GET", path: "/api/v1/products/{id}", id: "getProduct", tag: "products", summary: "One product.",
			answers: map[int]any{200: api.Product{}}, problems: join([]string{"invalid-request", "not-found"}, backendProblems, []string{"internal"})},
		{method: "POST", path: "/api/v1/products/{id}/buy", id: "buy", tag: "products",
			summary: "Buy a product: 201 with the order written, or 202 with the order accepted and written soon (redis-stream).",
			body:    buyBody{}, bodyName: "BuyRequest", bodyExample: `{"user_id":"alice","quantity":1}`,
			answers: map[int]any{201: api.Order{}, 202: api.Order{}},
			headers: buyHeaders, stageHeader: true, idempotencyKey: true, passHeader: true,
			problems: join(bodyProblems, stageProblems, keyProblems, adminProblems, []string{"not-found", "sale-not-open", "sale-closed", "sold-out", "already-purchased", "rate-limited", "lock-timeout", "overloaded", "lock-lost"}, passProblems, backendProblems, commitProblems, []string{"internal"})},
		{method: "GET", path: "/api/v1/products/{id}/room", id: "getRoom", tag: "rooms", summary: "The product's waiting room: its settings, length, admission and oldest wait.",
			answers: map[int]any{200: api.Room{}}, problems: join([]string{"invalid-request", "room-not-found"}, backendProblems, []string{"internal"})},
		{method: "POST", path: "/api/v1/products/{id}/room/join", id: "joinRoom", tag: "rooms",
			summary: "Join the product's waiting room: a signed ticket with its place; Retry-After and poll_after_ms say when to poll.",
			body:    api.RoomJoin{}, bodyName: "RoomJoinRequest", bodyExample: `{"user_id":"alice"}`,
			answers: map[int]any{201: api.RoomTicket{}}, headers: []string{"Retry-After"},
			problems: join(bodyProblems, []string{"room-not-found", "rate-limited"}, backendProblems, []string{"internal"})},
		{method: "POST", path: "/api/v1/products/{id}/room/poll", id: "pollRoom", tag: "rooms",
			summary: "Poll a ticket: waiting (position, estimated wait), admitted (with a pass), or sold-out; answered from the instance's memory of the room.",
			body:    api.RoomPoll{}, bodyName: "RoomPollRequest", bodyExample: `{"user_id":"alice","ticket":"r1.k1.VAABAg.AAAA"}`,
			answers: map[int]any{200: api.RoomStatus{}}, headers: []string{"Retry-After"},
			problems: join(bodyProblems, []string{"room-not-found", "rate-limited", "room-token-malformed", "room-token-forged", "room-token-expired", "room-token-wrong-item", "room-token-wrong-buyer"}, backendProblems, []string{"internal"})},
		{method: "GET", path: "/api/v1/products/{id}/audit", id: "auditProduct", tag: "products", summary: "Does what left the product's stock match what was sold?",
			answers: map[int]any{200: api.Audit{}}, problems: join([]string{"invalid-request", "not-found"}, backendProblems, []string{"internal"})},
		{method: "GET", path: "/api/v1/orders/{order_no}", id: "getOrder", tag: "orders", summary: "An order of any stage, or a coupon grab.",
			answers: map[int]any{200: api.OrderStatus{}}, headers: []string{"X-Seckill-Instance"},
			problems: join([]string{"invalid-order-number", "order-not-found"}, backendProblems, []string{"internal"})},
		{method: "POST", path: "/api/v1/orders/{order_no}/pay", id: "pay", tag: "orders",
			summary: "Pay an order; paying again answers the same. A coupon grab is free (400 invalid-request).",
			body:    payBody{}, bodyName: "PayRequest", bodyOptional: true, bodyExample: `{"user_id":"alice"}`,
			answers: map[int]any{200: api.OrderStatus{}}, headers: []string{"X-Seckill-Instance", "Idempotent-Replayed"}, idempotencyKey: true,
			problems: join(bodyProblems, keyProblems, []string{"invalid-order-number", "order-not-found", "order-cancelled", "order-failed", "order-pending"}, backendProblems, commitProblems, []string{"internal"})},
		{method: "GET", path: "/api/v1/coupons", id: "listCoupons", tag: "coupons", summary: "One page of the coupon batches, by id; next_cursor asks for the next.",
			query: pageParams(), answers: map[int]any{200: api.Coupons{}}, problems: join([]string{"invalid-request"}, backendProblems, []string{"internal"})},
		{method: "GET", path: "/api/v1/coupons/{id}", id: "getCoupon", tag: "coupons", summary: "One coupon batch.",
			answers: map[int]any{200: api.Coupon{}}, problems: join([]string{"invalid-request", "not-found"}, backendProblems, []string{"internal"})},
		{method: "POST", path: "/api/v1/coupons/{id}/grab", id: "grab", tag: "coupons",
			summary: "Grab a coupon (one per user per batch): 201 written, or 202 accepted (redis-stream).",
			body:    grabBody{}, bodyName: "GrabRequest", bodyExample: `{"user_id":"alice"}`,
			answers: map[int]any{201: api.Grab{}, 202: api.Grab{}},
			headers: buyHeaders, stageHeader: true, idempotencyKey: true,
			problems: join(bodyProblems, stageProblems, keyProblems, adminProblems, []string{"not-found", "sale-not-open", "sale-closed", "sold-out", "already-purchased", "rate-limited", "lock-timeout", "overloaded", "lock-lost"}, backendProblems, commitProblems, []string{"internal"})},
		{method: "GET", path: "/api/v1/coupons/{id}/audit", id: "auditCoupon", tag: "coupons", summary: "Does what left the batch match what was grabbed?",
			answers: map[int]any{200: api.Audit{}}, problems: join([]string{"invalid-request", "not-found"}, backendProblems, []string{"internal"})},
		{method: "GET", path: "/api/v1/fleet", id: "fleet", tag: "dashboard", summary: "Every instance of the fleet (SECKILL_PEERS) with its health and stage.",
			answers: map[int]any{200: api.Fleet{}}, problems: []string{"internal"}},
		{method: "POST", path: "/api/v1/admin/products/{id}/reset", id: "resetProduct", tag: "admin", admin: true,
			summary: "Delete the product's orders and set its initial stock and stock.",
			body:    resetBody{}, bodyName: "ResetRequest", bodyExample: `{"stock":100}`,
			answers: map[int]any{200: api.Product{}}, problems: join(adminProblems, bodyProblems, []string{"not-found", "burst-in-progress"}, backendProblems, commitProblems, []string{"restock-incomplete", "internal"})},
		{method: "POST", path: "/api/v1/admin/coupons/{id}/reset", id: "resetCoupon", tag: "admin", admin: true,
			summary: "Delete the batch's grabs and set its total and remaining.",
			body:    resetBody{}, bodyName: "ResetRequest", bodyExample: `{"stock":100}`,
			answers: map[int]any{200: api.Coupon{}}, problems: join(adminProblems, bodyProblems, []string{"not-found", "burst-in-progress"}, backendProblems, commitProblems, []string{"restock-incomplete", "internal"})},
		{method: "PUT", path: "/api/v1/admin/products/{id}", id: "putProduct", tag: "admin", admin: true,
			summary: "Create (201) or replace (200) a product by id; the same body twice leaves the same product. A replaced product keeps its orders and window.",
			body:    productBody{}, bodyName: "ProductRequest", bodyExample: `{"name":"Kettle","price_cents":2500,"stock":100}`,
			answers: map[int]any{200: api.Product{}, 201: api.Product{}}, problems: join(adminProblems, bodyProblems, []string{"archived", "burst-in-progress"}, backendProblems, commitProblems, []string{"restock-incomplete", "internal"})},
		{method: "POST", path: "/api/v1/admin/products/{id}/archive", id: "archiveProduct", tag: "admin", admin: true,
			summary: "Archive a product: buyers get 404 from then on, its orders are kept. Again: the same answer.",
			answers: map[int]any{200: api.Archived{}}, problems: join(adminProblems, []string{"invalid-request", "not-found", "burst-in-progress"}, backendProblems, commitProblems, []string{"internal"})},
		{method: "PUT", path: "/api/v1/admin/coupons/{id}", id: "putCoupon", tag: "admin", admin: true,
			summary: "Create (201) or replace (200) a coupon batch by id; the same body twice leaves the same batch. A replaced batch keeps its grabs and window.",
			body:    couponBody{}, bodyName: "CouponRequest", bodyExample: `{"name":"10 off 100","total":500}`,
			answers: map[int]any{200: api.Coupon{}, 201: api.Coupon{}}, problems: join(adminProblems, bodyProblems, []string{"archived", "burst-in-progress"}, backendProblems, commitProblems, []string{"restock-incomplete", "internal"})},
		{method: "POST", path: "/api/v1/admin/coupons/{id}/archive", id: "archiveCoupon", tag: "admin", admin: true,
			summary: "Archive a coupon batch: grabbers get 404 from then on, its grabs are kept. Again: the same answer.",
			answers: map[int]any{200: api.Archived{}}, problems: join(adminProblems, []string{"invalid-request", "not-found", "burst-in-progress"}, backendProblems, commitProblems, []string{"internal"})},
		{method: "POST", path: "/api/v1/admin/sessions", id: "scheduleSession", tag: "admin", admin: true,
			summary: "Schedule a session: up to 1000 items of one kind, each restocked with its orders deleted, all on sale in one window; all or none. Answers once every instance sells them.",
			body:    sessionBody{}, bodyName: "SessionRequest", bodyExample: `{"kind":"product","opens_at":"2030-01-01T10:00:00Z","closes_at":"2030-01-01T11:00:00Z","items":[{"id":1,"stock":100},{"id":2,"stock":50}]}`,
			answers: map[int]any{200: api.Session{}}, problems: join(adminProblems, bodyProblems, []string{"burst-in-progress"}, backendProblems, commitProblems, []string{"restock-incomplete", "internal"})},
		{method: "PUT", path: "/api/v1/admin/products/{id}/room", id: "setRoom", tag: "admin", admin: true,
			summary: "Set (or replace) the product's waiting room: a new, empty room; the old one's tickets and passes are expired.",
			body:    api.RoomSettings{}, bodyName: "RoomSettingsRequest", bodyExample: `{"passes_per_second":50,"max_inside":100,"shuffle_ms":1000,"pass_ttl_ms":30000}`,
			answers: map[int]any{200: api.Room{}}, problems: join(adminProblems, bodyProblems, []string{"not-found"}, backendProblems, []string{"internal"})},
		{method: "DELETE", path: "/api/v1/admin/products/{id}/room", id: "removeRoom", tag: "admin", admin: true,
			summary: "Remove the product's waiting room: its buys need no pass again.",
			answers: map[int]any{200: api.RoomRemoved{}}, problems: join(adminProblems, []string{"invalid-request"}, backendProblems, []string{"internal"})},
		{method: "PUT", path: "/api/v1/admin/stage", id: "setStage", tag: "admin", admin: true,
			summary: "The default stage of this instance only.",
			body:    stageRequest{}, bodyName: "StageRequest", bodyExample: `{"stage":"redis-lock"}`,
			answers: map[int]any{200: api.StageChange{}}, problems: join(adminProblems, bodyProblems, stageProblems, []string{"internal"})},
		{method: "PUT", path: "/api/v1/admin/fleet/stage", id: "setFleetStage", tag: "admin", admin: true,
			summary: "The default stage of every instance: 200 when all switched, 502 with each one's answer when any did not.",
			body:    stageRequest{}, bodyName: "StageRequest", bodyExample: `{"stage":"redis-lock"}`,
			answers: map[int]any{200: api.FleetStageChange{}, 502: api.FleetStageChange{}}, problems: join(adminProblems, bodyProblems, stageProblems, []string{"internal"})},
		{method: "POST", path: "/api/v1/admin/burst", id: "burst", tag: "admin", admin: true,
			summary: "The dashboard's burst: n buys (or grabs) fired at once across the fleet, one new user each; records the burst's verdict.",
			body:    api.BurstRequest{}, bodyName: "BurstRequestBody", bodyExample: `{"kind":"product","item_id":1,"n":200}`,
			answers: map[int]any{200: api.BurstResult{}}, problems: join(adminProblems, bodyProblems, stageProblems, []string{"burst-in-progress"}, backendProblems, []string{"internal"})},
		{method: "GET", path: "/api/v1/lab/latest", id: "labLatest", tag: "dashboard", summary: "The newest lab report, or a hint how to make one.",
			answers: map[int]any{200: api.LabLatest{}}, problems: []string{"internal"}},
		{method: "GET", path: "/api/v1/lab/runs/{run}/{file}", id: "labFile", tag: "dashboard", summary: "One file of a lab run.",
			answers: map[int]any{200: rawLabFile}, problems: []string{"route-not-found", "internal"}},
		{method: "GET", path: "/api/v1/admin/redis-ping", id: "redisPing", tag: "admin", admin: true,
			summary: "One round trip to the Redis of this instance's Idempotency-Key records.",
			answers: map[int]any{200: api.RedisPing{}}, problems: join(adminProblems, []string{"no-redis"}, backendProblems, []string{"internal"})},
		{method: "GET", path: "/api/v1/admin/rate-limit", id: "getRateLimit", tag: "admin", admin: true,
			summary: "This instance's rate limit of the safe stages' buys and grabs.",
			answers: map[int]any{200: api.RateLimit{}}, problems: join(adminProblems, []string{"no-redis", "internal"})},
		{method: "PUT", path: "/api/v1/admin/rate-limit", id: "setRateLimit", tag: "admin", admin: true,
			summary: "Change this instance's rate limit while it runs (interval_ms 0 turns it off); a field left out keeps its value.",
			body:    rateLimitBody{}, bodyName: "RateLimitRequest", bodyExample: `{"interval_ms":100,"burst":2,"by":["address"]}`,
			answers: map[int]any{200: api.RateLimit{}}, problems: join(adminProblems, bodyProblems, []string{"no-redis", "internal"})},
		{method: "GET", path: "/metrics", id: "metrics", tag: "instance", summary: "Prometheus metrics of this instance.",
			answers: map[int]any{200: rawText}, problems: []string{"internal"}},
		{method: "GET", path: "/debug/pprof/{name}", id: "pprof", tag: "admin", admin: true, summary: "Go's profiler; /debug/pprof/ lists the profiles.",
			answers: map[int]any{200: rawPprof}, problems: join(adminProblems, []string{"internal"})},
	}
}

// stageEnum is every stage name, in teaching order.
func stageEnum() []any {
	var out []any
	for _, s := range inventory.Stages {
		out = append(out, s)
	}
	return out
}

// fieldRules add what reflection cannot know to a field's schema, keyed
// by schema name and JSON name. Request bodies list their required fields
// here: their Go fields are pointers, checked by the handler.
func fieldRules() map[string]map[string]obj {
	stage := obj{"enum": stageEnum()}
	stages := obj{"items": obj{"type": "string", "enum": stageEnum()}}
	userID := obj{"minLength": 1, "maxLength": inventory.MaxUserID, "description": "The buyer: 1 to 64 characters of text without control characters, compared byte for byte."}
	kind := obj{"enum": []any{"product", "coupon"}}
	orderNo := obj{"minLength": 1, "maxLength": maxOrderNo, "pattern": "^[A-Za-z0-9_-]+$"}
	name := obj{"minLength": 1, "maxLength": inventory.MaxName, "description": "1 to 128 characters of text without control characters."}
	return map[string]map[string]obj{
		"Health":           {"status": {"enum": []any{"ok", "ready"}}},
		"Info":             {"stage": stage, "stages": stages},
		"Order":            {"stage": stage, "status": {"enum": []any{api.StatusConfirmed, api.StatusPending}}, "order_no": orderNo},
		"Grab":             {"stage": stage, "status": {"enum": []any{api.StatusConfirmed, api.StatusPending}}, "order_no": orderNo},
		"OrderStatus":      {"stage": stage, "kind": kind, "order_no": orderNo, "status": {"enum": []any{api.StatusPending, api.StatusConfirmed, api.StatusPaid, api.StatusCancelled, api.StatusFailed}}},
		"StageChange":      {"stage": stage},
		"FleetStageChange": {"stage": stage},
		"PeerStatus":       {"stage": stage, "stages": stages},
		"PeerStage":        {"stage": stage},
		"BurstVerdict":     {"kind": kind, "stage": {"description": "The stage the burst ran under: its request's stage, the one stage every answer named, or \"mixed\"."}},
		"Problem": {"type": {"$ref": "#/components/schemas/ProblemType"},
			"status": {"minimum": 400, "maximum": 599}},
		"BuyRequest": {"user_id": userID, "quantity": {"minimum": 1, "maximum": inventory.MaxQuantity, "default": 1},
			"required": {"list": []any{"user_id"}}},
		"GrabRequest": {"user_id": userID, "required": {"list": []any{"user_id"}}},
		"PayRequest":  {"user_id": obj{"description": "When given, only this buyer's order is paid; another's is answered 404 order-not-found."}},
		"ResetRequest": {"stock": {"minimum": 0}, "required": {"list": []any{"stock"}},
			"opens_at":  {"description": "When the sale opens (RFC 3339); left out or null: at once."},
			"closes_at": {"description": "When the sale closes (RFC 3339), after opens_at; left out or null: never."}},
		"StageRequest": {"stage": stage, "required": {"list": []any{"stage"}}},
		"ProductRequest": {"name": name, "price_cents": {"minimum": 0, "maximum": inventory.MaxPriceCents}, "stock": {"minimum": 0, "maximum": inventory.MaxStock},
			"required": {"list": []any{"name", "price_cents", "stock"}}},
		"CouponRequest": {"name": name, "total": {"minimum": 0, "maximum": inventory.MaxStock}, "required": {"list": []any{"name", "total"}}},
		"SessionRequest": {"kind": {"enum": []any{"product", "coupon"}, "default": "product"}, "items": {"minItems": 1, "maxItems": inventory.MaxSessionItems},
			"opens_at":  {"description": "When every item's sale opens (RFC 3339); left out or null: at once."},
			"closes_at": {"description": "When every item's sale closes (RFC 3339), after opens_at; left out or null: never."},
			"required":  {"list": []any{"items"}}},
		"SessionItemRequest": {"id": {"minimum": 1, "description": "An item of the session's kind; an id twice, or one that is no item, refuses the session."}, "stock": {"minimum": 0, "maximum": inventory.MaxStock},
			"required": {"list": []any{"id", "stock"}}},
		"Session":  {"kind": kind},
		"Archived": {"kind": kind},
		"RateLimitRequest": {"interval_ms": {"minimum": 0, "maximum": maxRateIntervalMS, "description": "The time between two buys of one buyer at the sustained rate; 0 turns the limit off, else at least 0.001."},
			"burst": {"minimum": 1, "maximum": maxRateBurst, "description": "How many buys one buyer may send at once."},
			"by":    {"items": obj{"type": "string", "enum": []any{"account", "address"}}, "minItems": 1, "uniqueItems": true, "description": "What counts as one buyer: the account (user_id), the client's address, or both."}},
		"RateLimit":        {"by": {"items": obj{"type": "string", "enum": []any{"account", "address"}}}},
		"BurstRequestBody": {"kind": {"enum": []any{"product", "coupon"}, "default": "product"}, "item_id": {"minimum": 1}, "n": {"minimum": 1}, "stage": stage, "required": {"list": []any{"item_id", "n"}}},
	}
}

// obj is a JSON object of the document.
type obj = map[string]any

// openAPIDocument generates the document.
func openAPIDocument() ([]byte, error) {
	docs, err := typeDocs(filepath.Join("..", "api", "api.go"))
	if err != nil {
		return nil, err
	}
	g := &schemaGen{schemas: obj{}, responses: obj{}, docs: docs, rules: fieldRules()}
	paths := obj{}
	for _, op := range openAPIOps() {
		item, _ := paths[op.path].(obj)
		if item == nil {
			item = obj{}
			paths[op.path] = item
		}
		o, err := g.operation(op)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", op.method, op.path, err)
		}
		item[strings.ToLower(op.method)] = o
	}
	problem, err := g.problemSchemas()
	if err != nil {
		return nil, err
	}
	g.ref(api.Problem{}, "")
	g.schemas["ProblemType"] = problem
	// A path no route has, or a method its route does not have, is not an
	// operation, and OpenAPI 3.0 has no answer outside the operations: the
	// 404 is the one of the operations that answer route-not-found, and
	// the 405 (method-not-allowed, with Allow) is in ProblemType alone.
	routeNotFound, _ := g.problemResponse([]string{"route-not-found"})
	g.responses["RouteNotFound"] = withDescription(routeNotFound, "No route or page has this path (any method): an unknown path, problem type or lab file.")
	headersTooLarge, _ := g.problemResponse([]string{"headers-too-large"})
	g.responses["HeadersTooLarge"] = withDescription(headersTooLarge, "Any path: the request line and headers exceed 32 KiB.")
	used := map[string]bool{}
	refsIn(paths, used)
	refsIn(g.responses, used)
	doc := obj{
		"openapi": "3.0.3",
		"info": obj{
			"title":   "seckill",
			"version": "1",
			"description": "The HTTP API of one seckill instance (docs/api.md explains it). Errors are application/problem+json; " +
				"clients switch on their `type`, which GET /problems/{slug} explains. Generated from the code: see internal/api/openapi.go.",
			"license": obj{"name": "MIT", "url": "https://opensource.org/licenses/MIT"},
		},
		"servers": []any{obj{"url": "/"}},
		"tags": []any{
			obj{"name": "probes", "description": "Liveness and readiness, for a load balancer or an orchestrator."},
			obj{"name": "problems", "description": "What each problem type means."},
			obj{"name": "instance", "description": "This instance: its stages, this document, its metrics."},
			obj{"name": "products", "description": "Products, their buys and their audits."},
			obj{"name": "coupons", "description": "Coupon batches, their grabs and their audits."},
			obj{"name": "orders", "description": "Orders and grabs, looked up and paid."},
			obj{"name": "dashboard", "description": "What the dashboard reads: the fleet and the lab's reports."},
			obj{"name": "admin", "description": "Resets, stage switches, the burst, the rate limit and the profiler: the admin token only."},
		},
		"paths": paths,
		"components": obj{
			"schemas":   g.schemas,
			"headers":   answerHeaders(used),
			"responses": g.responses,
			"securitySchemes": obj{
				"adminToken": obj{"type": "http", "scheme": "bearer", "description": "SECKILL_ADMIN_TOKEN. Admin routes answer 401 without it, 403 with a wrong one, and 404 admin-disabled when the instance has none."},
			},
		},
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func withDescription(o obj, d string) obj {
	o["description"] = d
	return o
}

var pathParam = regexp.MustCompile(`\{(\w+)\}`)

// pathParams are the path parameters the API uses.
var pathParams = map[string]obj{
	"id":       {"description": "A product or coupon batch id.", "schema": obj{"type": "integer", "format": "int64", "minimum": 1}},
	"order_no": {"description": "An order number as a buy or grab answered it: O… for orders, C… for grabs.", "schema": obj{"type": "string", "minLength": 1, "maxLength": maxOrderNo, "pattern": "^[A-Za-z0-9_-]+$"}},
	"slug":     {"description": "A problem type's slug, as in /problems/sold-out.", "schema": obj{"type": "string"}},
	"run":      {"description": "A lab run's folder name.", "schema": obj{"type": "string"}},
	"file":     {"description": "A file of the run: json, md, txt, csv, html, svg or png.", "schema": obj{"type": "string"}},
	"name":     {"description": "A profile (heap, goroutine, profile, trace, …); empty for the index.", "schema": obj{"type": "string"}},
}

func (g *schemaGen) operation(op opSpec) (obj, error) {
	o := obj{"operationId": op.id, "summary": op.summary, "tags": []any{op.tag}}
	var params []any
	for _, m := range pathParam.FindAllStringSubmatch(op.path, -1) {
		p, ok := pathParams[m[1]]
		if !ok {
			return nil, fmt.Errorf("no description of the path parameter %q", m[1])
		}
		params = append(params, obj{"name": m[1], "in": "path", "required": true, "description": p["description"], "schema": p["schema"]})
	}
	for _, q := range op.query {
		params = append(params, q)
	}
	if op.stageHeader {
		params = append(params, obj{"name": api.StageHeader, "in": "header", "required": false,
			"description": "Run this request under another stage than the instance's default; needs the admin token (Authorization: Bearer).",
			"schema":      obj{"type": "string", "enum": stageEnum()}})
	}
	if op.passHeader {
		params = append(params, obj{"name": api.PassHeader, "in": "header", "required": false,
			"description": "The pass a waiting room's poll gave this buyer: required for a product whose sale has a room (403 pass-required without it), spent by the buy (409 pass-spent on a second use, unless with the same Idempotency-Key), given back when the buy is answered 503.",
			"schema":      obj{"type": "string"}})
	}
	if op.idempotencyKey {
		params = append(params, obj{"name": "Idempotency-Key", "in": "header", "required": false,
			"description": "Run the request at most once: a retry with the same key gets the first answer again, with Idempotent-Replayed: true. 1 to 255 visible ASCII characters, bare or as a quoted string without escapes. Required when SECKILL_REQUIRE_IDEMPOTENCY_KEY is set.",
			"schema":      obj{"type": "string", "minLength": 1, "maxLength": idempotency.MaxKeyLen + 2, "pattern": "^[!-~]+$"}})
	}
	if len(params) > 0 {
		o["parameters"] = params
	}
	// Every operation states who may call it, so that a linter (and a
	// reader) need not guess: the admin token, no credentials, or, for a
	// request that may name its stage, either.
	switch {
	case op.admin:
		o["security"] = []any{obj{"adminToken": []any{}}}
	case op.stageHeader:
		o["security"] = []any{obj{}, obj{"adminToken": []any{}}}
	default:
		o["security"] = []any{}
	}
	if op.body != nil {
		var example any
		if err := json.Unmarshal([]byte(op.bodyExample), &example); err != nil {
			return nil, fmt.Errorf("the example body: %w", err)
		}
		o["requestBody"] = obj{"required": !op.bodyOptional, "content": obj{"application/json": obj{
			"schema": g.requestRef(op.body, op.bodyName), "example": example}}}
	}
	responses := obj{}
	for status, answer := range op.answers {
		r, err := g.answer(op, status, answer)
		if err != nil {
			return nil, err
		}
		responses[strconv.Itoa(status)] = r
	}
	byStatus := map[int][]string{}
	for _, slug := range op.problems {
		p, ok := problemBySlug(slug)
		if !ok {
			return nil, fmt.Errorf("no problem type %q in the error table", slug)
		}
		if !slices.Contains(byStatus[p.status], slug) {
			byStatus[p.status] = append(byStatus[p.status], slug)
		}
	}
	for status, slugs := range byStatus {
		slices.Sort(slugs)
		r, err := g.problemResponse(slugs)
		if err != nil {
			return nil, err
		}
		if len(op.headers) == 0 {
			// Shared by every operation that answers these types.
			name := "Problem." + strconv.Itoa(status) + "." + strings.Join(slugs, ".")
			if slices.Equal(slugs, []string{"route-not-found"}) {
				responses[strconv.Itoa(status)] = obj{"$ref": "#/components/responses/RouteNotFound"}
				continue
			}
			g.responses[name] = r
			responses[strconv.Itoa(status)] = obj{"$ref": "#/components/responses/" + name}
			continue
		}
		headers, _ := r["headers"].(obj)
		if headers == nil {
			headers = obj{}
		}
		for _, h := range op.headers {
			headers[h] = answerHeader(h, false)
		}
		r["headers"] = headers
		responses[strconv.Itoa(status)] = r
	}
	// Every request whose line and headers exceed MaxHeaderBytes is
	// answered 431, whatever its route (limitHeaders).
	responses[strconv.Itoa(http.StatusRequestHeaderFieldsTooLarge)] = obj{"$ref": "#/components/responses/HeadersTooLarge"}
	o["responses"] = responses
	return o, nil
}

// answer is a successful answer of op.
func (g *schemaGen) answer(op opSpec, status int, answer any) (obj, error) {
	r := obj{"description": http.StatusText(status)}
	switch answer {
	case rawText:
		r["content"] = obj{"text/plain": obj{"schema": obj{"type": "string"}}}
	case rawPprof:
		r["content"] = obj{
			"text/html":                obj{"schema": obj{"type": "string"}, "x-note": "the index, /debug/pprof/"},
			"text/plain":               obj{"schema": obj{"type": "string"}},
			"application/octet-stream": obj{"schema": obj{"type": "string", "format": "binary"}},
		}
	case rawLabFile:
		c := obj{}
		for _, ct := range sortedValues(labFiles) {
			mt := strings.SplitN(ct, ";", 2)[0]
			c[mt] = obj{"schema": obj{"type": "string"}}
			if mt == "application/json" {
				c[mt] = obj{"schema": obj{"description": "Any JSON value."}}
			}
		}
		r["content"] = c
		r["headers"] = obj{"Content-Security-Policy": obj{"required": true, "description": "Plots are sandboxed: their scripts run, but not as this origin.", "schema": obj{"type": "string", "enum": []any{"sandbox allow-scripts"}}}}
	case rawOpenAPI:
		r["content"] = obj{"application/json": obj{"schema": obj{"type": "object", "required": []any{"openapi", "info", "paths"},
			"properties": obj{"openapi": obj{"type": "string"}, "info": obj{"type": "object"}, "paths": obj{"type": "object"}}}}}
	case rawProblemDoc:
		r["content"] = obj{
			"application/problem+json": obj{"schema": g.ref(api.Problem{}, "")},
			"text/plain":               obj{"schema": obj{"type": "string"}},
		}
	default:
		if _, ok := answer.(string); ok {
			return nil, fmt.Errorf("unknown raw answer %q", answer)
		}
		r["content"] = obj{"application/json": obj{"schema": g.ref(answer, "")}}
	}
	headers := obj{}
	for _, h := range op.headers {
		// X-Seckill-Stage is missing only when the request named a stage that
		// was refused, so every success carries every header of its route
		// but the replay mark.
		headers[h] = answerHeader(h, h != "Idempotent-Replayed")
	}
	if status == http.StatusCreated || status == http.StatusAccepted {
		headers["Location"] = answerHeader("Location", true)
		switch op.tag {
		case "admin": // an item created by id, not an order
			headers["Location"] = answerHeader("ItemLocation", true)
		case "rooms": // a ticket: the room it waits in
			headers["Location"] = answerHeader("RoomLocation", true)
		}
	}
	if len(headers) > 0 {
		r["headers"] = headers
	}
	return r, nil
}

func sortedValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// answerHeader refers to one answer header, in one of its two variants
// (see answerHeaders).
func answerHeader(name string, required bool) obj {
	if !required {
		name += ".ifAny"
	}
	return obj{"$ref": "#/components/headers/" + name}
}

// answerHeaders are the answer headers the document refers to (used lists
// the references), each one required or optional (.ifAny): a variant no
// answer has is left out, as an unused component.
func answerHeaders(used map[string]bool) obj {
	out := obj{}
	for _, name := range []string{api.InstanceHeader, api.StageHeader, "Idempotent-Replayed", "Location", "ItemLocation", "RoomLocation", "Retry-After"} {
		for _, required := range []bool{true, false} {
			ref := answerHeader(name, required)["$ref"].(string)
			if used[ref] {
				out[strings.TrimPrefix(ref, "#/components/headers/")] = describeHeader(name, required)
			}
		}
	}
	return out
}

// refsIn adds to refs every $ref found in v.
func refsIn(v any, refs map[string]bool) {
	switch v := v.(type) {
	case obj:
		for k, e := range v {
			if s, ok := e.(string); ok && k == "$ref" {
				refs[s] = true
			}
			refsIn(e, refs)
		}
	case []any:
		for _, e := range v {
			refsIn(e, refs)
		}
	}
}

// describeHeader describes one answer header.
func describeHeader(name string, required bool) obj {
	h := obj{"required": required}
	switch name {
	case api.InstanceHeader:
		h["description"] = "The instance that answered."
		h["schema"] = obj{"type": "string", "minLength": 1}
	case api.StageHeader:
		h["description"] = "The stage the buy ran under; absent when the request named a stage that was refused."
		h["schema"] = obj{"type": "string", "enum": stageEnum()}
	case "Idempotent-Replayed":
		h["description"] = "This is the stored answer of an earlier request with the same Idempotency-Key."
		h["schema"] = obj{"type": "string", "enum": []any{"true"}}
	case "Location":
		h["description"] = "Where the order is looked up (GET)."
		h["schema"] = obj{"type": "string", "pattern": "^/api/v1/orders/[A-Za-z0-9_-]+$"}
	case "ItemLocation": // the Location of a created item
		h["description"] = "Where the item is read (GET)."
		h["schema"] = obj{"type": "string", "pattern": "^/api/v1/(products|coupons)/[0-9]+$"}
	case "RoomLocation": // the Location of a ticket's room
		h["description"] = "The room the ticket waits in (GET): its length and what a buyer is told."
		h["schema"] = obj{"type": "string", "pattern": "^/api/v1/products/[0-9]+/room$"}
	case "Retry-After":
		h["description"] = "When to come back, in whole seconds."
		h["schema"] = obj{"type": "integer", "minimum": 1, "maximum": maxRetryAfter}
	default:
		panic("no description of the header " + name)
	}
	return h
}

func problemBySlug(slug string) (problemType, bool) {
	if slug == internalProblem.slug {
		return internalProblem, true
	}
	for _, p := range problemTable {
		if p.slug == slug {
			return p, true
		}
	}
	return problemType{}, false
}

// problemResponse is the answer of problem types that share a status: a
// Problem whose type is one of theirs, with Retry-After when they carry
// it (required when all of them do).
func (g *schemaGen) problemResponse(slugs []string) (obj, error) {
	var types, lines []string
	var status, retry int
	for _, slug := range slugs {
		p, ok := problemBySlug(slug)
		if !ok {
			return nil, fmt.Errorf("no problem type %q in the error table", slug)
		}
		status = p.status
		types = append(types, api.ProblemTypePrefix+slug)
		lines = append(lines, "`"+slug+"`")
		if p.saysWhen() {
			retry++
		}
	}
	var enum []any
	for _, t := range types {
		enum = append(enum, t)
	}
	schema := obj{"allOf": []any{
		g.ref(api.Problem{}, ""),
		obj{"type": "object", "properties": obj{
			"type":   obj{"type": "string", "enum": enum},
			"status": obj{"type": "integer", "enum": []any{status}},
		}},
	}}
	r := obj{
		"description": strings.Join(lines, ", ") + " (the ProblemType schema, and GET /problems/{slug}, explain each)",
		"content":     obj{"application/problem+json": obj{"schema": schema}},
	}
	if retry > 0 {
		r["headers"] = obj{"Retry-After": answerHeader("Retry-After", retry == len(slugs))}
	}
	return r, nil
}

// problemSchemas returns the ProblemType schema: every type of the error
// table.
func (g *schemaGen) problemSchemas() (obj, error) {
	seen := map[string]bool{}
	var enum []any
	var about []string
	for _, p := range documentedProblems() {
		if !seen[p.slug] {
			seen[p.slug] = true
			enum = append(enum, api.ProblemTypePrefix+p.slug)
			about = append(about, fmt.Sprintf("- `%s` (%d): %s", p.slug, p.status, p.about))
		}
	}
	return obj{"type": "string", "enum": enum, "description": "A problem's stable type; GET it for its meaning:\n\n" + strings.Join(about, "\n\n")}, nil
}

// schemaGen reflects Go types into the document's schemas.
type schemaGen struct {
	schemas   obj
	responses obj               // shared problem answers
	docs      map[string]string // "Type" and "Type.Field" to doc comment
	rules     map[string]map[string]obj
}

// ref returns a reference to t's schema, adding it under name (t's Go
// name when empty) on first use.
func (g *schemaGen) ref(v any, name string) obj {
	return g.refType(reflect.TypeOf(v), name, false)
}

// requestRef is ref for a request body: what the handler decodes, which
// refuses unknown fields, and whose required fields are its rules'.
func (g *schemaGen) requestRef(v any, name string) obj {
	return g.refType(reflect.TypeOf(v), name, true)
}

// nestedRequestNames name the schemas of request types met inside a
// request body, which has its own name (opSpec.bodyName).
var nestedRequestNames = map[reflect.Type]string{reflect.TypeOf(sessionItemBody{}): "SessionItemRequest"}

var timeType = reflect.TypeOf(time.Time{})
var rawType = reflect.TypeOf(json.RawMessage{})

func (g *schemaGen) refType(t reflect.Type, name string, request bool) obj {
	if name == "" {
		name = t.Name()
	}
	if n, ok := nestedRequestNames[t]; ok {
		name = n
	}
	if _, done := g.schemas[name]; !done {
		g.schemas[name] = obj{} // placeholder against recursion
		g.schemas[name] = g.object(t, name, request)
	}
	return obj{"$ref": "#/components/schemas/" + name}
}

// object is the schema of struct t, as encoding/json writes it (or, for a
// request, reads it).
func (g *schemaGen) object(t reflect.Type, name string, request bool) obj {
	props := obj{}
	var required []any
	rules := g.rules[name]
	for _, of := range jsonFields(t) {
		f, owner := of.f, of.owner
		tag := f.Tag.Get("json")
		jsonName, opts, _ := strings.Cut(tag, ",")
		if jsonName == "-" || !f.IsExported() {
			continue
		}
		if jsonName == "" {
			jsonName = f.Name
		}
		omitempty := strings.Contains(opts, "omitempty")
		s := g.field(f.Type, omitempty, request)
		if d := g.docs[owner.Name()+"."+f.Name]; d != "" {
			s = withDoc(s, d)
		}
		for k, v := range rules[jsonName] {
			if k == "$ref" {
				s = obj{"$ref": v}
				continue
			}
			if k == "items" {
				items, _ := s["items"].(obj)
				for ik, iv := range v.(obj) {
					items[ik] = iv
				}
				continue
			}
			s[k] = v
		}
		props[jsonName] = s
		if !request && !omitempty {
			required = append(required, jsonName)
		}
	}
	if rule, ok := rules["required"]; ok {
		required = rule["list"].([]any)
	}
	o := obj{"type": "object", "properties": props}
	if len(required) > 0 {
		o["required"] = required
	}
	if request {
		// The handlers refuse unknown fields (decodeBody). Answers are left
		// open, so that a client keeps working when a field is added.
		o["additionalProperties"] = false
	}
	if d := g.docs[t.Name()]; d != "" {
		o["description"] = d
	}
	return o
}

// ownedField is a field encoding/json writes of a struct, and the struct
// that declares it (t, or a struct t embeds).
type ownedField struct {
	f     reflect.StructField
	owner reflect.Type
}

// jsonFields are t's fields as encoding/json sees them: an embedded struct
// without a json tag gives its own fields in its place (api.RoomTicket
// embeds api.RoomStatus).
func jsonFields(t reflect.Type) []ownedField {
	var out []ownedField
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Tag.Get("json") == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		out = append(out, ownedField{f, t})
	}
	return out
}

// withDoc adds a description to s, through allOf when s is a reference
// (a sibling of $ref is ignored in OpenAPI 3.0).
func withDoc(s obj, d string) obj {
	if ref, ok := s["$ref"]; ok {
		return obj{"allOf": []any{obj{"$ref": ref}}, "description": d}
	}
	s["description"] = d
	return s
}

// field is the schema of a field of type t. A pointer, slice or map that
// is not omitempty can be written as null.
func (g *schemaGen) field(t reflect.Type, omitempty, request bool) obj {
	nullable := false
	if t.Kind() == reflect.Pointer {
		nullable = !omitempty && !request
		t = t.Elem()
	}
	var s obj
	switch {
	case t == timeType:
		s = obj{"type": "string", "format": "date-time"}
	case t == rawType:
		s = obj{"description": "Any JSON value."}
		return s
	case t.Kind() == reflect.Struct:
		ref := g.refType(t, "", request)
		if nullable {
			return obj{"allOf": []any{ref}, "nullable": true}
		}
		return ref
	case t.Kind() == reflect.Slice:
		s = obj{"type": "array", "items": g.field(t.Elem(), false, request)}
		nullable = nullable || (!omitempty && !request)
	case t.Kind() == reflect.Map:
		s = obj{"type": "object", "additionalProperties": g.field(t.Elem(), false, request)}
		nullable = nullable || (!omitempty && !request)
	case t.Kind() == reflect.String:
		s = obj{"type": "string"}
	case t.Kind() == reflect.Bool:
		s = obj{"type": "boolean"}
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		s = obj{"type": "integer", "format": "int64"}
		if t.Kind() == reflect.Int32 {
			s["format"] = "int32"
		}
	case t.Kind() == reflect.Float64 || t.Kind() == reflect.Float32:
		s = obj{"type": "number", "format": "double"}
	default:
		panic("no schema for the Go type " + t.String())
	}
	if nullable {
		s["nullable"] = true
	}
	return s
}

// typeDocs reads the doc comments of the types of file and of their
// fields: "Type" and "Type.Field" to the comment's text, on one line.
func typeDocs(file string) (map[string]string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	docs := map[string]string{}
	text := func(groups ...*ast.CommentGroup) string {
		for _, g := range groups {
			if g != nil {
				return strings.Join(strings.Fields(g.Text()), " ")
			}
		}
		return ""
	}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE {
			continue
		}
		for _, spec := range gd.Specs {
			ts := spec.(*ast.TypeSpec)
			docs[ts.Name.Name] = text(ts.Doc, gd.Doc)
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				continue
			}
			for _, fld := range st.Fields.List {
				for _, n := range fld.Names {
					if d := text(fld.Doc, fld.Comment); d != "" {
						docs[ts.Name.Name+"."+n.Name] = d
					}
				}
			}
		}
	}
	return docs, nil
}
