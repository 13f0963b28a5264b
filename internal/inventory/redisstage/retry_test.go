package redisstage_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage/streamtest"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestAttackRetryNeverBuysTwice: a retry (WithRetry) of a buyer who holds
// an order answers with that order under every stage that sells from a
// database row or the Redis copy, whether stock is left or not, and never
// writes a second order.
func TestAttackRetryNeverBuysTwice(t *testing.T) {
	for _, stock := range []int{1, 3} {
		for _, stage := range []string{inventory.StageDBAtomic, inventory.StageRedisAtomic} {
			t.Run(fmt.Sprintf("%s/stock=%d", stage, stock), func(t *testing.T) {
				e := streamtest.NewEnv(t, testenv.SQLite(t), stock)
				in := e.Instance("atk", inventory.Lifecycle{})
				ctx := context.Background()
				req := inventory.Request{ItemID: 1, UserID: "holder", Quantity: 1}
				first, err := in.Service.Buy(ctx, stage, req)
				if err != nil {
					t.Fatal(err)
				}
				for i := range 2 {
					got, err := in.Service.Buy(inventory.WithRetry(ctx), stage, req)
					if err != nil || got.No != first.No || got.UserID != "holder" {
						t.Fatalf("retry %d (stock %d): %+v, %v; want order %s", i, stock, got, err, first.No)
					}
				}
				// Another quantity is another request: refused, not answered
				// with an order of a different size.
				if _, err := in.Service.Buy(inventory.WithRetry(ctx), stage, inventory.Request{ItemID: 1, UserID: "holder", Quantity: 2}); err == nil {
					t.Fatal("a retry for 2 units was answered with the 1-unit order")
				}
				a, err := e.DB.Products().Audit(ctx, 1)
				if err != nil || a.Orders != 1 || a.Stock != stock-1 || !a.Conserved() {
					t.Fatalf("one order: %+v, %v", a, err)
				}
			})
		}
	}
}
