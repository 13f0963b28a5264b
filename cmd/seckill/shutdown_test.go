package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// TestGracefulShutdown cancels serve's context (what SIGTERM does) while
// buyers queue on a product's lock inside a slow critical section, and
// checks: new connections are refused, no answer is lost, every 201 has its
// order and no order lacks one, stock is conserved, and the lock is free.
func TestGracefulShutdown(t *testing.T) {
	skipShort(t)
	cases := []struct {
		name    string
		timeout string
		allDone bool // every request finishes with 201 inside the bound
	}{
		{"drains in-flight buys", "20s", true},
		{"cancels buys that outlive the bound", "250ms", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { shutdownCase(t, tc.timeout, tc.allDone) })
	}
}

func shutdownCase(t *testing.T, timeout string, allDone bool) {
	dsn := testenv.MySQLDSN(t)
	rp := testenv.StartRedis(t)
	addr := testkit.FreeAddrs(t, 1)[0]
	env := map[string]string{
		"SECKILL_ADDR":                   addr,
		"SECKILL_MYSQL_DSN":              dsn,
		"SECKILL_REDIS_ADDR":             rp.Addr,
		"SECKILL_ADMIN_TOKEN":            "shutdown-token",
		"SECKILL_STAGE":                  "redis-lock",
		"SECKILL_CRITICAL_SECTION_DELAY": "150ms",
		"SECKILL_LOCK_WAIT":              "30s",
		"SECKILL_REQUEST_TIMEOUT":        "60s",
		"SECKILL_RECONCILE_INTERVAL":     "0s",
		"SECKILL_SHUTDOWN_TIMEOUT":       timeout,
		"SECKILL_LOG_LEVEL":              "error",
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr testkit.SyncBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve"}, func(k string) string { return env[k] }, &stdout, &stderr) }()
	base := "http://" + addr
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	if err := testkit.WaitHealthy(wctx, base+"/readyz", done); err != nil {
		t.Fatal(err)
	}

	// The test holds the product's lock until every buyer is inside the
	// server: otherwise the six are in flight together only from the last
	// arrival until the first leaves its 150ms section, a moment a busy
	// machine can spread them past.
	rdb := rp.Client()
	locks, err := lock.New(rdb, lock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer locks.Close()
	gate, err := locks.Obtain(context.Background(), "product:1", time.Minute, lock.ObtainOptions{})
	if err != nil {
		t.Fatal(err)
	}

	const buyers = 6
	codes := make([]int, buyers)
	problems := make([]string, buyers)
	var wg sync.WaitGroup
	// Buyers have a transport of their own (no idle connection left by the
	// health polls, which shutdown would close under a request about to be
	// sent) and send Idempotency-Keys, which also lets net/http retry a
	// POST whose connection closed before the server read it.
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{}}
	for i := 0; i < buyers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req, err := http.NewRequest("POST", base+"/api/v1/products/1/buy", strings.NewReader(fmt.Sprintf(`{"user_id":"s%d"}`, i)))
			if err != nil {
				t.Error(err)
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", fmt.Sprintf("shutdown-%d", i))
			resp, err := client.Do(req)
			if err != nil {
				t.Errorf("buyer %d lost its answer: %v", i, err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			codes[i], problems[i] = resp.StatusCode, problemOf(body)
		}(i)
	}
	// Shut down once every buyer's request is inside the server (one holds
	// the lock, the others queue behind it). A request still in the
	// listener's backlog when it closes is reset without being read, which
	// is what stop accepting means, but it is not what this test is about.
	lockKey := "lock:{product:1}"
	held := func() bool {
		v, err := rdb.Get(context.Background(), lockKey).Result()
		return err == nil && !strings.HasPrefix(v, "|")
	}
	deadline := time.Now().Add(30 * time.Second)
	for inFlight(t, base, "/api/v1/products/:id/buy") < buyers {
		if time.Now().After(deadline) {
			t.Fatalf("the buyers never all reached the server (%v in flight)", inFlight(t, base, "/api/v1/products/:id/buy"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Then one buyer takes the lock and the others queue behind it.
	if err := gate.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	for !held() {
		if time.Now().After(deadline) {
			t.Fatal("no buyer took the lock after the test let it go")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	// The listener closes at once: a new buyer is refused, not half-served.
	refused := false
	for i := 0; i < 100 && !refused; i++ {
		_, err := http.Post(base+"/healthz", "application/json", nil)
		refused = err != nil
		time.Sleep(5 * time.Millisecond)
	}
	if !refused {
		t.Error("new connections were still accepted after shutdown began")
	}
	wg.Wait()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return")
	}

	// Each buyer's answer against the database: a 201 holds an order; a
	// buy cut off by the bound may have committed just before (503 whose
	// outcome is unknown: cancelled, timeout, outcome-unknown, which a
	// retry with its key resolves), and any other answer wrote nothing.
	ordered := ordersByUser(t, dsn)
	created := 0
	for i, c := range codes {
		has := ordered[fmt.Sprintf("s%d", i)]
		switch {
		case c == 201:
			created++
			if !has {
				t.Errorf("buyer %d was answered 201 and holds no order", i)
			}
		case c == 503 && allDone:
			t.Errorf("buyer %d was cut off (%s) although the bound allowed it to finish", i, problems[i])
		case c == 503 && slices.Contains([]string{"/problems/cancelled", "/problems/timeout", "/problems/outcome-unknown"}, problems[i]):
			// either way
		case c == 503:
			if has {
				t.Errorf("buyer %d was told %s (nothing written) and holds an order", i, problems[i])
			}
		default:
			t.Errorf("buyer %d: status %d %s", i, c, problems[i])
		}
	}
	if allDone && created != buyers {
		t.Errorf("want all %d buyers served, got %d", buyers, created)
	}
	if !allDone && created == buyers {
		t.Errorf("the short bound should have cut some buyers off (delay 150ms x %d)", buyers)
	}
	if held() {
		t.Error("the product's lock is still held after shutdown")
	}
	orders, initial, stock := auditMySQL(t, dsn)
	if orders != len(ordered) || initial-stock != orders {
		t.Errorf("orders=%d (of %d buyers) initial=%d stock=%d: the stock and the orders disagree", orders, len(ordered), initial, stock)
	}
}

// ordersByUser reads which users hold an order of product 1.
func ordersByUser(t *testing.T, dsn string) map[string]bool {
	t.Helper()
	db, err := openMySQL(context.Background(), dsn, store.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var users string
	if err := db.Raw(context.Background(), "SELECT COALESCE(GROUP_CONCAT(user_id SEPARATOR ','), '') FROM orders WHERE product_id = 1").Scan(&users); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, u := range strings.Split(users, ",") {
		if u != "" {
			out[u] = true
		}
	}
	return out
}

// inFlight reads the in-flight gauge of route from /metrics.
func inFlight(t *testing.T, base, route string) float64 {
	t.Helper()
	return sample(scrape(t, base), "seckill_http_requests_in_flight", `route="`+route+`"`)
}

func auditMySQL(t *testing.T, dsn string) (orders, initial, stock int) {
	t.Helper()
	db, err := openMySQL(context.Background(), dsn, store.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Raw(context.Background(), "SELECT COUNT(*) FROM orders WHERE product_id = 1").Scan(&orders); err != nil {
		t.Fatal(err)
	}
	if err := db.Raw(context.Background(), "SELECT initial_stock, stock FROM products WHERE id = 1").Scan(&initial, &stock); err != nil {
		t.Fatal(err)
	}
	return orders, initial, stock
}
