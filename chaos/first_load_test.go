package chaos

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/testkit"
)

// TestRedisKilledWhileFirstBuysLoadCopies: nothing is copied into Redis
// at start; each item's copy is loaded by its first buy, once for the
// fleet, under a guard key. A catalogue of several products, none bought
// yet, and a crowd spread over them and over two instances (redis-atomic,
// MySQL slowed so that a load, a read of the item and of its buyers, is
// in flight long enough to be cut). Redis is SIGKILLed while a first load
// holds its guard, and restarted empty (no persistence): the guards, the
// half-loaded copies, the reservations and the registry of copies are
// gone, and the next buyers load the copies again from MySQL. Nothing is
// oversold and nothing lost: every 201 has its order row, no refused
// buyer has one, each product conserves its stock in MySQL, and once the
// reconcile job has settled what the kill left (reservations whose
// process lost Redis, a copy loaded while an order was still committing)
// every copy in Redis equals MySQL's stock.
func TestRedisKilledWhileFirstBuysLoadCopies(t *testing.T) {
	r := newRig(t, rigOptions{})
	ctx := t.Context()
	items, stock := pick(6, 24), pick(10, 20)
	buyers := items * stock * 3 / 2 // more buyers than units
	env := map[string]string{"SECKILL_STAGE": "redis-atomic"}
	a := r.start("a", env) // its start makes the tables
	r.catalogue(ctx, items, stock)
	b := r.start("b", env)
	f := &figures{Test: t.Name(), Stage: "redis-atomic",
		Fault: fmt.Sprintf("Redis SIGKILLed while first buys load the copies of %d products none had bought (2 instances, MySQL +200 ms), restarted empty", items)}
	r.record(f)
	fail := violations(t, f)
	rc := r.redis.Client()
	if n, err := rc.Keys(ctx, "seckill:{product:*}:stock").Result(); err != nil || len(n) != 0 {
		t.Fatalf("after b started over the catalogue Redis holds the copies %v (%v); want none: nothing is copied at start", n, err)
	}

	slow := r.mysql.toxic("latency", "latency", "downstream", 1, map[string]any{"latency": 200})
	bu := &burst{o: burstOptions{deadline: 15 * time.Second, prefix: "fl"}, start: time.Now()}
	calls := make([]call, buyers)
	next := make(chan int)
	var wg sync.WaitGroup
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				in, item := []*instance{a, b}[i%2], i%items+1
				c := call{ID: i, User: fmt.Sprintf("fl-%d", i), Instance: in.name, Op: "buy"}
				r.exchange(bu, &c, in, http.MethodPost, fmt.Sprintf("/api/v1/products/%d/buy", item), fmt.Sprintf(`{"user_id":%q,"quantity":1}`, c.User))
				calls[i] = c
			}
		}()
	}
	go func() {
		defer close(next)
		for i := range buyers {
			next <- i
		}
	}()
	testkit.Eventually(t, "a first load holding its guard", time.Minute, func() bool {
		keys, err := rc.Keys(ctx, "seckill:{product:*}:loading").Result()
		return err == nil && len(keys) > 0
	})
	w := window{from: bu.now()}
	r.redis.Restart()
	w.to = bu.now()
	wg.Wait()
	slow()
	r.firstLoadVerdict(ctx, f, fail, calls, w, items, stock)
}

// catalogue makes products 1 to n, each with stock units and no orders.
func (r *rig) catalogue(ctx context.Context, n, stock int) {
	r.t.Helper()
	for id := 1; id <= n; id++ {
		if _, err := r.db.ExecContext(ctx, `INSERT INTO products (id, name, price_cents, initial_stock, stock) VALUES (?, ?, 100, ?, ?)
			ON DUPLICATE KEY UPDATE initial_stock = VALUES(initial_stock), stock = VALUES(stock)`, id, fmt.Sprintf("item %d", id), stock, stock); err != nil {
			r.t.Fatal(err)
		}
	}
}

// firstLoadVerdict checks the promises of TestRedisKilledWhileFirstBuysLoadCopies.
func (r *rig) firstLoadVerdict(ctx context.Context, f *figures, fail func(string, ...any), calls []call, w window, items, stock int) {
	t := r.t
	f.Requests, f.Refused = len(calls), map[string]int{}
	f.FaultMs = (w.to - w.from).Milliseconds()
	f.P99FaultMs, f.MaxMs = p99(calls, w.from, w.to).Milliseconds(), 0
	owner := map[string]string{} // order number -> user, of the 201s
	refused := map[string]bool{} // users told no for sure
	for _, c := range calls {
		f.MaxMs = max(f.MaxMs, c.latency().Milliseconds())
		if c.Bad != "" {
			fail("buy %d: %s", c.ID, c.Bad)
		}
		switch {
		case c.Outcome == outOK:
			f.Successes++
			owner[c.OrderNo] = c.User
		case c.Outcome == outRefused && c.Problem != "outcome-unknown":
			f.Refused[c.Problem]++
			refused[c.User] = true
		case c.Outcome == outNotSent:
			f.NotSent++
		default:
			f.Unknown++
		}
	}
	rows, err := r.db.QueryContext(ctx, "SELECT order_no, user_id FROM orders")
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for rows.Next() {
		var no, user string
		if err := rows.Scan(&no, &user); err != nil {
			t.Fatal(err)
		}
		found[no] = true
		if refused[user] {
			f.Phantom++
			fail("order %s of %s, whose buy was refused, has a row", no, user)
		}
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	for no, user := range owner {
		if !found[no] {
			f.Lost++
			fail("order %s of %s was answered 201 and has no row", no, user)
		}
	}
	f.Conserved = true
	for id := 1; id <= items; id++ {
		var initial, left, live int
		if err := r.db.QueryRowContext(ctx, "SELECT initial_stock, stock FROM products WHERE id = ?", id).Scan(&initial, &left); err != nil {
			t.Fatal(err)
		}
		if err := r.db.QueryRowContext(ctx, "SELECT COALESCE(SUM(quantity), 0) FROM orders WHERE product_id = ? AND status IN ('confirmed', 'paid')", id).Scan(&live); err != nil {
			t.Fatal(err)
		}
		f.Oversold += max(0, live-stock)
		if initial != stock || left+live != stock {
			f.Conserved = false
			fail("product %d in MySQL: initial %d, stock %d, live units %d; want %d conserved", id, initial, left, live, stock)
		}
	}
	r.copiesMatch(ctx, fail, items)
	t.Logf("%d buys over %d products: %d ok, refused %v, %d unknown, %d not sent, oversold %d, lost %d, phantom %d", f.Requests, items, f.Successes, f.Refused, f.Unknown, f.NotSent, f.Oversold, f.Lost, f.Phantom)
}

// copiesMatch waits for the reconcile job to bring every copy in Redis of
// products 1 to items to MySQL's stock, with no reservation left in it.
func (r *rig) copiesMatch(ctx context.Context, fail func(string, ...any), items int) {
	rc := r.redis.Client()
	var off string
	if testkit.Poll(60*time.Second, func() bool {
		off = ""
		for id := 1; id <= items; id++ {
			key := fmt.Sprintf("seckill:{product:%d}:", id)
			copied, err := rc.Get(ctx, key+"stock").Int()
			if err != nil {
				continue // no copy: nobody bought it since the restart
			}
			var db int
			if err := r.db.QueryRowContext(ctx, "SELECT stock FROM products WHERE id = ?", id).Scan(&db); err != nil {
				off = err.Error()
				return false
			}
			if pending, err := rc.HLen(ctx, key+"pending").Result(); err != nil || pending > 0 || copied != db {
				off = fmt.Sprintf("product %d: copy %d, MySQL %d, %d reservations (%v)", id, copied, db, pending, err)
				return false
			}
		}
		return true
	}) {
		return
	}
	fail("the reconcile job did not bring the copies to MySQL's stock within 60s: %s", off)
}
