package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// The faults of redis-stream: a writer that dies holding entries it has not
// acknowledged, and a Redis that comes back empty with the queue in it.

const (
	streamKey = "seckill:{product:1}:orders"
	queuedKey = "seckill:{product:1}:queued"
	groupName = "writers" // inventory.GroupName
)

// streamBuy is one buy of a redis-stream burst, as the client saw it.
type streamBuy struct {
	user    string
	status  int    // 0: no answer
	orderNo string // of a 202
}

// streamBurst sends n buys of product 1, round robin over targets, from
// workers clients, and returns them.
func (r *rig) streamBurst(targets []*instance, n, workers int, prefix string) []streamBuy {
	out := make([]streamBuy, n)
	var wg sync.WaitGroup
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				b := streamBuy{user: fmt.Sprintf("%s-%d", prefix, i)}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, targets[i%len(targets)].url+"/api/v1/products/1/buy", strings.NewReader(`{"user_id":"`+b.user+`"}`))
				if err == nil {
					req.Header.Set("Content-Type", "application/json")
					var resp *http.Response
					if resp, err = r.client.Do(req); err == nil {
						b.status = resp.StatusCode
						var o struct {
							OrderNo string `json:"order_no"`
						}
						if json.NewDecoder(resp.Body).Decode(&o) == nil && resp.StatusCode == http.StatusAccepted {
							b.orderNo = o.OrderNo
						}
						_ = resp.Body.Close()
					}
				}
				cancel()
				out[i] = b
			}
		}()
	}
	wg.Wait()
	return out
}

// orderRow is one order row of product 1 in MySQL.
type orderRow struct{ no, user, status string }

func (r *rig) orderRows(ctx context.Context) map[string]orderRow {
	r.t.Helper()
	rows, err := r.db.QueryContext(ctx, "SELECT order_no, user_id, status FROM orders WHERE product_id = 1")
	if err != nil {
		r.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]orderRow{}
	for rows.Next() {
		var o orderRow
		if err := rows.Scan(&o.no, &o.user, &o.status); err != nil {
			r.t.Fatal(err)
		}
		if _, dup := out[o.no]; dup {
			r.t.Errorf("order %s has two rows", o.no)
		}
		out[o.no] = o
	}
	if err := rows.Err(); err != nil {
		r.t.Fatal(err)
	}
	return out
}

// conserved reads MySQL's stock and live units of product 1.
func (r *rig) conserved(ctx context.Context) (initial, stock, live int) {
	r.t.Helper()
	if err := r.db.QueryRowContext(ctx, "SELECT initial_stock, stock FROM products WHERE id = 1").Scan(&initial, &stock); err != nil {
		r.t.Fatal(err)
	}
	if err := r.db.QueryRowContext(ctx, "SELECT COALESCE(SUM(quantity), 0) FROM orders WHERE product_id = 1 AND status IN ('confirmed', 'paid')").Scan(&live); err != nil {
		r.t.Fatal(err)
	}
	return initial, stock, live
}

// TestKillInstanceWhileItsWriterHoldsEntries: two instances sell under
// redis-stream with a slow database, so the queue fills. Once instance a's
// order writer holds entries it has read and not acknowledged, a is killed
// (SIGKILL). b's writer takes them over after the claim idle time. Nothing
// is lost and nothing written twice: every 202 has exactly one confirmed
// order, every order row belongs to a 202 or to a request whose answer the
// kill swallowed, MySQL conserves its stock, Redis agrees with MySQL, and
// no entry is left unacknowledged.
func TestKillInstanceWhileItsWriterHoldsEntries(t *testing.T) {
	r := newRig(t, rigOptions{})
	env := map[string]string{"SECKILL_MODE": "redis-stream", "SECKILL_STREAM_CLAIM_IDLE": "1s"}
	a, b := r.start("a", env), r.start("b", env)
	const stock = 60
	r.reset(a, stock)
	ctx := t.Context()
	rc := r.redis.Client()

	slow := r.mysql.toxic("slow-db", "latency", "downstream", 1, map[string]any{"latency": 60})
	type result struct{ buys []streamBuy }
	done := make(chan result, 1)
	go func() { done <- result{r.streamBurst([]*instance{a, b}, 200, 32, "kw")} }()

	held := func() int64 {
		p, err := rc.XPending(ctx, streamKey, groupName).Result()
		if err != nil {
			return 0
		}
		for name, n := range p.Consumers {
			if strings.HasPrefix(name, "a-product-") {
				return n
			}
		}
		return 0
	}
	if !waitUntil(30*time.Second, func() bool { return held() > 0 }) {
		t.Fatal("a's writer never held an entry")
	}
	a.kill()
	t.Logf("killed a while its writer held %d entries", held())
	res := <-done
	slow()

	if !waitUntil(60*time.Second, func() bool {
		n, err := rc.HLen(ctx, queuedKey).Result()
		return err == nil && n == 0
	}) {
		t.Fatal("the queue did not drain within 60s of the kill")
	}

	accepted, unknown := map[string]streamBuy{}, map[string]bool{}
	for _, bu := range res.buys {
		switch {
		case bu.status == http.StatusAccepted:
			accepted[bu.orderNo] = bu
		case bu.status == 0:
			unknown[bu.user] = true
		}
	}
	rows := r.orderRows(ctx)
	for no, bu := range accepted {
		if row, ok := rows[no]; !ok || row.status != "confirmed" {
			t.Errorf("202 for %s (order %s): row %+v, present %v; want one confirmed row", bu.user, no, row, ok)
		}
	}
	for no, row := range rows {
		if _, ok := accepted[no]; !ok && !unknown[row.user] {
			t.Errorf("order %s of %s is neither a 202 nor a request whose answer was lost", no, row.user)
		}
	}
	initial, dbStock, live := r.conserved(ctx)
	if initial != stock || dbStock+live != stock || live != len(rows) {
		t.Errorf("MySQL: initial %d, stock %d, live units %d, rows %d; want stock + live = %d, one unit a row", initial, dbStock, live, len(rows), stock)
	}
	if p, err := rc.XPending(ctx, streamKey, groupName).Result(); err != nil || p.Count != 0 {
		t.Errorf("entries left unacknowledged: %+v, %v", p, err)
	}
	// Redis and MySQL agree once nothing is in flight.
	if !waitUntil(20*time.Second, func() bool {
		n, err := rc.Get(ctx, "seckill:{product:1}:stock").Int()
		_, s, _ := r.conserved(ctx)
		return err == nil && n == s
	}) {
		n, _ := rc.Get(ctx, "seckill:{product:1}:stock").Int()
		t.Errorf("Redis stock %d, MySQL stock %d", n, dbStock)
	}
	status, body := r.do(b, http.MethodGet, "/metrics", nil, "")
	if status != 200 || !strings.Contains(string(body), `seckill_stream_claimed_total{instance_name="b",kind="product"}`) {
		t.Errorf("b never claimed an entry of the dead writer (metrics %d)", status)
	}
	t.Logf("%d accepted, %d answers lost to the kill, %d order rows, all confirmed once", len(accepted), len(unknown), len(rows))
}

// TestRedisRestartWithoutPersistenceLosesQueuedOrders: every buyer is
// accepted while MySQL is unreachable, so the writers cannot drain the
// queue, and Redis restarts empty, without persistence, with the whole
// queue in it. Those orders lived only in Redis and are lost: their 202s
// now answer 404 order-not-found. The rest holds: MySQL conserves its
// stock, the reconcile job reloads the copy from MySQL and says in the
// audit what it could not recover, and the stage sells again.
func TestRedisRestartWithoutPersistenceLosesQueuedOrders(t *testing.T) {
	r := newRig(t, rigOptions{})
	a := r.start("a", map[string]string{"SECKILL_MODE": "redis-stream", "SECKILL_STREAM_CLAIM_IDLE": "1s"})
	const stock = 40
	r.reset(a, stock)
	ctx := t.Context()
	rc := r.redis.Client()

	heal := r.mysql.blackhole()
	buys := r.streamBurst([]*instance{a}, stock, 8, "rr")
	for _, bu := range buys {
		if bu.status != http.StatusAccepted {
			t.Fatalf("buy %s: %d, want every buyer accepted (the buy needs Redis only)", bu.user, bu.status)
		}
	}
	queued, err := rc.HLen(ctx, queuedKey).Result()
	if err != nil || queued != stock {
		t.Fatalf("%d orders queued (%v), want all %d: no writer can reach MySQL", queued, err, stock)
	}
	r.redis.Restart()
	heal()

	// The reconcile job notices the missing copy and says what it lost.
	var note string
	if !waitUntil(60*time.Second, func() bool {
		status, body := r.do(a, http.MethodGet, "/api/v1/products/1/audit", nil, "")
		var au struct {
			Reconcile *struct {
				Note string `json:"note"`
			} `json:"reconcile"`
		}
		if status != 200 || json.Unmarshal(body, &au) != nil || au.Reconcile == nil {
			return false
		}
		note = au.Reconcile.Note
		return strings.Contains(note, "cannot be recovered")
	}) {
		t.Errorf("the reconcile job never reported the lost copy (last note %q)", note)
	}

	for _, bu := range buys {
		status, body := r.do(a, http.MethodGet, "/api/v1/orders/"+bu.orderNo, nil, "")
		if status != http.StatusNotFound || !strings.Contains(string(body), "/problems/order-not-found") {
			t.Errorf("order %s after the restart: %d %s; want 404 order-not-found: it was only in Redis", bu.orderNo, status, body)
		}
	}
	initial, dbStock, live := r.conserved(ctx)
	if initial != stock || dbStock != stock || live != 0 {
		t.Errorf("MySQL: initial %d, stock %d, live units %d; want the stock untouched and conserved", initial, dbStock, live)
	}
	// The copy is reloaded from MySQL, and the stage sells again.
	status, body := r.do(a, http.MethodPost, "/api/v1/products/1/buy", nil, `{"user_id":"after"}`)
	var o struct {
		OrderNo string `json:"order_no"`
	}
	if status != http.StatusAccepted || json.Unmarshal(body, &o) != nil {
		t.Fatalf("a buy after the restart: %d %s, want 202", status, body)
	}
	if !waitUntil(30*time.Second, func() bool {
		status, body := r.do(a, http.MethodGet, "/api/v1/orders/"+o.OrderNo, nil, "")
		return status == 200 && strings.Contains(string(body), `"status":"confirmed"`)
	}) {
		t.Errorf("the order after the restart was never confirmed")
	}
	t.Logf("%d orders lost with Redis; reconcile said: %s", len(buys), note)
}
