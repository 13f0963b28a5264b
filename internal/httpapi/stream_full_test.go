package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestFullOrderQueueIsOverloaded: under redis-stream with a queue of one
// entry and no writer, the first buyer is accepted (202) and the second
// is answered 503 overloaded with Retry-After, not sold out: the stock is
// there, the queue is not. The audit shows only the accepted order
// pending and the stock conserved.
func TestFullOrderQueueIsOverloaded(t *testing.T) {
	db := testenv.SQLite(t)
	rdb := testenv.Redis(t)
	ra := redisstage.NewRedisAtomic(rdb, db.Products(), testenv.Name("hq-"), nil)
	rs := redisstage.NewRedisStream(ra, redisstage.StreamOptions{MaxLen: 1})
	products := inventory.NewService(db.Products(), map[string]inventory.Stage{inventory.StageRedisStream: rs}, "test-1", "O").
		WithLifecycle(inventory.Lifecycle{RedisStock: ra, Queue: rs})
	coupons := inventory.NewService(db.Coupons(), map[string]inventory.Stage{inventory.StageDBAtomic: inventory.NewDBAtomic(db.Coupons())}, "test-1", "C")
	f := &fixture{t: t, db: db, srv: httpapi.NewServer(httpapi.Deps{
		Instance: "test-1", Products: products, Coupons: coupons, AdminToken: token, Stage: inventory.StageRedisStream,
	})}
	if rec := f.do(admin(call{method: "POST", path: "/api/v1/admin/products/1/reset", body: `{"stock":5}`})); rec.Code != 200 {
		t.Fatalf("reset: %d %s", rec.Code, rec.Body)
	}

	if rec := f.do(buy("alice", 1)); rec.Code != http.StatusAccepted {
		t.Fatalf("first buyer: %d %s, want 202", rec.Code, rec.Body)
	}
	rec := f.do(buy("bob", 1))
	if rec.Code != http.StatusServiceUnavailable || problemType(t, rec) != "overloaded" || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("a buy with the queue full: %d %s (Retry-After %q); want 503 overloaded with Retry-After", rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}
	var a api.Audit
	if rec := f.do(call{method: "GET", path: "/api/v1/products/1/audit"}); rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &a) != nil {
		t.Fatalf("audit: %d %s", rec.Code, rec.Body)
	}
	if a.PendingOrders != 1 || a.Pending != 1 || a.Stock != 5 || a.Sold != 0 || !a.Conserved {
		t.Fatalf("audit %+v; want alice's order alone pending, the database untouched, conserved", a)
	}
}
