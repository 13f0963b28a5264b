package redisstage_test

import (
	"context"
	"testing"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage/streamtest"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestRetryOfAQueuedBuyGetsThePendingOrder: under redis-stream the
// first run's order is accepted (queued in Redis, not yet in the
// database: the writers are behind) and its answer is lost. The retry is
// refused (sold out: the stock is checked first) and must answer with the
// pending order, as the lost 202 would have.
func TestRetryOfAQueuedBuyGetsThePendingOrder(t *testing.T) {
	e := streamtest.NewEnv(t, testenv.SQLite(t), 1)
	in := e.Instance("atk", inventory.Lifecycle{}) // no writer: the queue is behind
	ctx := context.Background()
	req := inventory.Request{ItemID: 1, UserID: "queued-buyer", Quantity: 1}
	first, err := in.Service.Buy(ctx, inventory.StageRedisStream, req)
	if err != nil || first.Status != inventory.StatusPending {
		t.Fatalf("first run: %+v, %v; want pending", first, err)
	}
	got, err := in.Service.Buy(inventory.WithRetry(ctx), inventory.StageRedisStream, req)
	if err != nil || got.No != first.No {
		t.Fatalf("the retry: %+v, %v; want the pending order %s", got, err, first.No)
	}
}
