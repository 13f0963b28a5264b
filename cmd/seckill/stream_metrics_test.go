package main

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the row lock below is held on a connection of its own
	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// TestStreamMetricsFollowTheQueue: the redis-stream gauges and the
// dead-letter counter, read from /metrics of two instances built by the
// composition root.
//
//   - Lag and pending entries: the test holds the product's row lock in
//     MySQL, so the writer that reads the one accepted order blocks in its
//     write. The entry is then delivered and unacknowledged, and the order
//     accepted and unwritten, for as long as the test wants: an instance
//     reports seckill_stream_lag_orders 1 and
//     seckill_stream_pending_entries 1. Once the lock is released the order
//     is written, and no instance reports a backlog for it (the series go).
//   - Dead letters: two units are sold under db-atomic, which the Redis
//     copy does not see, so of the next four redis-stream orders the
//     database can hold two: the other two fail, and the instances'
//     seckill_stream_dead_letters_total{reason="sold-out"} add up to 2.
func TestStreamMetricsFollowTheQueue(t *testing.T) {
	skipShort(t)
	ctx := t.Context()
	dsn := testenv.MySQLDSN(t)
	db, err := openMySQL(ctx, dsn, store.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	srv := testenv.StartRedis(t)
	b := backends{db: db, redis: redis.NewClient(clientOptions(srv.Addr))}
	t.Cleanup(func() { closeBackends(b, slog.New(slog.DiscardHandler)) })
	env := map[string]string{
		"SECKILL_STAGE":              "redis-stream",
		"SECKILL_ADMIN_TOKEN":        fleetToken,
		"SECKILL_RECONCILE_INTERVAL": "0s", // reconcile would repair the copy the dead-letter step skews
	}
	cfg, err := config.Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, db: db, urls: serveInstances(t, cfg, b, 2, "metrics"), client: &http.Client{Timeout: time.Minute}}
	f.reset("products", 1, 5)

	gauges := func(url string) (lag, pending float64) {
		text := scrape(t, url)
		return sample(text, "seckill_stream_lag_orders", `kind="product"`, `id="1"`),
			sample(text, "seckill_stream_pending_entries", `kind="product"`, `id="1"`)
	}
	buy := func(url, user string, hdr map[string]string) (int, api.Order) {
		code, body := f.call("POST", url+"/api/v1/products/1/buy", fmt.Sprintf(`{"user_id":%q}`, user), hdr)
		var o api.Order
		if code == http.StatusAccepted || code == http.StatusCreated {
			if err := json.Unmarshal(body, &o); err != nil {
				t.Fatalf("buy of %s: %d %s", user, code, body)
			}
		}
		return code, o
	}

	// Hold the row lock: no writer can write product 1's orders.
	lockDB, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lockDB.Close() })
	tx, err := lockDB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			if err := tx.Rollback(); err != nil {
				t.Errorf("release the row lock: %v", err)
			}
		}
	}
	t.Cleanup(release) // before the instances close: their writers wait on it
	var stock int
	if err := tx.QueryRowContext(ctx, "SELECT stock FROM products WHERE id = 1 FOR UPDATE").Scan(&stock); err != nil {
		t.Fatal(err)
	}

	code, held := buy(f.urls[0], "held", nil)
	if code != http.StatusAccepted {
		t.Fatalf("buy under redis-stream: %d, want 202", code)
	}
	testkit.Eventually(t, "an instance to report lag 1 and 1 pending entry while the write is blocked", 30*time.Second, func() bool {
		for _, u := range f.urls {
			if lag, pending := gauges(u); lag == 1 && pending == 1 {
				return true
			}
		}
		return false
	})
	if code, body := f.call("GET", f.urls[1]+"/api/v1/orders/"+held.OrderNo, "", nil); code != 200 || !json.Valid(body) || orderStatus(body) != api.StatusPending {
		t.Fatalf("order %s while its write is blocked: %d %s; want pending", held.OrderNo, code, body)
	}

	release()
	testkit.Eventually(t, "every instance to report lag 0 and no pending entry once the order was written", 30*time.Second, func() bool {
		for _, u := range f.urls {
			// No series (-1) is no backlog: a writer reports only
			// the items that have one.
			if lag, pending := gauges(u); lag > 0 || pending > 0 {
				return false
			}
		}
		return true
	})
	if code, body := f.call("GET", f.urls[1]+"/api/v1/orders/"+held.OrderNo, "", nil); code != 200 || orderStatus(body) != api.StatusConfirmed {
		t.Fatalf("order %s after the lock was released: %d %s; want confirmed", held.OrderNo, code, body)
	}

	// The database now holds 4 units and so does the copy. Two sold
	// under db-atomic leave the database 2 and the copy still 4.
	dbAtomic := map[string]string{"X-Seckill-Stage": "db-atomic", "Authorization": "Bearer " + fleetToken}
	for i := 0; i < 2; i++ {
		if code, _ := buy(f.urls[i%2], fmt.Sprintf("db-%d", i), dbAtomic); code != http.StatusCreated {
			t.Fatalf("db-atomic buy %d: %d, want 201", i, code)
		}
	}
	for i := 0; i < 4; i++ {
		if code, _ := buy(f.urls[i%2], fmt.Sprintf("q-%d", i), nil); code != http.StatusAccepted {
			t.Fatalf("redis-stream buy %d: %d, want 202 (the copy holds 4)", i, code)
		}
	}
	audits := f.waitAudit("products", 1, func(a api.Audit) bool { return a.PendingOrders == 0 })
	for _, a := range audits {
		if a.Failed != 2 || a.Sold != 5 || a.Stock != 0 || !a.Conserved {
			t.Fatalf("audit %+v; want 2 failed, 5 sold, none left, conserved", a)
		}
	}
	// The writer counts a dead letter after the script that took the order
	// out of the queue, so the audit can be ahead of the metric for a moment.
	dead := fleetSum(t, f.urls, 2, "seckill_stream_dead_letters_total", `kind="product"`, `reason="sold-out"`)
	if dead != 2 {
		t.Errorf("dead letters (sold-out) across the instances: %v, want 2, one per failed order", dead)
	}
}

// fleetSum adds up a counter over the instances. It waits up to 10s for
// the sum to reach want (the hooks that count run just after the Redis
// scripts the audits read), then returns what it sees, which the caller
// checks for exactly want.
func fleetSum(t *testing.T, urls []string, want float64, name string, frags ...string) float64 {
	t.Helper()
	sum := func() float64 {
		total := 0.0
		for _, u := range urls {
			if n := sample(scrape(t, u), name, frags...); n > 0 {
				total += n
			}
		}
		return total
	}
	testkit.Poll(10*time.Second, func() bool { return sum() >= want })
	return sum()
}

func orderStatus(body []byte) string {
	var o api.OrderStatus
	_ = json.Unmarshal(body, &o)
	return o.Status
}
