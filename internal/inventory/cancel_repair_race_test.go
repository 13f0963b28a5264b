package inventory_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage/streamtest"
	"github.com/seckill-lab/seckill/internal/store"
)

// cancelThen is a ledger whose n-th Cancel runs then first: after the
// payment-timeout job read the copy's generation for that order and
// before the database commits its cancellation.
type cancelThen struct {
	*store.Ledger
	calls, n int
	then     func()
}

func (c *cancelThen) Cancel(ctx context.Context, o inventory.Order, cutoff time.Time, gen string) (bool, error) {
	if c.calls++; c.calls == c.n {
		c.then()
	}
	return c.Ledger.Cancel(ctx, o, cutoff, gen)
}

// TestReconcileRepairDuringCancelLosesNoUnit: the payment-timeout job
// cancels 3 unpaid redis-atomic orders one at a time. After the first
// cancellation committed (the database has 1 unit back, the Redis copy
// none yet) and after the job read the copy's generation for the second,
// the reconcile job repairs the copy from the database: 1 unit, a new
// generation. The second cancellation then commits, owed to the old
// generation, so its unit is never returned to the copy, and the repair's
// database read did not include it either. Every unit must come back to
// the copy: Redis stock = database stock = 3.
func TestReconcileRepairDuringCancelLosesNoUnit(t *testing.T) {
	streamtest.OnEveryBackend(t, 3, func(t *testing.T, ctx context.Context, e *streamtest.Env) {
		clk := newClock()
		ra := redisstage.NewRedisAtomic(e.RDB, e.DB.Products(), e.NS, nil)
		book := &cancelThen{Ledger: e.DB.Products(), n: 2, then: func() {
			d, err := ra.Repair(ctx, e.ID, time.Minute, e.DB.Products().OrderExists)
			t.Logf("reconcile repair between the generation read and the commit: %+v, %v", d, err)
		}}
		svc := inventory.NewService(book, map[string]inventory.Stage{inventory.StageRedisAtomic: ra}, "a", "O").
			WithLifecycle(inventory.Lifecycle{PaymentTimeout: time.Minute, RedisStock: ra, Now: clk.Now})
		streamtest.BuyN(t, svc, inventory.StageRedisAtomic, "r", 3)

		clk.Advance(2 * time.Minute)
		rep, err := svc.CancelUnpaid(ctx)
		if err != nil || rep.Cancelled != 3 {
			t.Fatalf("cancel job: %+v, %v; want 3 cancelled", rep, err)
		}
		a, err := e.DB.Products().Audit(ctx, e.ID)
		if err != nil || a.Stock != 3 {
			t.Fatalf("audit %+v, %v; want the 3 units back in the database", a, err)
		}
		if s := e.RedisStock(t); s != 3 {
			t.Errorf("Redis stock %d, database stock 3: %d cancelled unit(s) never came back to the copy (report %+v)", s, 3-s, rep)
		}
	})
}
