package orderwriter_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/orderwriter"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage/streamtest"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// inWorkSet tells whether the item is in the set of items with queued
// orders.
func inWorkSet(t *testing.T, e *streamtest.Env, in streamtest.Instance) bool {
	t.Helper()
	ok, err := e.RDB.SIsMember(context.Background(), in.Stream.QueueKeys(e.ID).Work, e.ID).Result()
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// confirmed fails the test unless every order has its row, confirmed.
func confirmed(t *testing.T, ctx context.Context, in streamtest.Instance, orders []inventory.Order) {
	t.Helper()
	for _, o := range orders {
		got, err := in.Service.Order(ctx, o.No)
		if err != nil || got.Status != inventory.StatusConfirmed {
			t.Errorf("order %s: %+v, %v; want confirmed", o.No, got, err)
		}
	}
}

// TestOrderQueuedWhileTheWriterChecksItsDrainIsWritten forces the race
// between a writer leaving a drained item and an order queued by another
// instance (which does not wake this writer): the order is queued after
// the writer's last read found nothing and before it takes the item out
// of the set of items with work. The writer's recovery pass is an hour
// away, so only the drain check can save the order: it finds the entry
// undelivered, reads again and writes it, and then takes the item out.
// A check that took the item out without looking strands the order.
func TestOrderQueuedWhileTheWriterChecksItsDrainIsWritten(t *testing.T) {
	streamtest.OnEveryBackend(t, 5, func(t *testing.T, ctx context.Context, e *streamtest.Env) {
		a, b := e.Instance("a", inventory.Lifecycle{}), e.Instance("b", inventory.Lifecycle{})
		var checks atomic.Int64
		late := make(chan inventory.Order, 1)
		buyErr := make(chan error, 1)
		streamtest.StartWriter(t, ctx, a.Stream, e.DB.Products(), orderwriter.Options{
			Poll: time.Hour,
			BeforeDrained: func(int64) {
				if checks.Add(1) == 1 {
					// b has no writer and wakes none: only the set says.
					o, err := b.Service.Buy(ctx, inventory.StageRedisStream, inventory.Request{ItemID: e.ID, UserID: "late", Quantity: 1})
					late <- o
					buyErr <- err
				}
			},
		})
		first := streamtest.BuyN(t, a.Service, inventory.StageRedisStream, "first", 1)
		var o inventory.Order
		select {
		case o = <-late:
		case <-ctx.Done():
			t.Fatal("the writer never checked the drain of its first order")
		}
		if err := <-buyErr; err != nil || o.Status != inventory.StatusPending {
			t.Fatalf("the late buy: %+v, %v; want pending", o, err)
		}
		eventually(t, "the item to leave the set of items with work", func() bool { return !inWorkSet(t, e, a) })
		if n := checks.Load(); n < 2 {
			t.Fatalf("drain checks: %d, want the one that met the late order and one after", n)
		}
		confirmed(t, ctx, a, append(first, o))
	})
}

// TestOrderQueuedAfterItsItemLeftTheWorkSetIsTakenUp: the other order of
// the race. The writer drained the item and took it out of the set; then
// another instance, whose writer is not running, queues an order. The
// enqueue puts the item back in the set, and the writer's recovery pass
// (every Poll) takes it up: no wake-up reached it.
func TestOrderQueuedAfterItsItemLeftTheWorkSetIsTakenUp(t *testing.T) {
	streamtest.OnEveryBackend(t, 5, func(t *testing.T, ctx context.Context, e *streamtest.Env) {
		a, b := e.Instance("a", inventory.Lifecycle{}), e.Instance("b", inventory.Lifecycle{})
		streamtest.StartWriter(t, ctx, a.Stream, e.DB.Products(), orderwriter.Options{Poll: 20 * time.Millisecond})
		first := streamtest.BuyN(t, a.Service, inventory.StageRedisStream, "first", 1)
		streamtest.WaitDrained(t, ctx, a.Stream, e.ID)
		eventually(t, "the drained item to leave the set of items with work", func() bool { return !inWorkSet(t, e, a) })

		late := streamtest.BuyN(t, b.Service, inventory.StageRedisStream, "late", 1)
		streamtest.WaitDrained(t, ctx, a.Stream, e.ID)
		confirmed(t, ctx, a, append(first, late...))
		eventually(t, "the item to leave the set again", func() bool { return !inWorkSet(t, e, a) })
	})
}

// TestEntriesLeftPendingByADeadWriterKeepTheirItemUntilTakenOver: a
// writer reads a batch of 5 orders, writes them and dies before it
// acknowledges any. Its entries stay pending, so the item stays in the set
// of items with work, though nothing is undelivered. A writer started
// later on an instance that queued nothing (a restarted instance: no
// wake-up, no catalogue) finds the item there, takes the entries over
// after ClaimIdle, finds them written, and settles each once; then the
// item leaves the set.
func TestEntriesLeftPendingByADeadWriterKeepTheirItemUntilTakenOver(t *testing.T) {
	streamtest.OnEveryBackend(t, 5, func(t *testing.T, ctx context.Context, e *streamtest.Env) {
		a := e.Instance("a", inventory.Lifecycle{})
		orders := streamtest.BuyN(t, a.Service, inventory.StageRedisStream, "u", 5)
		crash := errors.New("killed")
		died := make(chan struct{})
		var confirmedN atomic.Int64
		hooks := orderwriter.Hooks{Confirmed: func(time.Duration) { confirmedN.Add(1) }}
		stopA := streamtest.StartWriter(t, ctx, a.Stream, e.DB.Products(), orderwriter.Options{
			Consumer: "a", Batch: 5, Poll: time.Hour, Hooks: hooks,
			AfterWrite: func(inventory.Order) error { close(died); return crash },
		})
		select {
		case <-died: // written, not settled: the process dies here
		case <-ctx.Done():
			t.Fatal("writer a never wrote its batch")
		}
		if err := stopA(); !errors.Is(err, crash) {
			t.Fatalf("writer a's Run = %v, want the crash", err)
		}
		if !inWorkSet(t, e, a) {
			t.Fatal("the item left the set of items with work while a dead writer's entries are pending")
		}

		b := e.Instance("b", inventory.Lifecycle{})
		stopB := streamtest.StartWriter(t, ctx, b.Stream, e.DB.Products(), orderwriter.Options{
			Consumer: "b", ClaimIdle: 300 * time.Millisecond, Poll: 20 * time.Millisecond, Hooks: hooks,
		})
		eventually(t, "writer b to settle the dead writer's entries and the item to leave the set", func() bool {
			p, err := e.RDB.XPending(ctx, e.Key("orders"), orderwriter.GroupName).Result()
			return err == nil && p.Count == 0 && !inWorkSet(t, e, a)
		})
		if err := stopB(); err != nil {
			t.Fatalf("writer b's Run = %v", err)
		}
		confirmed(t, ctx, a, orders)
		if n := confirmedN.Load(); n != 5 {
			t.Errorf("orders counted confirmed: %d, want 5, once each", n)
		}
		var rows int
		if err := e.DB.Raw(ctx, "SELECT COUNT(*) FROM orders WHERE product_id = 1").Scan(&rows); err != nil || rows != 5 {
			t.Errorf("order rows: %d, %v; want 5", rows, err)
		}
	})
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	testkit.Eventually(t, what, 20*time.Second, ok)
}
