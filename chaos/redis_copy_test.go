package chaos

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/seckill-lab/seckill/internal/testkit"
)

// checkRedisCopy checks the redis-atomic invariant on the Redis server
// itself: Redis stock plus the reservations whose order never committed
// equals the MySQL stock. (A reservation whose order did commit is one the
// instance failed to confirm; it already left both.) With settle, it also
// waits for the reconcile job to settle every stale reservation (stale once
// older than two request deadlines, 2 × SECKILL_REQUEST_TIMEOUT: 8s with the
// 4s default the rig leaves alone), after which Redis must equal MySQL
// exactly.
func (r *rig) checkRedisCopy(ctx context.Context, settle bool) {
	t := r.t
	t.Helper()
	rc := r.redis.Client()
	const stockKey, pendingKey = "seckill:{product:1}:stock", "seckill:{product:1}:pending"
	balance := func() (redisStock, open, dbStock, pending int, err error) {
		if redisStock, err = rc.Get(ctx, stockKey).Int(); err != nil {
			return
		}
		var p map[string]string
		if p, err = rc.HGetAll(ctx, pendingKey).Result(); err != nil {
			return
		}
		pending = len(p)
		for no, v := range p {
			var n int
			if err = r.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders WHERE order_no = ?", no).Scan(&n); err != nil {
				return
			}
			if n == 0 {
				q, _ := strconv.Atoi(strings.SplitN(v, "|", 2)[0])
				open += q
			}
		}
		err = r.db.QueryRowContext(ctx, "SELECT stock FROM products WHERE id = 1").Scan(&dbStock)
		return
	}
	rs, open, db, pending, err := balance()
	if err != nil {
		t.Fatalf("read the redis-atomic copy: %v", err)
	}
	t.Logf("redis-atomic copy: redis stock %d + %d reserved (%d pending entries) vs MySQL stock %d", rs, open, pending, db)
	if rs+open != db {
		t.Errorf("redis stock %d + open reservations %d != MySQL stock %d", rs, open, db)
	}
	if !settle {
		return
	}
	ok := testkit.Poll(50*time.Second, func() bool {
		rs, _, db, pending, err = balance()
		return err == nil && pending == 0 && rs == db
	})
	if !ok {
		t.Errorf("reconcile did not settle the Redis copy within 50s: redis %d, MySQL %d, %d pending (%v)", rs, db, pending, err)
	}
}
