package main

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/seckill-lab/seckill/internal/api"
)

// TestFleetRateLimit: three instances share one limit per account and per
// client address (SECKILL_RATE_LIMIT_BY=account,address), on every safe
// stage. One account's 30 simultaneous buys, spread over the instances,
// get 2 past the limit (the burst) and 28 × 429; ten fresh accounts behind
// one address (named by the trusted proxy's X-Forwarded-For) get 2 past
// and 8 × 429; a buyer of another address is served. Once the item is
// sold out, the exhausted account hears 409 sold-out, not 429: the
// sold-out memory comes before the limiter.
func TestFleetRateLimit(t *testing.T) {
	f := newFleet(t, map[string]string{
		"SECKILL_STAGE":           "db-atomic",
		"SECKILL_RATE_INTERVAL":   "1h", // no test outlives an interval: only the burst passes
		"SECKILL_RATE_BURST":      "2",
		"SECKILL_RATE_LIMIT_BY":   "account,address",
		"SECKILL_TRUSTED_PROXIES": "127.0.0.1, ::1",
	})
	for i, stage := range []string{"db-atomic", "redis-atomic", "redis-lock"} {
		t.Run(stage, func(t *testing.T) {
			f.t = t
			f.reset("products", 1, 100)
			scalper := fmt.Sprintf("scalper-%d", i)
			codes := f.burstFrom(stage, "/api/v1/products/1/buy", 30, func(int) (string, string) {
				return fmt.Sprintf(`{"user_id":%q}`, scalper), fmt.Sprintf("198.51.100.%d", 10+i)
			})
			if codes[429] != 28 || codes[201] != 1 || codes[409] != 1 {
				t.Errorf("one account, 30 buys at once: %v; want 28 × 429, one 201 and one 409 already-purchased", codes)
			}
			farm := fmt.Sprintf("203.0.113.%d", 10+i)
			codes = f.burstFrom(stage, "/api/v1/products/1/buy", 10, func(j int) (string, string) {
				return fmt.Sprintf(`{"user_id":"farm-%d-%d"}`, i, j), farm
			})
			if codes[429] != 8 || codes[201] != 2 {
				t.Errorf("ten accounts behind one address: %v; want 2 × 201 and 8 × 429", codes)
			}
			codes = f.burstFrom(stage, "/api/v1/products/1/buy", 1, func(int) (string, string) {
				return fmt.Sprintf(`{"user_id":"honest-%d"}`, i), fmt.Sprintf("192.0.2.%d", 10+i)
			})
			if codes[201] != 1 {
				t.Errorf("a buyer of its own address: %v; want 201", codes)
			}
		})
	}
	t.Run("sold out before the limit", func(t *testing.T) {
		f.t = t
		f.reset("products", 1, 0)
		for j, user := range []string{"first-late", "scalper-0"} {
			codes := f.burstFrom("db-atomic", "/api/v1/products/1/buy", 1, func(int) (string, string) {
				return fmt.Sprintf(`{"user_id":%q}`, user), fmt.Sprintf("192.0.2.%d", 100+j)
			})
			if codes[409] != 1 {
				t.Errorf("%s on a sold-out item: %v; want 409 sold-out", user, codes)
			}
		}
	})
}

// TestRateLimitSwitchedAtRuntime: three instances start without a limit;
// PUT /api/v1/admin/rate-limit on each turns a per-address limit on and
// then off again, on a stage that folds keyed buys into their claim
// (redis-atomic) and on one that does not (db-atomic). Ten accounts behind
// one address, each buy with its own Idempotency-Key, all buy while the
// limit is off; with it on, ten more behind another address get 2 past
// (the burst) and 8 × 429, the folded path included; once it is off
// again, the same address buys freely.
func TestRateLimitSwitchedAtRuntime(t *testing.T) {
	f := newFleet(t, map[string]string{"SECKILL_STAGE": "db-atomic", "SECKILL_TRUSTED_PROXIES": "127.0.0.1, ::1"})
	admin := map[string]string{"Authorization": "Bearer " + fleetToken}
	set := func(body string, on bool) {
		t.Helper()
		for _, u := range f.urls {
			code, b := f.call("PUT", u+"/api/v1/admin/rate-limit", body, admin)
			var got api.RateLimit
			if code != 200 || json.Unmarshal(b, &got) != nil || got.On != on {
				t.Fatalf("PUT %s on %s: %d %s", body, u, code, b)
			}
		}
	}
	// Ten new accounts behind addr, each buy keyed, at once.
	farm := func(stage, tag, addr string) map[int]int {
		var mu sync.Mutex
		codes := map[int]int{}
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Go(func() {
				user := fmt.Sprintf("%s-%s-%d", stage, tag, i)
				code, _ := f.call("POST", f.urls[i%len(f.urls)]+"/api/v1/products/1/buy", fmt.Sprintf(`{"user_id":%q}`, user),
					map[string]string{"X-Seckill-Stage": stage, "Authorization": "Bearer " + fleetToken, "X-Forwarded-For": addr, "Idempotency-Key": user})
				mu.Lock()
				codes[code]++
				mu.Unlock()
			})
		}
		wg.Wait()
		return codes
	}
	for i, stage := range []string{"redis-atomic", "db-atomic"} {
		t.Run(stage, func(t *testing.T) {
			f.t = t
			f.reset("products", 1, 100)
			a, b := fmt.Sprintf("198.51.100.%d", 20+i), fmt.Sprintf("203.0.113.%d", 20+i)
			if codes := farm(stage, "off", a); codes[201] != 10 {
				t.Errorf("limit off, ten accounts behind one address: %v; want 10 × 201", codes)
			}
			set(`{"interval_ms":3600000,"burst":2,"by":["address"]}`, true)
			if codes := farm(stage, "on", b); codes[201] != 2 || codes[429] != 8 {
				t.Errorf("limit on, ten accounts behind one address: %v; want 2 × 201 and 8 × 429", codes)
			}
			set(`{"interval_ms":0}`, false)
			if codes := farm(stage, "off-again", b); codes[201] != 10 {
				t.Errorf("limit off again, the limited address: %v; want 10 × 201", codes)
			}
		})
	}
}
