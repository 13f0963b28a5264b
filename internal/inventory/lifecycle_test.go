package inventory_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/orderwriter"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage/streamtest"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// clock is a test clock both instances of a test share.
type clock struct{ t atomic.Pointer[time.Time] }

func newClock() *clock {
	c := &clock{}
	now := time.Now()
	c.t.Store(&now)
	return c
}

func (c *clock) Now() time.Time { return *c.t.Load() }

func (c *clock) Advance(d time.Duration) {
	now := c.Now().Add(d)
	c.t.Store(&now)
}

// lifecycleSale sells 30 of a stock of 40, ten under each of redis-atomic,
// redis-stream (written by a writer) and db-atomic, and pays two of each.
// It returns the unpaid orders.
func lifecycleSale(t *testing.T, ctx context.Context, e *streamtest.Env, in streamtest.Instance) (unpaid []inventory.Order) {
	t.Helper()
	streamtest.StartWriter(t, ctx, in.Stream, e.DB.Products(), orderwriter.Options{Poll: 20 * time.Millisecond})
	var all []inventory.Order
	for _, st := range []string{inventory.StageRedisAtomic, inventory.StageRedisStream, inventory.StageDBAtomic} {
		all = append(all, streamtest.BuyN(t, in.Service, st, st+"-", 10)...)
	}
	streamtest.WaitDrained(t, ctx, in.Stream, e.ID)
	for i, o := range all {
		if i%10 < 2 {
			if got, err := in.Service.Pay(ctx, o.No); err != nil || got.Status != inventory.StatusPaid {
				t.Fatalf("pay %s: %+v, %v", o.No, got, err)
			}
			continue
		}
		unpaid = append(unpaid, o)
	}
	return unpaid
}

// checkCancelled asserts the end state after every unpaid order of
// lifecycleSale was cancelled: the database has back the 24 unpaid units,
// the Redis copy the 16 it had sold (8 of redis-atomic, 8 of
// redis-stream; db-atomic never took from it), every unpaid order is
// cancelled, and paying one answers ErrOrderCancelled.
func checkCancelled(t *testing.T, ctx context.Context, e *streamtest.Env, in streamtest.Instance, unpaid []inventory.Order) {
	t.Helper()
	a, err := e.DB.Products().Audit(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := inventory.Audit{ItemID: e.ID, InitialStock: 40, Stock: 34, Sold: 6, Orders: 6, Paid: 6, Cancelled: 24, CancelledOrders: 24}
	if a != want || !a.Conserved() {
		t.Errorf("audit %+v, want %+v, conserved", a, want)
	}
	if s := e.RedisStock(t); s != 40-20+16 {
		t.Errorf("Redis stock %d, want %d: 20 sold from the copy, 16 of them cancelled and returned once", s, 40-20+16)
	}
	for _, o := range unpaid {
		got, err := in.Service.Order(ctx, o.No)
		if err != nil || got.Status != inventory.StatusCancelled {
			t.Errorf("order %s: %+v, %v; want cancelled", o.No, got.Status, err)
		}
	}
	if _, err := in.Service.Pay(ctx, unpaid[0].No); !errors.Is(err, inventory.ErrOrderCancelled) {
		t.Errorf("paying a cancelled order: %v, want ErrOrderCancelled", err)
	}
}

// TestTwoCancelJobsRaceUnitsReturnOnce: two instances run the
// payment-timeout job at once, both having listed the same unpaid orders
// before either cancels one (a barrier), as two instances would if the
// fleet's job lock failed them. Every unit comes back once, in the
// database and in the Redis copy.
func TestTwoCancelJobsRaceUnitsReturnOnce(t *testing.T) {
	streamtest.OnEveryBackend(t, 40, func(t *testing.T, ctx context.Context, e *streamtest.Env) {
		clk := newClock()
		listed := testkit.NewBarrier(2, 10*time.Second)
		life := inventory.Lifecycle{PaymentTimeout: time.Minute, Now: clk.Now, BeforeCancel: func([]inventory.Order) { listed.Wait(ctx) }}
		a, bb := e.Instance("a", life), e.Instance("b", life)
		unpaid := lifecycleSale(t, ctx, e, a)

		clk.Advance(2 * time.Minute)
		reports := make([]inventory.CancelReport, 2)
		var wg sync.WaitGroup
		for i, in := range []streamtest.Instance{a, bb} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error
				if reports[i], err = in.Service.CancelUnpaid(ctx); err != nil {
					t.Errorf("cancel job %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
		cancelled, units, returned := 0, 0, 0
		for _, r := range reports {
			cancelled += r.Cancelled
			units += r.Units
			returned += r.Returned
		}
		t.Logf("job a: %+v; job b: %+v", reports[0], reports[1])
		if cancelled != 24 || units != 24 || returned != 16 {
			t.Errorf("the two jobs cancelled %d orders, %d units, returned %d to Redis; want 24, 24, 16 in all", cancelled, units, returned)
		}
		checkCancelled(t, ctx, e, a, unpaid)
	})
}

// TestCancelJobCrashMidwayUnitsReturnOnce: a job dies right after the
// database committed its first cancellation, before the Redis copy got the
// units back. The next run finishes the job, the units come back once, and
// a third run finds nothing to do. A run that died after the Redis script
// gave the units back but before the database heard of it is covered too:
// the script remembers the order, so the repeat gives nothing.
func TestCancelJobCrashMidwayUnitsReturnOnce(t *testing.T) {
	streamtest.OnEveryBackend(t, 40, func(t *testing.T, ctx context.Context, e *streamtest.Env) {
		clk := newClock()
		crash := errors.New("killed")
		var crashed atomic.Bool
		life := inventory.Lifecycle{PaymentTimeout: time.Minute, Now: clk.Now, AfterCancel: func(inventory.Order) error {
			if crashed.CompareAndSwap(false, true) {
				return crash
			}
			return nil
		}}
		in := e.Instance("a", life)
		unpaid := lifecycleSale(t, ctx, e, in)
		clk.Advance(2 * time.Minute)

		before := e.RedisStock(t)
		rep, err := in.Service.CancelUnpaid(ctx)
		if !errors.Is(err, crash) || rep.Cancelled != 1 {
			t.Fatalf("first run: %+v, %v; want it dead after one cancellation", rep, err)
		}
		if s := e.RedisStock(t); s != before {
			t.Fatalf("Redis stock moved from %d to %d before the crash point", before, s)
		}
		// Another crash shape: the script ran, the database never heard.
		owed, err := e.DB.Products().Owed(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range owed {
			if _, err := in.RedisStock.ReturnUnits(ctx, w.Order, w.Gen); err != nil {
				t.Fatal(err)
			}
		}

		for run := 2; run <= 3; run++ {
			rep, err := in.Service.CancelUnpaid(ctx)
			if err != nil {
				t.Fatalf("run %d: %v", run, err)
			}
			t.Logf("run %d: %+v", run, rep)
			if run == 3 && (rep.Cancelled != 0 || rep.Returned != 0) {
				t.Errorf("run 3 did %+v; want nothing left to do", rep)
			}
		}
		checkCancelled(t, ctx, e, in, unpaid)
	})
}

// TestPaymentTimeout: orders paid in time stay paid; the others are
// cancelled once their window has closed, not before; paying after the
// window closed is refused even before the job ran; a pending order
// (accepted, not yet written) cannot be paid yet.
func TestPaymentTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := streamtest.NewEnv(t, testenv.SQLite(t), 10)
	clk := newClock()
	in := e.Instance("a", inventory.Lifecycle{PaymentTimeout: 5 * time.Second, Now: clk.Now})
	orders := streamtest.BuyN(t, in.Service, inventory.StageDBAtomic, "u", 10)
	for _, o := range orders[:4] {
		if _, err := in.Service.Pay(ctx, o.No); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(4 * time.Second)
	if rep, err := in.Service.CancelUnpaid(ctx); err != nil || rep.Cancelled != 0 {
		t.Fatalf("inside the window: %+v, %v; want nothing cancelled", rep, err)
	}
	clk.Advance(2 * time.Second)
	if _, err := in.Service.Pay(ctx, orders[4].No); !errors.Is(err, inventory.ErrOrderCancelled) {
		t.Fatalf("paying after the window closed: %v, want ErrOrderCancelled", err)
	}
	rep, err := in.Service.CancelUnpaid(ctx)
	if err != nil || rep.Cancelled != 6 || rep.Units != 6 {
		t.Fatalf("after the window: %+v, %v; want 6 cancelled", rep, err)
	}
	a, err := e.DB.Products().Audit(ctx, e.ID)
	if err != nil || a.Stock != 6 || a.Sold != 4 || a.Paid != 4 || a.Cancelled != 6 || !a.Conserved() {
		t.Fatalf("audit %+v, %v; want 6 units back in stock, 4 sold and paid, conserved", a, err)
	}

	// Accepted by redis-stream, no writer running: pending.
	q := streamtest.BuyN(t, in.Service, inventory.StageRedisStream, "p", 1)[0]
	if got, err := in.Service.Order(ctx, q.No); err != nil || got.Status != inventory.StatusPending {
		t.Fatalf("queued order: %+v, %v; want pending", got, err)
	}
	if _, err := in.Service.Pay(ctx, q.No); !errors.Is(err, inventory.ErrOrderPending) {
		t.Fatalf("paying a pending order: %v, want ErrOrderPending", err)
	}
	if _, err := in.Service.Order(ctx, "O-none"); !errors.Is(err, inventory.ErrOrderNotFound) {
		t.Fatalf("unknown order: %v, want ErrOrderNotFound", err)
	}
}

// TestCancelledOrdersMarkTheirItemAsBought: an order the payment timeout
// cancels gives its units back to the database, which the Redis copy may
// never hear of (redis-sharded's buckets never do; a failed ReturnUnits
// leaves redis-atomic's short). The cancellation marks the item through
// OnBuy, so the reconcile job checks it in full at its next run instead of
// finding its copy unchanged and quiet.
func TestCancelledOrdersMarkTheirItemAsBought(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := streamtest.NewEnv(t, testenv.SQLite(t), 10)
	clk := newClock()
	in := e.Instance("a", inventory.Lifecycle{PaymentTimeout: 5 * time.Second, Now: clk.Now})
	streamtest.BuyN(t, in.Service, inventory.StageDBAtomic, "u", 2)
	var mu sync.Mutex
	var marked []int64
	in.Service.OnBuy(func(id int64) { mu.Lock(); marked = append(marked, id); mu.Unlock() })
	clk.Advance(6 * time.Second)
	if rep, err := in.Service.CancelUnpaid(ctx); err != nil || rep.Cancelled != 2 {
		t.Fatalf("cancel: %+v, %v; want 2 cancelled", rep, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(marked) == 0 || marked[0] != e.ID {
		t.Errorf("items marked by the cancellations: %v; want %d", marked, e.ID)
	}
}
