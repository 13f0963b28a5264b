package main

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestStartCopiesNothingIntoRedis: an instance started over a catalogue
// of 2,000 products and 2,000 coupon batches leaves Redis without a copy
// of any item's stock: a copy is loaded by the item's reset or its first
// buy, so a start costs the same with two items as with 100,000. Its
// first buy then loads its copy, and only its.
func TestStartCopiesNothingIntoRedis(t *testing.T) {
	ctx := context.Background()
	db := testenv.SQLite(t)
	for _, l := range [](interface {
		LoadCatalogue(context.Context, int, int) (int, error)
	}){db.Products(), db.Coupons()} {
		if _, err := l.LoadCatalogue(ctx, 2000, 100); err != nil {
			t.Fatal(err)
		}
	}
	rp := testenv.StartRedis(t)
	rdb := redis.NewClient(clientOptions(rp.Addr))
	b := backends{db: db, redis: rdb}
	t.Cleanup(func() { closeBackends(b, slog.New(slog.DiscardHandler)) })
	env := map[string]string{"SECKILL_ADMIN_TOKEN": fleetToken, "SECKILL_RECONCILE_INTERVAL": "0s", "SECKILL_STAGE": "redis-atomic"}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	urls := serveInstances(t, cfg, b, 1, "start")
	copies := func() []string {
		t.Helper()
		keys, err := rp.Client().Keys(ctx, "seckill:{*}:stock").Result()
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	if k := copies(); len(k) != 0 {
		t.Fatalf("after the start Redis holds %d copies of the stock (%v ...); want none", len(k), k[:min(3, len(k))])
	}
	f := &fleet{t: t, client: &http.Client{Timeout: 30 * time.Second}}
	if code, body := f.call("POST", urls[0]+"/api/v1/products/42/buy", `{"user_id":"u1","quantity":1}`, nil); code != 201 {
		t.Fatalf("first buy of product 42: %d %s", code, body)
	}
	if k := copies(); len(k) != 1 || k[0] != "seckill:{product:42}:stock" {
		t.Errorf("after the first buy of product 42 Redis holds the copies %v; want product 42's alone", k)
	}
}
