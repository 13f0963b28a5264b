package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/orderwriter"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// streamFixture is an instance whose default stage is redis-stream, with a
// payment window of a minute on a clock the test moves, and an order
// writer the test starts when it wants the queue to drain.
type streamFixture struct {
	*fixture
	products, coupons *inventory.Service
	queue             *redisstage.RedisStream
	now               atomic.Pointer[time.Time]
	startWriter       func()
}

func newStreamFixture(t *testing.T) *streamFixture {
	t.Helper()
	db := testenv.SQLite(t)
	rdb := testenv.Redis(t)
	ns := testenv.Name("h-")
	f := &streamFixture{}
	start := time.Now()
	f.now.Store(&start)
	clock := func() time.Time { return *f.now.Load() }
	build := func(st inventory.Store, kind string) (*inventory.Service, *redisstage.RedisStream) {
		ra := redisstage.NewRedisAtomic(rdb, st, ns+kind, nil)
		rs := redisstage.NewRedisStream(ra, redisstage.StreamOptions{})
		stages := map[string]inventory.Stage{inventory.StageDBAtomic: inventory.NewDBAtomic(st), inventory.StageRedisStream: rs}
		svc := inventory.NewService(st, stages, "test-1", map[string]string{"product": "O", "coupon": "C"}[kind]).
			WithLifecycle(inventory.Lifecycle{PaymentTimeout: time.Minute, RedisStock: ra, Queue: rs, Now: clock})
		return svc, rs
	}
	f.products, f.queue = build(db.Products(), "product")
	var couponQueue *redisstage.RedisStream
	f.coupons, couponQueue = build(db.Coupons(), "coupon")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var started bool
	f.startWriter = func() {
		started = true
		// Built here, not in the goroutines: a writer takes over its
		// queue's wake-ups, which the handlers read.
		pw := orderwriter.New(f.queue, db.Products(), orderwriter.Options{Poll: 10 * time.Millisecond})
		cw := orderwriter.New(couponQueue, db.Coupons(), orderwriter.Options{Poll: 10 * time.Millisecond})
		go func() {
			defer close(done)
			coupons := make(chan struct{})
			go func() { defer close(coupons); _ = cw.Run(ctx) }()
			_ = pw.Run(ctx)
			<-coupons
		}()
	}
	t.Cleanup(func() {
		cancel()
		if started {
			<-done
		}
	})
	srv := httpapi.NewServer(httpapi.Deps{
		Instance:    "test-1",
		Products:    f.products,
		Coupons:     f.coupons,
		AdminToken:  token,
		Stage:       inventory.StageRedisStream,
		Idempotency: idempotency.New(rdb, idempotency.Options{Prefix: ns + ":idem:"}),
	})
	f.fixture = &fixture{t: t, db: db, srv: srv}
	return f
}

func (f *streamFixture) advance(d time.Duration) {
	now := f.now.Load().Add(d)
	f.now.Store(&now)
}

// order GETs an order's status.
func (f *streamFixture) order(no string) api.OrderStatus {
	f.t.Helper()
	rec := f.do(call{method: "GET", path: "/api/v1/orders/" + no})
	if rec.Code != 200 {
		f.t.Fatalf("GET order %s: %d %s", no, rec.Code, rec.Body)
	}
	var o api.OrderStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &o); err != nil {
		f.t.Fatal(err)
	}
	return o
}

// waitFor polls an order until it has the status, within a minute.
func (f *streamFixture) waitFor(no, status string) api.OrderStatus {
	f.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		o := f.order(no)
		if o.Status == status {
			return o
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("order %s is %s, never became %s", no, o.Status, status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func pay(no string, header map[string]string) call {
	return call{method: "POST", path: "/api/v1/orders/" + no + "/pay", header: header}
}

// TestOrderLifecycleOverHTTP: a redis-stream buy answers 202 with
// Location; the order there is pending, then confirmed once written, with
// a payment deadline; paying it answers 200 paid (again with the same
// Idempotency-Key, replayed); paying a pending order answers 409 with
// Retry-After; an order paid too late answers 409 order-cancelled, before
// and after the job cancelled it; the other stages still answer 201.
func TestOrderLifecycleOverHTTP(t *testing.T) {
	f := newStreamFixture(t)
	accept := func(user string) string {
		t.Helper()
		rec := f.do(buy(user, 1))
		if rec.Code != http.StatusAccepted {
			t.Fatalf("redis-stream buy: %d %s, want 202", rec.Code, rec.Body)
		}
		var o api.Order
		if err := json.Unmarshal(rec.Body.Bytes(), &o); err != nil || o.Status != api.StatusPending || o.OrderNo == "" {
			t.Fatalf("202 body %s (%v); want a pending order", rec.Body, err)
		}
		if loc := rec.Header().Get("Location"); loc != "/api/v1/orders/"+o.OrderNo {
			t.Fatalf("Location %q, want /api/v1/orders/%s", loc, o.OrderNo)
		}
		return o.OrderNo
	}
	a, b := accept("alice"), accept("bob")

	if o := f.order(a); o.Status != api.StatusPending || o.WrittenAt != nil || o.Kind != "product" || o.ProductID != 1 || o.UserID != "alice" {
		t.Fatalf("order before the writer ran: %+v; want pending, not written", o)
	}
	rec := f.do(pay(a, nil))
	if rec.Code != 409 || problemType(t, rec) != "order-pending" || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("paying a pending order: %d %s (Retry-After %q); want 409 order-pending with Retry-After", rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}

	f.startWriter()
	o := f.waitFor(a, api.StatusConfirmed)
	if o.WrittenAt == nil || o.PayBy == nil || !o.PayBy.Equal(o.CreatedAt.Add(time.Minute)) {
		t.Fatalf("confirmed order %+v; want written_at and pay_by = created_at + 1m", o)
	}
	f.waitFor(b, api.StatusConfirmed)

	key := map[string]string{"Idempotency-Key": "pay-" + a}
	for i := 0; i < 2; i++ {
		rec := f.do(pay(a, key))
		var got api.OrderStatus
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &got) != nil || got.Status != api.StatusPaid || got.PayBy != nil {
			t.Fatalf("pay #%d: %d %s; want 200 paid", i+1, rec.Code, rec.Body)
		}
		if replayed := rec.Header().Get("Idempotent-Replayed") == "true"; replayed != (i == 1) {
			t.Fatalf("pay #%d: replayed=%v", i+1, replayed)
		}
	}
	if rec := f.do(pay(a, nil)); rec.Code != 200 {
		t.Fatalf("paying a paid order again without a key: %d %s; want 200", rec.Code, rec.Body)
	}
	if rec := f.do(call{method: "POST", path: "/api/v1/orders/" + b + "/pay", body: `{"user_id":"mallory"}`}); rec.Code != 404 || problemType(t, rec) != "order-not-found" {
		t.Fatalf("paying someone else's order: %d %s; want 404 order-not-found", rec.Code, rec.Body)
	}

	f.advance(2 * time.Minute)
	if rec := f.do(pay(b, nil)); rec.Code != 409 || problemType(t, rec) != "order-cancelled" {
		t.Fatalf("paying after the window, before the job: %d %s; want 409 order-cancelled", rec.Code, rec.Body)
	}
	rep, err := f.products.CancelUnpaid(context.Background())
	if err != nil || rep.Cancelled != 1 {
		t.Fatalf("cancel job: %+v, %v; want bob's order cancelled", rep, err)
	}
	if o := f.order(b); o.Status != api.StatusCancelled {
		t.Fatalf("bob's order %+v, want cancelled", o)
	}
	if rec := f.do(pay(b, map[string]string{"Idempotency-Key": "late"})); rec.Code != 409 || problemType(t, rec) != "order-cancelled" {
		t.Fatalf("paying a cancelled order: %d %s; want 409 order-cancelled", rec.Code, rec.Body)
	}
	var audit api.Audit
	if rec := f.do(call{method: "GET", path: "/api/v1/products/1/audit"}); rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &audit) != nil {
		t.Fatalf("audit: %d %s", rec.Code, rec.Body)
	}
	if audit.Sold != 1 || audit.Paid != 1 || audit.Cancelled != 1 || audit.CancelledOrders != 1 || audit.Pending != 0 || !audit.Conserved {
		t.Fatalf("audit %+v; want 1 sold and paid, 1 cancelled, conserved", audit)
	}

	// The synchronous stages answer 201 confirmed, and their orders can be
	// looked up and paid too.
	rec = f.do(admin(call{method: "POST", path: "/api/v1/products/1/buy", body: `{"user_id":"carol"}`, header: map[string]string{"X-Seckill-Stage": "db-atomic"}}))
	var sync api.Order
	if rec.Code != 201 || json.Unmarshal(rec.Body.Bytes(), &sync) != nil || sync.Status != api.StatusConfirmed || rec.Header().Get("Location") != "/api/v1/orders/"+sync.OrderNo {
		t.Fatalf("db-atomic buy: %d %s (Location %q); want 201 confirmed with the order's Location", rec.Code, rec.Body, rec.Header().Get("Location"))
	}
	if o := f.order(sync.OrderNo); o.Status != api.StatusConfirmed || o.Stage != "db-atomic" {
		t.Fatalf("db-atomic order %+v", o)
	}
	if rec := f.do(pay(sync.OrderNo, nil)); rec.Code != 200 {
		t.Fatalf("paying a db-atomic order: %d %s", rec.Code, rec.Body)
	}
}

// TestOrderRoutesRefuseBadInput: malformed and unknown order numbers,
// coupon grabs (free: nothing to pay), and bad pay bodies get their
// problem types.
func TestOrderRoutesRefuseBadInput(t *testing.T) {
	f := newStreamFixture(t)
	f.startWriter()
	rec := f.do(call{method: "POST", path: "/api/v1/coupons/1/grab", body: `{"user_id":"dave"}`})
	var g api.Grab
	if rec.Code != 202 || json.Unmarshal(rec.Body.Bytes(), &g) != nil || !strings.HasPrefix(g.OrderNo, "C") {
		t.Fatalf("redis-stream grab: %d %s; want 202 with a C number", rec.Code, rec.Body)
	}
	if o := f.waitFor(g.OrderNo, api.StatusConfirmed); o.Kind != "coupon" || o.CouponID != 1 || o.PayBy != nil {
		t.Fatalf("grab %+v; want a confirmed coupon grab without a payment deadline", o)
	}
	cases := []struct {
		name    string
		call    call
		status  int
		problem string
	}{
		{"unknown order", call{method: "GET", path: "/api/v1/orders/O20250101000000ffffffffffffffff"}, 404, "order-not-found"},
		{"unknown kind", call{method: "GET", path: "/api/v1/orders/X1"}, 404, "order-not-found"},
		{"bad characters", call{method: "GET", path: "/api/v1/orders/O1%27%3B"}, 400, "invalid-order-number"},
		{"too long", call{method: "GET", path: "/api/v1/orders/O" + strings.Repeat("1", 40)}, 400, "invalid-order-number"},
		{"pay unknown", pay("O1", nil), 404, "order-not-found"},
		{"pay a coupon grab", pay(g.OrderNo, nil), 400, "invalid-request"},
		{"pay with a malformed body", call{method: "POST", path: "/api/v1/orders/O1/pay", body: `{"user_id":`}, 400, "malformed-json"},
		{"pay with an unknown field", call{method: "POST", path: "/api/v1/orders/O1/pay", body: `{"card":"4111"}`}, 400, "malformed-json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := f.do(c.call)
			if rec.Code != c.status || problemType(t, rec) != c.problem {
				t.Fatalf("%d %s; want %d %s", rec.Code, rec.Body, c.status, c.problem)
			}
			if strings.Contains(rec.Body.String(), "coupon_batches") {
				t.Fatalf("the answer names a table: %s", rec.Body)
			}
		})
	}
}
