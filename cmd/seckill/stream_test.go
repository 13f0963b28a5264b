package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
)

// waitAudit polls the audit through every instance until ok holds on each,
// and returns the last audits; it fails the test after a minute.
func (f *fleet) waitAudit(kind string, id int, ok func(api.Audit) bool) []api.Audit {
	f.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var all []api.Audit
		good := true
		for _, u := range f.urls {
			code, body := f.call("GET", fmt.Sprintf("%s/api/v1/%s/%d/audit", u, kind, id), "", nil)
			var a api.Audit
			if code != 200 || json.Unmarshal(body, &a) != nil {
				f.t.Fatalf("audit on %s: %d %s", u, code, body)
			}
			a.Reconcile = nil
			all = append(all, a)
			good = good && ok(a)
		}
		if good {
			return all
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("audits never reached the expected state: %+v", all)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestFleetRedisStream: 300 buyers on a stock of 100 across three
// instances, each with its order writer: 100 are accepted (202), the rest
// refused; once the queue drained, the 100 are confirmed orders and the
// stock is conserved.
func TestFleetRedisStream(t *testing.T) {
	f := newFleet(t, map[string]string{"SECKILL_STAGE": "redis-stream"})
	for _, kind := range []string{"products", "coupons"} {
		t.Run(kind, func(t *testing.T) {
			f.t = t
			f.reset(kind, 1, 100)
			path := "/api/v1/products/1/buy"
			if kind == "coupons" {
				path = "/api/v1/coupons/1/grab"
			}
			codes := f.burst("redis-stream", path, 300, func(i int) string { return fmt.Sprintf(`{"user_id":"s-%d"}`, i) })
			if codes[202] != 100 || codes[409]+codes[503] != 200 || codes[201] != 0 {
				t.Fatalf("answers %v; want 100 × 202 and the rest 409 or 503", codes)
			}
			audits := f.waitAudit(kind, 1, func(a api.Audit) bool { return a.PendingOrders == 0 })
			for _, a := range audits {
				if a.Sold != 100 || a.Orders != 100 || a.Stock != 0 || !a.Conserved || a.Oversold != 0 || a.Failed != 0 {
					t.Errorf("after the queue drained: %+v; want 100 confirmed, conserved", a)
				}
			}
			// Each order was counted confirmed once, by whichever
			// instance's writer settled it.
			label := map[string]string{"products": `kind="product"`, "coupons": `kind="coupon"`}[kind]
			total := fleetSum(t, f.urls, 100, "seckill_stream_time_to_confirm_seconds_count", label)
			if total != 100 {
				t.Errorf("time-to-confirm observations across the instances: %v, want 100, one per order", total)
			}
		})
	}
}

// TestFleetPaymentTimeout is the workshop's payment-timeout run on three
// instances: buy 10 of 10 under redis-stream, pay 4 (through different
// instances), and let the payment window (10s: wide enough for the four
// payments to land inside it on a busy machine) pass: the fleet's job
// cancels the 6 unpaid orders once, every instance's audit shows 6 units
// back in stock, 4 sold and paid, conserved; paying a cancelled order
// answers 409 order-cancelled; and the 6 units are buyable again on every
// instance (in Redis too), though one instance had remembered the item as
// sold out.
func TestFleetPaymentTimeout(t *testing.T) {
	f := newFleet(t, map[string]string{"SECKILL_STAGE": "redis-stream", "SECKILL_PAYMENT_TIMEOUT": "10s", "SECKILL_RECONCILE_INTERVAL": "300ms"})
	f.reset("products", 1, 10)
	var orders []string
	for i := 0; i < 10; i++ {
		code, body := f.call("POST", f.urls[i%3]+"/api/v1/products/1/buy", fmt.Sprintf(`{"user_id":"p-%d"}`, i), nil)
		var o api.Order
		if code != 202 || json.Unmarshal(body, &o) != nil {
			t.Fatalf("buy %d: %d %s", i, code, body)
		}
		orders = append(orders, o.OrderNo)
	}
	if code, body := f.call("POST", f.urls[0]+"/api/v1/products/1/buy", `{"user_id":"late"}`, nil); code != 409 {
		t.Fatalf("the 11th buyer: %d %s, want 409 sold-out", code, body)
	}
	f.waitAudit("products", 1, func(a api.Audit) bool { return a.PendingOrders == 0 })
	for i, no := range orders[:4] {
		code, body := f.call("POST", f.urls[(i+1)%3]+"/api/v1/orders/"+no+"/pay", "", map[string]string{"Idempotency-Key": "pay-" + no})
		if code != 200 {
			t.Fatalf("pay %s: %d %s", no, code, body)
		}
	}
	audits := f.waitAudit("products", 1, func(a api.Audit) bool { return a.CancelledOrders == 6 })
	for i, a := range audits {
		if a.Stock != 6 || a.Sold != 4 || a.Paid != 4 || a.Cancelled != 6 || !a.Conserved || a.InitialStock != 10 {
			t.Errorf("instance %d: %+v; want 6 back in stock, 4 sold and paid, 6 cancelled, conserved", i+1, a)
		}
	}
	for _, no := range orders[4:] {
		code, body := f.call("GET", f.urls[2]+"/api/v1/orders/"+no, "", nil)
		var o api.OrderStatus
		if code != 200 || json.Unmarshal(body, &o) != nil || o.Status != api.StatusCancelled {
			t.Errorf("order %s: %d %s; want cancelled", no, code, body)
		}
	}
	code, body := f.call("POST", f.urls[1]+"/api/v1/orders/"+orders[5]+"/pay", "", nil)
	if code != http.StatusConflict || !json.Valid(body) || problemOf(body) != "/problems/order-cancelled" {
		t.Errorf("paying a cancelled order: %d %s; want 409 order-cancelled", code, body)
	}
	// The units are back in the Redis copy too: six new buyers get them,
	// on every instance, and the seventh finds the item sold out. The
	// database cancels the orders first and the copy gets their units back
	// after, one order at a time, so the audit can show all six cancelled
	// while the copy still has none: a buyer who finds none yet tries again.
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < 6; i++ {
		for {
			code, body := f.call("POST", f.urls[i%3]+"/api/v1/products/1/buy", fmt.Sprintf(`{"user_id":"again-%d"}`, i), nil)
			if code == 202 {
				break
			}
			if code != http.StatusConflict || problemOf(body) != api.ProblemTypePrefix+"sold-out" || time.Now().After(deadline) {
				t.Fatalf("buyer %d after the cancellation: %d %s, want 202", i, code, body)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if code, body := f.call("POST", f.urls[0]+"/api/v1/products/1/buy", `{"user_id":"again-x"}`, nil); code != 409 {
		t.Fatalf("the 7th buyer after the cancellation: %d %s, want 409: only 6 units came back", code, body)
	}
}

func problemOf(body []byte) string {
	var p api.Problem
	_ = json.Unmarshal(body, &p)
	return p.Type
}
