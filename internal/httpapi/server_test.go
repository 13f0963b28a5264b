package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

const token = "test-admin-token"

type fixture struct {
	t   *testing.T
	db  *store.DB
	srv http.Handler
}

func newFixture(t *testing.T, adminToken string, ready func(context.Context) error) *fixture {
	t.Helper()
	db := testenv.SQLite(t)
	stages := func(st inventory.Store, kind string) map[string]inventory.Stage {
		return map[string]inventory.Stage{
			"unlocked":    inventory.NewUnlocked(st, kind, inventory.SectionOptions{}),
			"local-mutex": inventory.NewLocalMutex(st, kind, inventory.SectionOptions{}),
			"db-atomic":   inventory.NewDBAtomic(st),
		}
	}
	srv := httpapi.NewServer(httpapi.Deps{
		Instance:   "test-1",
		Products:   inventory.NewService(db.Products(), stages(db.Products(), "product"), "test-1", "O"),
		Coupons:    inventory.NewService(db.Coupons(), stages(db.Coupons(), "coupon"), "test-1", "C"),
		AdminToken: adminToken,
		Stage:      "db-atomic",
		Ready:      ready,
	})
	return &fixture{t: t, db: db, srv: srv}
}

type call struct {
	method, path, body string
	header             map[string]string
}

func (f *fixture) do(c call) *httptest.ResponseRecorder {
	f.t.Helper()
	req := httptest.NewRequest(c.method, c.path, strings.NewReader(c.body))
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range c.header {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	f.srv.ServeHTTP(rec, req)
	return rec
}

func problemType(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q, want application/problem+json; body %s", ct, rec.Body)
	}
	var p api.Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body: %v: %s", err, rec.Body)
	}
	if p.Status != rec.Code || p.Title == "" {
		t.Fatalf("problem status %d title %q, response %d", p.Status, p.Title, rec.Code)
	}
	return strings.TrimPrefix(p.Type, api.ProblemTypePrefix)
}

func buy(user string, qty int) call {
	return call{method: "POST", path: "/api/v1/products/1/buy", body: `{"user_id":"` + user + `","quantity":` + itoa(qty) + `}`}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func admin(c call) call {
	if c.header == nil {
		c.header = map[string]string{}
	}
	c.header["Authorization"] = "Bearer " + token
	return c
}

func TestStatuses(t *testing.T) {
	f := newFixture(t, token, nil)
	f.do(admin(call{method: "POST", path: "/api/v1/admin/products/2/reset", body: `{"stock":1}`}))
	cases := []struct {
		name    string
		call    call
		status  int
		problem string
	}{
		{"healthz", call{method: "GET", path: "/healthz"}, 200, ""},
		{"readyz", call{method: "GET", path: "/readyz"}, 200, ""},
		{"info", call{method: "GET", path: "/api/v1/info"}, 200, ""},
		{"products", call{method: "GET", path: "/api/v1/products"}, 200, ""},
		{"product", call{method: "GET", path: "/api/v1/products/1"}, 200, ""},
		{"unknown product", call{method: "GET", path: "/api/v1/products/999"}, 404, "not-found"},
		{"audit", call{method: "GET", path: "/api/v1/products/1/audit"}, 200, ""},
		{"buy", buy("alice", 2), 201, ""},
		{"buy again", buy("alice", 1), 409, "already-purchased"},
		{"buy last unit", call{method: "POST", path: "/api/v1/products/2/buy", body: `{"user_id":"bob"}`}, 201, ""},
		{"sold out", call{method: "POST", path: "/api/v1/products/2/buy", body: `{"user_id":"carol"}`}, 409, "sold-out"},
		{"grab", call{method: "POST", path: "/api/v1/coupons/1/grab", body: `{"user_id":"alice"}`}, 201, ""},
		{"grab again", call{method: "POST", path: "/api/v1/coupons/1/grab", body: `{"user_id":"alice"}`}, 409, "already-purchased"},
		{"coupon audit", call{method: "GET", path: "/api/v1/coupons/1/audit"}, 200, ""},
		{"reset", admin(call{method: "POST", path: "/api/v1/admin/products/2/reset", body: `{"stock":5}`}), 200, ""},
		{"reset unknown", admin(call{method: "POST", path: "/api/v1/admin/products/999/reset", body: `{"stock":5}`}), 404, "not-found"},
		{"set stage", admin(call{method: "PUT", path: "/api/v1/admin/stage", body: `{"stage":"local-mutex"}`}), 200, ""},
		{"set unknown stage", admin(call{method: "PUT", path: "/api/v1/admin/stage", body: `{"stage":"optimistic"}`}), 400, "unknown-stage"},
		{"set unavailable stage", admin(call{method: "PUT", path: "/api/v1/admin/stage", body: `{"stage":"redlock"}`}), 400, "stage-unavailable"},
		{"stage header with token", admin(call{method: "POST", path: "/api/v1/products/1/buy", body: `{"user_id":"dave"}`, header: map[string]string{"X-Seckill-Stage": "unlocked"}}), 201, ""},
		{"stage header without token", call{method: "POST", path: "/api/v1/products/1/buy", body: `{"user_id":"erin"}`, header: map[string]string{"X-Seckill-Stage": "unlocked"}}, 401, "unauthorized"},
		{"unknown stage header", admin(call{method: "POST", path: "/api/v1/products/1/buy", body: `{"user_id":"erin"}`, header: map[string]string{"X-Seckill-Stage": "nope"}}), 400, "unknown-stage"},
		{"admin without token", call{method: "PUT", path: "/api/v1/admin/stage", body: `{"stage":"unlocked"}`}, 401, "unauthorized"},
		{"admin wrong token", call{method: "PUT", path: "/api/v1/admin/stage", body: `{"stage":"unlocked"}`, header: map[string]string{"Authorization": "Bearer nope-nope-nope"}}, 403, "forbidden"},
		{"method not allowed", call{method: "DELETE", path: "/api/v1/products/1"}, 405, "method-not-allowed"},
		{"no route", call{method: "GET", path: "/api/v1/nothing"}, 404, "route-not-found"},
		{"problem docs", call{method: "GET", path: "/problems/sold-out"}, 200, ""},
		{"unknown problem docs", call{method: "GET", path: "/problems/no-such-problem"}, 404, "route-not-found"},
	}
	for _, tc := range cases {
		rec := f.do(tc.call)
		if rec.Code != tc.status {
			t.Errorf("%s: status %d, want %d: %s", tc.name, rec.Code, tc.status, rec.Body)
			continue
		}
		if tc.problem != "" {
			if got := problemType(t, rec); got != tc.problem {
				t.Errorf("%s: problem %q, want %q", tc.name, got, tc.problem)
			}
		}
		if strings.HasSuffix(tc.call.path, "/buy") && (rec.Header().Get("X-Seckill-Instance") != "test-1" || rec.Header().Get("X-Seckill-Stage") == "" && rec.Code < 400) {
			t.Errorf("%s: buy responses carry X-Seckill-Stage and X-Seckill-Instance, got %v", tc.name, rec.Header())
		}
	}
}

func TestStageSwitchChangesTheDefaultStage(t *testing.T) {
	f := newFixture(t, token, nil)
	if rec := f.do(admin(call{method: "PUT", path: "/api/v1/admin/stage", body: `{"stage":"unlocked"}`})); rec.Code != 200 {
		t.Fatalf("set stage: %d %s", rec.Code, rec.Body)
	}
	rec := f.do(buy("zoe", 1))
	if rec.Code != 201 || rec.Header().Get("X-Seckill-Stage") != "unlocked" {
		t.Fatalf("buy after switch: %d stage %q", rec.Code, rec.Header().Get("X-Seckill-Stage"))
	}
	var order map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &order); err != nil || order["stage"] != "unlocked" || order["quantity"] != 1.0 {
		t.Fatalf("order %v (%v)", order, err)
	}
}

// TestFormerNamesAreAcceptedNeverWritten: the names CHANGELOG.md lists as
// renamed (the X-Seckill-Mode header, PUT /api/v1/admin/mode and
// /admin/fleet/mode's route, a "mode" field) are still read, answers name
// only the new ones, and a request that gives a name and its former name
// with different values is refused, whichever it puts first.
func TestFormerNamesAreAcceptedNeverWritten(t *testing.T) {
	f := newFixture(t, token, nil)
	if rec := f.do(admin(call{method: "PUT", path: "/api/v1/admin/mode", body: `{"mode":"unlocked"}`})); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"stage":"unlocked"`) || strings.Contains(rec.Body.String(), "mode") {
		t.Fatalf("PUT /admin/mode {\"mode\":...}: %d %s; want 200 naming the stage as stage", rec.Code, rec.Body)
	}
	rec := f.do(buy("old-header", 1))
	if rec.Code != 201 || rec.Header().Get(api.StageHeader) != "unlocked" {
		t.Fatalf("the switch through the former route did not take: %d %v", rec.Code, rec.Header())
	}
	rec = f.do(admin(call{method: "POST", path: "/api/v1/products/1/buy", body: `{"user_id":"old-header-2"}`, header: map[string]string{api.StageHeaderAlias: "local-mutex"}}))
	if rec.Code != 201 || rec.Header().Get(api.StageHeader) != "local-mutex" || rec.Header().Get(api.StageHeaderAlias) != "" {
		t.Fatalf("buy with %s: %d %v; want 201 under local-mutex, named by %s only", api.StageHeaderAlias, rec.Code, rec.Header(), api.StageHeader)
	}
	var o api.Order
	if err := json.Unmarshal(rec.Body.Bytes(), &o); err != nil || o.Stage != "local-mutex" {
		t.Fatalf("order %s (%v)", rec.Body, err)
	}
	agree := admin(call{method: "POST", path: "/api/v1/products/1/buy", body: `{"user_id":"both-agree"}`, header: map[string]string{api.StageHeader: "unlocked", api.StageHeaderAlias: "unlocked"}})
	if rec := f.do(agree); rec.Code != 201 || rec.Header().Get(api.StageHeader) != "unlocked" {
		t.Fatalf("both headers agreeing: %d %s", rec.Code, rec.Body)
	}
	for _, c := range []call{
		admin(call{method: "POST", path: "/api/v1/products/1/buy", body: `{"user_id":"both"}`, header: map[string]string{api.StageHeader: "unlocked", api.StageHeaderAlias: "local-mutex"}}),
		admin(call{method: "PUT", path: "/api/v1/admin/stage", body: `{"stage":"unlocked","mode":"local-mutex"}`}),
		admin(call{method: "PUT", path: "/api/v1/admin/mode", body: `{"mode":"local-mutex","stage":"unlocked"}`}),
	} {
		rec := f.do(c)
		if rec.Code != 400 || problemType(t, rec) != "invalid-request" || !strings.Contains(rec.Body.String(), "disagree") {
			t.Errorf("%s %s %v: %d %s; want 400 invalid-request saying the names disagree", c.method, c.path, c.header, rec.Code, rec.Body)
		}
	}
	if rec := f.do(buy("after-refusals", 1)); rec.Header().Get(api.StageHeader) != "unlocked" {
		t.Errorf("a refused switch changed the stage: %v", rec.Header())
	}
	for old, now := range httpapi.RouteAliases {
		if !strings.Contains(old, "/mode") || !strings.Contains(now, "/stage") {
			t.Errorf("alias %s -> %s: want a former /mode route answered by its /stage route", old, now)
		}
	}
}

// TestHeadIsAnsweredAsGet: HEAD on a GET route answers what the GET
// would, without a body (it was a 405); a route without GET still answers
// 405 to HEAD, as problem+json.
func TestHeadIsAnsweredAsGet(t *testing.T) {
	f := newFixture(t, token, nil)
	for _, path := range []string{"/healthz", "/api/v1/products/1", "/api/v1/openapi.json", "/problems/sold-out"} {
		get, head := f.do(call{method: "GET", path: path}), f.do(call{method: "HEAD", path: path})
		if head.Code != get.Code || head.Code != 200 || head.Body.Len() != 0 || head.Header().Get("Content-Type") != get.Header().Get("Content-Type") {
			t.Errorf("HEAD %s: %d %q %q; want GET's 200 and Content-Type %q without a body", path, head.Code, head.Header().Get("Content-Type"), head.Body, get.Header().Get("Content-Type"))
		}
	}
	if rec := f.do(call{method: "HEAD", path: "/api/v1/products/999"}); rec.Code != 404 || rec.Body.Len() != 0 {
		t.Errorf("HEAD of an unknown product: %d %q; want 404 without a body", rec.Code, rec.Body)
	}
	rec := f.do(call{method: "HEAD", path: "/api/v1/products/1/buy"})
	if rec.Code != 405 || rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("HEAD of a POST route: %d %v; want 405 problem+json", rec.Code, rec.Header())
	}
}

// TestPayKeyRefusalsNameTheInstance: a payment refused by the
// Idempotency-Key check (missing under SECKILL_REQUIRE_IDEMPOTENCY_KEY, or
// malformed) carries X-Seckill-Instance like every other order answer; the
// check answers before the handler that used to set it.
func TestPayKeyRefusalsNameTheInstance(t *testing.T) {
	db := testenv.SQLite(t)
	srv := httpapi.NewServer(httpapi.Deps{
		Instance:              "pay-1",
		Products:              inventory.NewService(db.Products(), map[string]inventory.Stage{"db-atomic": inventory.NewDBAtomic(db.Products())}, "pay-1", "O"),
		Stage:                 "db-atomic",
		RequireIdempotencyKey: true,
	})
	for _, tc := range []struct{ key, problem string }{{"", "idempotency-key-required"}, {"bad key\x01", "idempotency-key-invalid"}} {
		req := httptest.NewRequest("POST", "/api/v1/orders/O-1/pay", nil)
		if tc.key != "" {
			req.Header.Set("Idempotency-Key", tc.key)
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code != 400 || problemType(t, rec) != tc.problem || rec.Header().Get(api.InstanceHeader) != "pay-1" {
			t.Errorf("pay with key %q: %d %v %s; want 400 %s naming instance pay-1", tc.key, rec.Code, rec.Header(), rec.Body, tc.problem)
		}
	}
}

// TestOversizedHeadersAreAProblem: a request whose line and headers pass
// httpapi.MaxHeaderBytes, in one header or in many, is answered 431
// headers-too-large as problem+json (Go's own 431 was plain text) and
// buys nothing; one just under it is served.
func TestOversizedHeadersAreAProblem(t *testing.T) {
	f := newFixture(t, token, nil)
	many := map[string]string{}
	for i := range 2000 {
		many[fmt.Sprintf("X-H%d", i)] = strings.Repeat("v", 16)
	}
	for name, header := range map[string]map[string]string{
		"one header":   {"X-Big": strings.Repeat("h", httpapi.MaxHeaderBytes)},
		"many headers": many,
	} {
		rec := f.do(call{method: "POST", path: "/api/v1/products/2/buy", body: `{"user_id":"big-headers"}`, header: header})
		if rec.Code != 431 || problemType(t, rec) != "headers-too-large" {
			t.Errorf("%s: %d %s; want 431 headers-too-large", name, rec.Code, rec.Body)
		}
	}
	if rec := f.do(call{method: "GET", path: "/api/v1/products/2/audit"}); !strings.Contains(rec.Body.String(), `"orders":0`) {
		t.Errorf("a refused request bought: %s", rec.Body)
	}
	rec := f.do(call{method: "POST", path: "/api/v1/products/2/buy", body: `{"user_id":"just-under"}`, header: map[string]string{"X-Big": strings.Repeat("h", httpapi.MaxHeaderBytes-1024)}})
	if rec.Code != 201 {
		t.Errorf("headers just under the bound: %d %s; want 201", rec.Code, rec.Body)
	}
}

func TestAdminDisabledWithoutToken(t *testing.T) {
	f := newFixture(t, "", nil)
	rec := f.do(call{method: "POST", path: "/api/v1/admin/products/1/reset", body: `{"stock":1}`, header: map[string]string{"Authorization": "Bearer anything-at-all"}})
	if rec.Code != 404 || problemType(t, rec) != "admin-disabled" {
		t.Fatalf("admin with no configured token: %d %s", rec.Code, rec.Body)
	}
}

func TestReadyzReportsBackends(t *testing.T) {
	f := newFixture(t, token, func(context.Context) error { return errors.New("redis: connection refused") })
	rec := f.do(call{method: "GET", path: "/readyz"})
	if rec.Code != 503 || problemType(t, rec) != "not-ready" {
		t.Fatalf("readyz with a failing backend: %d %s", rec.Code, rec.Body)
	}
}

// TestBadInputChangesNothing sends malformed and hostile requests and checks
// that each gets a 4xx problem and leaves stock and orders as they were.
func TestBadInputChangesNothing(t *testing.T) {
	f := newFixture(t, token, nil)
	big := `{"user_id":"` + strings.Repeat("a", 70<<10) + `","quantity":1}`
	cases := []struct {
		name    string
		call    call
		status  int
		problem string
	}{
		{"malformed json", call{method: "POST", path: "/api/v1/products/1/buy", body: `{"user_id":`}, 400, "malformed-json"},
		{"not an object", call{method: "POST", path: "/api/v1/products/1/buy", body: `[1,2]`}, 400, "malformed-json"},
		{"trailing data", call{method: "POST", path: "/api/v1/products/1/buy", body: `{"user_id":"a"} {"user_id":"b"}`}, 400, "malformed-json"},
		{"unknown field", call{method: "POST", path: "/api/v1/products/1/buy", body: `{"user_id":"a","qty":1}`}, 400, "malformed-json"},
		{"wrong type user", call{method: "POST", path: "/api/v1/products/1/buy", body: `{"user_id":7,"quantity":1}`}, 400, "invalid-request"},
		{"wrong type quantity", call{method: "POST", path: "/api/v1/products/1/buy", body: `{"user_id":"a","quantity":"1"}`}, 400, "invalid-request"},
		{"quantity 0", buy("a", 0), 400, "invalid-request"},
		{"quantity -1", buy("a", -1), 400, "invalid-request"},
		{"quantity 11", buy("a", 11), 400, "invalid-request"},
		{"quantity 2^63", call{method: "POST", path: "/api/v1/products/1/buy", body: `{"user_id":"a","quantity":9223372036854775808}`}, 400, "invalid-request"},
		{"quantity fraction", call{method: "POST", path: "/api/v1/products/1/buy", body: `{"user_id":"a","quantity":1.5}`}, 400, "invalid-request"},
		{"missing user", call{method: "POST", path: "/api/v1/products/1/buy", body: `{"quantity":1}`}, 400, "invalid-request"},
		{"empty user", buy("", 1), 400, "invalid-request"},
		{"65-char user", buy(strings.Repeat("u", 65), 1), 400, "invalid-request"},
		{"control char user", call{method: "POST", path: "/api/v1/products/1/buy", body: `{"user_id":"a\u0000b"}`}, 400, "invalid-request"},
		{"body over the cap", call{method: "POST", path: "/api/v1/products/1/buy", body: big}, 413, "body-too-large"},
		{"unknown product", call{method: "POST", path: "/api/v1/products/424242/buy", body: `{"user_id":"a"}`}, 404, "not-found"},
		{"non-numeric id", call{method: "POST", path: "/api/v1/products/abc/buy", body: `{"user_id":"a"}`}, 400, "invalid-request"},
		{"zero id", call{method: "POST", path: "/api/v1/products/0/buy", body: `{"user_id":"a"}`}, 400, "invalid-request"},
		{"wrong content type", call{method: "POST", path: "/api/v1/products/1/buy", body: `{"user_id":"a"}`, header: map[string]string{"Content-Type": "text/plain"}}, 415, "unsupported-media-type"},
		{"no content type", call{method: "POST", path: "/api/v1/products/1/buy", body: `{"user_id":"a"}`, header: map[string]string{"Content-Type": ""}}, 415, "unsupported-media-type"},
		{"grab with quantity", call{method: "POST", path: "/api/v1/coupons/1/grab", body: `{"user_id":"a","quantity":2}`}, 400, "malformed-json"},
		{"reset without token", call{method: "POST", path: "/api/v1/admin/products/1/reset", body: `{"stock":0}`}, 401, "unauthorized"},
		{"reset wrong token", call{method: "POST", path: "/api/v1/admin/products/1/reset", body: `{"stock":0}`, header: map[string]string{"Authorization": "Bearer wrong-token-x"}}, 403, "forbidden"},
		{"reset negative", admin(call{method: "POST", path: "/api/v1/admin/products/1/reset", body: `{"stock":-5}`}), 400, "invalid-request"},
		{"reset missing stock", admin(call{method: "POST", path: "/api/v1/admin/products/1/reset", body: `{}`}), 400, "invalid-request"},
		{"basic auth instead of bearer", call{method: "POST", path: "/api/v1/admin/products/1/reset", body: `{"stock":0}`, header: map[string]string{"Authorization": "Basic dGVzdDp0ZXN0"}}, 401, "unauthorized"},
	}
	ctx := context.Background()
	before, err := f.db.Products().Audit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	beforeCoupon, err := f.db.Coupons().Audit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		rec := f.do(tc.call)
		if rec.Code != tc.status {
			t.Errorf("%s: status %d, want %d: %.200s", tc.name, rec.Code, tc.status, rec.Body)
			continue
		}
		if got := problemType(t, rec); got != tc.problem {
			t.Errorf("%s: problem %q, want %q", tc.name, got, tc.problem)
		}
	}
	after, err := f.db.Products().Audit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	afterCoupon, err := f.db.Coupons().Audit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if before != after || beforeCoupon != afterCoupon {
		t.Fatalf("bad input changed state: products %+v -> %+v, coupons %+v -> %+v", before, after, beforeCoupon, afterCoupon)
	}
}

func TestOversizedBodyWithoutContentLength(t *testing.T) {
	f := newFixture(t, token, nil)
	body := io.MultiReader(strings.NewReader(`{"user_id":"`), strings.NewReader(strings.Repeat("a", 80<<10)), strings.NewReader(`"}`))
	req := httptest.NewRequest("POST", "/api/v1/products/1/buy", body)
	req.ContentLength = -1
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	f.srv.ServeHTTP(rec, req)
	if rec.Code != 413 {
		t.Fatalf("streamed oversized body: %d %s", rec.Code, rec.Body)
	}
}

// TestRequestDeadline: a buy whose critical section outlives the request
// timeout is answered 503 timeout and writes nothing; the long-running
// routes (here a one-second CPU profile) are not cut off.
func TestRequestDeadline(t *testing.T) {
	db := testenv.SQLite(t)
	slow := inventory.SectionOptions{Delay: 500 * time.Millisecond}
	stages := map[string]inventory.Stage{"local-mutex": inventory.NewLocalMutex(db.Products(), "product", slow)}
	srv := httpapi.NewServer(httpapi.Deps{
		Instance:       "deadline-1",
		Products:       inventory.NewService(db.Products(), stages, "deadline-1", "O"),
		Stage:          "local-mutex",
		AdminToken:     token,
		RequestTimeout: 100 * time.Millisecond,
	})
	f := &fixture{t: t, db: db, srv: srv}
	rec := f.do(buy("late", 1))
	if rec.Code != 503 || problemType(t, rec) != "timeout" {
		t.Fatalf("a buy past the deadline: %d %s", rec.Code, rec.Body)
	}
	a, err := db.Products().Audit(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if a.Orders != 0 || a.Stock != a.InitialStock {
		t.Fatalf("a timed-out buy wrote something: %+v", a)
	}
	prof := f.do(admin(call{method: "GET", path: "/debug/pprof/profile?seconds=1"}))
	if prof.Code != 200 || prof.Body.Len() == 0 {
		t.Fatalf("a profile longer than the request timeout was cut off: %d", prof.Code)
	}
}

// interruptedStage waits out the request's deadline and then fails the way
// the embedded SQLite driver does when a context interrupts a statement:
// with an error of its own ("interrupted (9)"), not the context's.
type interruptedStage struct{}

func (interruptedStage) Buy(ctx context.Context, _ inventory.Order) error {
	<-ctx.Done()
	return errors.New("interrupted (9)")
}

// TestBackendCutShortByTheDeadlineIsNotAnInternalError: whatever a driver
// reports when the request's deadline cuts its call short, the answer is
// the deadline's (503 timeout, with Retry-After), never a 500.
func TestBackendCutShortByTheDeadlineIsNotAnInternalError(t *testing.T) {
	db := testenv.SQLite(t)
	srv := httpapi.NewServer(httpapi.Deps{
		Instance:       "deadline-2",
		Products:       inventory.NewService(db.Products(), map[string]inventory.Stage{"db-atomic": interruptedStage{}}, "deadline-2", "O"),
		Stage:          "db-atomic",
		RequestTimeout: 50 * time.Millisecond,
	})
	f := &fixture{t: t, db: db, srv: srv}
	rec := f.do(buy("cut-short", 1))
	if rec.Code != 503 || problemType(t, rec) != "timeout" || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("a backend call cut short by the deadline: %d %s (Retry-After %q)", rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}
}

// TestInfoListsStagesInTeachingOrder: /api/v1/info lists the stages this
// instance can run in the order the workshop teaches them.
func TestInfoListsStagesInTeachingOrder(t *testing.T) {
	f := newFixture(t, token, nil)
	rec := f.do(call{method: "GET", path: "/api/v1/info"})
	var info struct {
		Stages []string `json:"stages"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &info); err != nil {
		t.Fatal(err)
	}
	want := []string{inventory.StageUnlocked, inventory.StageLocalMutex, inventory.StageDBAtomic}
	if strings.Join(info.Stages, ",") != strings.Join(want, ",") {
		t.Fatalf("stages %v, want %v", info.Stages, want)
	}
}

// TestInfoNamesItsProcess: /api/v1/info names the process as host/pid, so
// the lab counts the CPU of instances that share one process once.
func TestInfoNamesItsProcess(t *testing.T) {
	f := newFixture(t, token, nil)
	rec := f.do(call{method: "GET", path: "/api/v1/info"})
	var info struct {
		Process      string `json:"process"`
		PIDNamespace string `json:"pid_namespace"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &info); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("/%d", os.Getpid()); !strings.HasSuffix(info.Process, want) || len(info.Process) <= len(want) {
		t.Fatalf("process %q, want host%s", info.Process, want)
	}
	// The pid's namespace: where /proc/self/ns/pid points, if anywhere.
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		ns = ""
	}
	if info.PIDNamespace != ns {
		t.Errorf("pid_namespace %q, want %q", info.PIDNamespace, ns)
	}
}

// TestJSONMediaTypes: a JSON body is taken under application/json in any of
// its spellings (parameters, case, spaces), and under nothing else.
func TestJSONMediaTypes(t *testing.T) {
	f := newFixture(t, token, nil)
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON", "application/json ;charset=UTF-8"} {
		rec := f.do(admin(call{method: "POST", path: "/api/v1/admin/products/2/reset", body: `{"stock":5}`, header: map[string]string{"Content-Type": ct}}))
		if rec.Code != 200 {
			t.Errorf("Content-Type %q: %d %s, want 200", ct, rec.Code, rec.Body)
		}
	}
	for _, ct := range []string{"application/jsonx", "application/json-patch+json", "text/json", "application/json, text/plain", "application/json; charset", " "} {
		rec := f.do(admin(call{method: "POST", path: "/api/v1/admin/products/2/reset", body: `{"stock":5}`, header: map[string]string{"Content-Type": ct}}))
		if rec.Code != 415 || problemType(t, rec) != "unsupported-media-type" {
			t.Errorf("Content-Type %q: %d %s, want 415 unsupported-media-type", ct, rec.Code, rec.Body)
		}
	}
}

// TestProblemDocsAnswerJSONWhenAskedFor: /problems/{slug} explains a problem
// type as problem+json to a client that accepts JSON, and as plain text to
// anyone else.
func TestProblemDocsAnswerJSONWhenAskedFor(t *testing.T) {
	f := newFixture(t, token, nil)
	rec := f.do(call{method: "GET", path: "/problems/sold-out", header: map[string]string{"Accept": "application/problem+json"}})
	var p api.Problem
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/problem+json" || json.Unmarshal(rec.Body.Bytes(), &p) != nil ||
		p.Type != "/problems/sold-out" || p.Status != 409 || p.Title != "Sold out" || p.Detail == "" {
		t.Fatalf("asked for JSON: %d %q %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	rec = f.do(call{method: "GET", path: "/problems/sold-out"})
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") || !strings.HasPrefix(rec.Body.String(), "Sold out (HTTP 409)") {
		t.Fatalf("plain: %d %q %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
}
