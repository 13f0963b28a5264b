package redisstage_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage/streamtest"
	"github.com/seckill-lab/seckill/internal/store"
)

// getThen is a ledger whose next Get, once armed, reads the database and
// then runs then before it returns what it read: the reconcile job's read
// of the stock, overtaken by whatever then does.
type getThen struct {
	*store.Ledger
	armed bool
	then  func()
}

func (g *getThen) Get(ctx context.Context, id int64) (inventory.Item, error) {
	it, err := g.Ledger.Get(ctx, id)
	if g.armed {
		g.armed = false
		g.then()
	}
	return it, err
}

// repairer is a stage that keeps a Redis copy the reconcile job repairs.
type repairer interface {
	inventory.Stage
	Repair(ctx context.Context, id int64, staleAfter time.Duration, orderExists func(ctx context.Context, no string) (bool, error)) (redisstage.Drift, error)
}

// TestRepairLeavesACopyResetDuringItsRead: 3 units of 40 are sold under
// db-atomic, so the database holds 37 while the Redis copy of the stage
// under test still holds 40, which the reconcile job is there to correct.
// The job reads the database (37); before it writes, an admin resets the
// item to 40, which reloads the copy with 40: the same number the job saw
// before its read. The job must not then write its 37 over the fresh copy,
// or 3 buyers are told "sold out" while the database holds their units.
// Each stage keeps its own copy: redis-atomic one key, redis-sharded four
// buckets.
func TestRepairLeavesACopyResetDuringItsRead(t *testing.T) {
	for _, sc := range []struct {
		name  string
		stage func(e *streamtest.Env, book *getThen) repairer
		copy  func(t *testing.T, e *streamtest.Env, ns string) int
	}{
		{inventory.StageRedisAtomic, func(e *streamtest.Env, book *getThen) repairer {
			return redisstage.NewRedisAtomic(e.RDB, book, e.NS, nil)
		}, func(t *testing.T, e *streamtest.Env, _ string) int { return e.RedisStock(t) }},
		{inventory.StageRedisSharded, func(e *streamtest.Env, book *getThen) repairer {
			return redisstage.NewRedisSharded(e.RDB, book, e.NS, 4, nil)
		}, func(t *testing.T, e *streamtest.Env, ns string) int {
			sum := 0
			for b := range 4 {
				n, err := e.RDB.Get(context.Background(), fmt.Sprintf("seckill:{%s:%d:b%d}:stock", ns, e.ID, b)).Int()
				if err != nil {
					t.Fatal(err)
				}
				sum += n
			}
			return sum
		}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			streamtest.OnEveryBackend(t, 40, func(t *testing.T, ctx context.Context, e *streamtest.Env) {
				book := &getThen{Ledger: e.DB.Products()}
				st := sc.stage(e, book)
				svc := inventory.NewService(book, map[string]inventory.Stage{
					sc.name:                 st,
					inventory.StageDBAtomic: inventory.NewDBAtomic(e.DB.Products()),
				}, "a", "O")
				if err := svc.ResetSale(ctx, e.ID, 40, inventory.SaleWindow{}); err != nil {
					t.Fatal(err)
				}
				streamtest.BuyN(t, svc, inventory.StageDBAtomic, "db", 3)
				if n := sc.copy(t, e, e.NS); n != 40 {
					t.Fatalf("the copy holds %d before the repair, want 40", n)
				}
				book.armed, book.then = true, func() {
					if err := svc.ResetSale(ctx, e.ID, 40, inventory.SaleWindow{}); err != nil {
						t.Errorf("reset during the repair's read: %v", err)
					}
				}
				d, err := st.Repair(ctx, e.ID, time.Minute, e.DB.Products().OrderExists)
				if err != nil {
					t.Fatal(err)
				}
				if book.armed {
					t.Fatal("the repair never read the database")
				}
				a, err := e.DB.Products().Audit(ctx, e.ID)
				if err != nil || a.Stock != 40 {
					t.Fatalf("audit %+v, %v; want the reset's 40 in the database", a, err)
				}
				if n := sc.copy(t, e, e.NS); n != 40 {
					t.Errorf("the copy holds %d after a repair overtaken by a reset, the database 40: the repair wrote its stale read over the fresh copy (drift %+v)", n, d)
				}
				// The next repair, with nothing in its way, finds the copy right.
				if d, err = st.Repair(ctx, e.ID, time.Minute, e.DB.Products().OrderExists); err != nil || d.Repaired || d.Busy {
					t.Errorf("repair after the reset: %+v, %v; want nothing to correct", d, err)
				}
			})
		})
	}
}
