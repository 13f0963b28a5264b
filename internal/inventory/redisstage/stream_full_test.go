package redisstage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/orderwriter"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage/streamtest"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// instanceQueue is e.Instance with a bound on the order stream (MaxLen).
func instanceQueue(e *streamtest.Env, name string, maxLen int64) streamtest.Instance {
	ra := redisstage.NewRedisAtomic(e.RDB, e.DB.Products(), e.NS, nil)
	rs := redisstage.NewRedisStream(ra, redisstage.StreamOptions{MaxLen: maxLen})
	stages := map[string]inventory.Stage{inventory.StageRedisStream: rs}
	svc := inventory.NewService(e.DB.Products(), stages, name, "O").
		WithLifecycle(inventory.Lifecycle{RedisStock: ra, Queue: rs})
	return streamtest.Instance{RedisStock: ra, Stream: rs, Service: svc}
}

// TestFullQueueTurnsBuyersAwayWithNothingTaken: the order stream holds at
// most 3 entries and no writer runs, so the first 3 buyers fill it. The
// 4th is turned away with ErrOverloaded (503 overloaded), not sold out,
// though 7 units are left, and the script took nothing for it: the Redis
// copy still holds 7, the buyer is not recorded as having bought, nothing
// is queued for it, and the database is untouched. Once a writer has
// drained the queue and trimmed what it acknowledged, the same buyer is
// accepted: being turned away cost them nothing.
func TestFullQueueTurnsBuyersAwayWithNothingTaken(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			const stock, maxLen = 10, 3
			e := streamtest.NewEnv(t, b.Open(t), stock)
			in := instanceQueue(e, "a", maxLen)
			streamtest.BuyN(t, in.Service, inventory.StageRedisStream, "f", maxLen)

			late := inventory.Request{ItemID: e.ID, UserID: "late", Quantity: 1}
			_, err := in.Service.Buy(ctx, inventory.StageRedisStream, late)
			if !errors.Is(err, inventory.ErrOverloaded) || errors.Is(err, inventory.ErrSoldOut) {
				t.Fatalf("a buy with the queue full: %v; want ErrOverloaded", err)
			}
			if s := e.RedisStock(t); s != stock-maxLen {
				t.Errorf("Redis stock %d after the refused buy, want %d: the refused buyer took a unit", s, stock-maxLen)
			}
			if bought, err := e.RDB.SIsMember(ctx, e.Key("buyers"), late.UserID).Result(); err != nil || bought {
				t.Errorf("the refused buyer is recorded as having bought: %v, %v", bought, err)
			}
			if n, err := e.RDB.XLen(ctx, e.Key("orders")).Result(); err != nil || n != maxLen {
				t.Errorf("order stream holds %d entries (%v), want the %d accepted", n, err, maxLen)
			}
			orders, units, err := in.Stream.Backlog(ctx, e.ID)
			if err != nil || orders != maxLen || units != maxLen {
				t.Errorf("backlog %d orders, %d units (%v); want the %d accepted", orders, units, err, maxLen)
			}
			a, err := in.Service.Audit(ctx, e.ID)
			if err != nil || a.Stock != stock || a.Sold != 0 || a.PendingOrders != maxLen || !a.Conserved() {
				t.Errorf("audit %+v, %v; want the database untouched (%d in stock, none sold), %d pending, conserved", a, err, stock, maxLen)
			}

			// A writer drains the queue and trims what it acknowledged;
			// the queue has room again.
			streamtest.StartWriter(t, ctx, in.Stream, e.DB.Products(), orderwriter.Options{Consumer: "a", Poll: 10 * time.Millisecond})
			streamtest.WaitDrained(t, ctx, in.Stream, e.ID)
			testkit.Eventually(t, "the writer to trim the stream it acknowledged", 30*time.Second, func() bool {
				n, err := e.RDB.XLen(ctx, e.Key("orders")).Result()
				return err == nil && n < maxLen
			})
			o, err := in.Service.Buy(ctx, inventory.StageRedisStream, late)
			if err != nil || o.Status != inventory.StatusPending {
				t.Fatalf("the refused buyer again, with room in the queue: %+v, %v; want accepted", o, err)
			}
			streamtest.WaitDrained(t, ctx, in.Stream, e.ID)
			a, err = in.Service.Audit(ctx, e.ID)
			if err != nil || a.Sold != maxLen+1 || a.Stock != stock-maxLen-1 || a.PendingOrders != 0 || !a.Conserved() {
				t.Errorf("audit %+v, %v; want %d sold, %d left, conserved", a, err, maxLen+1, stock-maxLen-1)
			}
			if s := e.RedisStock(t); s != stock-maxLen-1 {
				t.Errorf("Redis stock %d, want %d", s, stock-maxLen-1)
			}
		})
	}
}
