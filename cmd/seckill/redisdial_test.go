package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestRedisRestartCostsOneFailurePerConnection: the app's client does not
// check a pooled connection before each use (redisdial.go), so after a
// Redis restart each of its idle connections fails its next command, once
// (the client sends a command once), and is dropped; the next command
// dials a new connection, and every command after that succeeds.
func TestRedisRestartCostsOneFailurePerConnection(t *testing.T) {
	const pool = 4
	p := testenv.StartRedis(t)
	rdb := newRedisClient(config.Config{RedisAddrs: []string{p.Addr}, RedisPool: pool}).(*redis.Client)
	t.Cleanup(func() { _ = rdb.Close() })
	testenv.WarmPool(t, rdb, pool)
	p.Restart()
	ctx := context.Background()
	failures := 0
	for ok := 0; ok < 2*pool; {
		if err := rdb.Ping(ctx).Err(); err != nil {
			failures++
			if failures > pool {
				t.Fatalf("%d failed commands after the restart with %d pooled connections; the last: %v", failures, pool, err)
			}
			continue
		}
		ok++
	}
	if failures != pool {
		t.Fatalf("%d failed commands after the restart, want one for each of the %d pooled connections: a check of each connection before use, which the app turns off, hid them", failures, pool)
	}
}

// TestRedisRestartCostsABuyerA503PerConnection: the same at a buyer's
// door. After a Redis restart a redis-atomic instance answers at most one
// buyer per pooled connection 503, each with a problem type that tells
// the truth (unavailable: nothing was written; or outcome-unknown), and
// then sells again; the item's audit counts exactly the buyers told 201.
func TestRedisRestartCostsABuyerA503PerConnection(t *testing.T) {
	skipShort(t)
	const pool = 4
	p := testenv.StartRedis(t)
	env := map[string]string{"SECKILL_ADMIN_TOKEN": fleetToken, "SECKILL_RECONCILE_INTERVAL": "0s", "SECKILL_STAGE": "redis-atomic",
		"SECKILL_REDIS_ADDR": p.Addr, "SECKILL_REDIS_POOL": fmt.Sprint(pool)}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	rdb := newRedisClient(cfg).(*redis.Client)
	b := backends{db: testenv.SQLite(t), redis: rdb}
	t.Cleanup(func() { closeBackends(b, slog.New(slog.DiscardHandler)) })
	f := &fleet{t: t, client: &http.Client{Timeout: 30 * time.Second}}
	url := serveInstances(t, cfg, b, 1, "restart")[0]
	f.urls = []string{url, url}
	f.reset("products", 1, 1000)
	buy := func(i int) (int, []byte) {
		return f.call("POST", url+"/api/v1/products/1/buy", fmt.Sprintf(`{"user_id":"restart-%d","quantity":1}`, i), nil)
	}
	if code, body := buy(0); code != 201 {
		t.Fatalf("buy before the restart: %d %s", code, body)
	}
	sold, refused := 1, 0
	testenv.WarmPool(t, rdb, pool)
	p.Restart()
	for i, ok := 1, 0; ok < 2*pool; i++ {
		code, body := buy(i)
		switch code {
		case 201:
			sold++
			ok++
			continue
		case 503:
			var pr api.Problem
			if err := json.Unmarshal(body, &pr); err != nil || (pr.Type != "/problems/unavailable" && pr.Type != "/problems/outcome-unknown") {
				t.Fatalf("buyer %d after the restart: 503 %s; want unavailable or outcome-unknown", i, body)
			}
			refused++
		default:
			t.Fatalf("buyer %d after the restart: %d %s", i, code, body)
		}
		if refused > pool {
			t.Fatalf("%d buyers refused after the restart with %d pooled connections", refused, pool)
		}
	}
	if a := f.audit("products", 1); a.Orders != sold {
		t.Fatalf("the audit counts %d orders, and %d buyers were told 201 (%d told 503)", a.Orders, sold, refused)
	}
	t.Logf("%d buyers told 503 after the restart, %d pooled connections", refused, pool)
}

// TestRedisOverAUnixSocket: SECKILL_REDIS_ADDR and SECKILL_REDLOCK_ADDRS
// take unix:/path, for a Redis on the same machine: the app's client and
// a RedLock instance's client both reach a redis-server that listens on
// a Unix socket only, and a redis-atomic instance sells through it.
func TestRedisOverAUnixSocket(t *testing.T) {
	sock := testenv.StartRedisUnix(t)
	env := map[string]string{"SECKILL_ADMIN_TOKEN": fleetToken, "SECKILL_RECONCILE_INTERVAL": "0s", "SECKILL_STAGE": "redis-atomic",
		"SECKILL_REDIS_ADDR": "unix:" + sock, "SECKILL_REDLOCK_ADDRS": "unix:" + sock}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rl := redlockClient(cfg.RedlockAddrs[0], "", 0)
	t.Cleanup(func() { _ = rl.Close() })
	if err := rl.Ping(ctx).Err(); err != nil {
		t.Fatalf("the RedLock instance's client over %s: %v", cfg.RedlockAddrs[0], err)
	}
	b := backends{db: testenv.SQLite(t), redis: newRedisClient(cfg)}
	t.Cleanup(func() { closeBackends(b, slog.New(slog.DiscardHandler)) })
	if err := b.redis.Ping(ctx).Err(); err != nil {
		t.Fatalf("the app's client over %s: %v", cfg.RedisAddrs[0], err)
	}
	url := serveInstances(t, cfg, b, 1, "unix")[0]
	f := &fleet{t: t, client: &http.Client{Timeout: 30 * time.Second}, urls: []string{url, url}}
	f.reset("products", 1, 10)
	if code, body := f.call("POST", url+"/api/v1/products/1/buy", `{"user_id":"unix-1","quantity":1}`, nil); code != 201 {
		t.Fatalf("buy through a Redis on a Unix socket: %d %s", code, body)
	}
	if n, err := b.redis.Exists(ctx, "seckill:{product:1}:stock").Result(); err != nil || n != 1 {
		t.Fatalf("the sale's copy of the stock is not in the Redis on %s: %d, %v", sock, n, err)
	}
}
