package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/seckill-lab/seckill/internal/httpapi"
	"github.com/seckill-lab/seckill/internal/idempotency"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// BenchmarkSoldOutBuy prices what a flash crowd mostly costs: the answer to
// a buyer who is too late. It runs the handler in process (no sockets), in
// parallel, and compares in one run:
//
//   - healthz: the router and middleware alone, the lab's HTTP ceiling;
//   - redis-atomic: one round trip to Redis (the reserve script says sold
//     out);
//   - redis-atomic+key: the same buy with an Idempotency-Key. The claim's
//     script runs the stage's refusal check, so the refusal is one round
//     trip too (it was three: claim, reserve, stored answer);
//   - remembered: the buy once the instance remembers the sell-out (the
//     crowd control, with epochs kept in memory): no round trip at all,
//     the post-sale wave's answer, to hold against healthz;
//   - redis-ping: the admin route that makes one round trip to Redis, the
//     lab's redis-round-trip baseline;
//   - remembered+key: the remembered buy with an Idempotency-Key: one read
//     of the key's record, to hold against redis-ping.
//
// Read the ratios of ns/op (make bench-buy runs it with benchstat-ready
// output).
func BenchmarkSoldOutBuy(b *testing.B) {
	rdb := testenv.Redis(b)
	db := testenv.SQLite(b)
	ctx := context.Background()
	if err := db.Products().Reset(ctx, 1, 0); err != nil {
		b.Fatal(err)
	}
	prefix := testenv.Name("bench")
	stage := redisstage.NewRedisAtomic(rdb, db.Products(), prefix, nil)
	h := httpapi.NewServer(httpapi.Deps{
		Instance:    "bench-1",
		Products:    inventory.NewService(db.Products(), map[string]inventory.Stage{"redis-atomic": stage}, "bench-1", "O"),
		Stage:       "redis-atomic",
		Idempotency: idempotency.New(rdb, idempotency.Options{Prefix: prefix + ":idem:"}),
	})
	var n atomic.Int64
	run := func(b *testing.B, req func() *http.Request, want int) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req())
				if rec.Code != want {
					b.Errorf("answer %d %s, want %d", rec.Code, rec.Body, want)
					return
				}
			}
		})
	}
	buy := func(key bool) func() *http.Request {
		return func() *http.Request {
			user := fmt.Sprintf("late-%d", n.Add(1))
			r := httptest.NewRequest("POST", "/api/v1/products/1/buy", strings.NewReader(`{"user_id":"`+user+`","quantity":1}`))
			r.Header.Set("Content-Type", "application/json")
			if key {
				r.Header.Set("Idempotency-Key", user)
			}
			return r
		}
	}
	b.Run("healthz", func(b *testing.B) {
		run(b, func() *http.Request { return httptest.NewRequest("GET", "/healthz", nil) }, 200)
	})
	b.Run("redis-atomic", func(b *testing.B) { run(b, buy(false), 409) })
	b.Run("redis-atomic+key", func(b *testing.B) { run(b, buy(true), 409) })

	crowd := admission.NewCrowd(admission.CrowdOptions{Queue: 64, Kind: "product", Epochs: fixedEpoch{}})
	remembering := crowd.Wrap(stage)
	h = httpapi.NewServer(httpapi.Deps{
		Instance:    "bench-2",
		Products:    inventory.NewService(db.Products(), map[string]inventory.Stage{"redis-atomic": remembering}, "bench-2", "O"),
		Stage:       "redis-atomic",
		Idempotency: idempotency.New(rdb, idempotency.Options{Prefix: prefix + ":idem2:"}),
		AdminToken:  "bench-token",
	})
	h.ServeHTTP(httptest.NewRecorder(), buy(false)()) // the stage says sold out once: remembered
	b.Run("remembered", func(b *testing.B) { run(b, buy(false), 409) })
	b.Run("redis-ping", func(b *testing.B) {
		run(b, func() *http.Request {
			r := httptest.NewRequest("GET", "/api/v1/admin/redis-ping", nil)
			r.Header.Set("Authorization", "Bearer bench-token")
			return r
		}, 200)
	})
	b.Run("remembered+key", func(b *testing.B) { run(b, buy(true), 409) })
}

// fixedEpoch is a fleet whose stock never comes back: one epoch, in memory.
type fixedEpoch struct{}

func (fixedEpoch) Epoch(context.Context, string) (string, error) { return "1", nil }
func (fixedEpoch) Bump(context.Context, string) error            { return nil }
