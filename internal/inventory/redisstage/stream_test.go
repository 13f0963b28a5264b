package redisstage_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/orderwriter"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage/streamtest"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestWriterKilledMidBatchEveryOrderConfirmedOnce: a writer takes a batch
// of 10 entries, writes them to the database (one transaction) and dies
// before it acknowledged any. A second writer takes the dead one's entries
// over after ClaimIdle, finds them written, and writes the 20 that were
// never read: every accepted order ends confirmed, with exactly one row,
// the stock is conserved in the database and in Redis, and each order is
// counted confirmed exactly once.
func TestWriterKilledMidBatchEveryOrderConfirmedOnce(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			const accepted = 30
			e := streamtest.NewEnv(t, b.Open(t), accepted)
			in := e.Instance("a", inventory.Lifecycle{})
			orders := streamtest.BuyN(t, in.Service, inventory.StageRedisStream, "k", accepted)
			for _, o := range orders {
				if o.Status != inventory.StatusPending {
					t.Fatalf("a redis-stream buy answered %s, want pending", o.Status)
				}
			}

			var confirmed atomic.Int64
			hooks := orderwriter.Hooks{Confirmed: func(time.Duration) { confirmed.Add(1) }}
			var writes atomic.Int64
			crash := errors.New("killed")
			var diedOn string
			stopA := streamtest.StartWriter(t, ctx, in.Stream, e.DB.Products(), orderwriter.Options{
				Consumer: "a", Batch: 10, Hooks: hooks,
				AfterWrite: func(o inventory.Order) error {
					if writes.Add(1) == 4 {
						diedOn = o.No
						return crash // written, not settled: the process dies here
					}
					return nil
				},
			})
			// A dies by itself; its Run returns the crash.
			deadline := time.After(30 * time.Second)
			for writes.Load() < 4 {
				select {
				case <-deadline:
					t.Fatalf("writer a wrote %d orders, never reached its 4th", writes.Load())
				case <-time.After(10 * time.Millisecond):
				}
			}
			if err := stopA(); !errors.Is(err, crash) {
				t.Fatalf("writer a's Run = %v, want the crash", err)
			}
			if n := confirmed.Load(); n != 0 {
				t.Fatalf("writer a settled %d orders before it died, want none", n)
			}
			var rows int
			if err := e.DB.Raw(ctx, "SELECT COUNT(*) FROM orders WHERE product_id = 1").Scan(&rows); err != nil || rows != 10 {
				t.Fatalf("rows written by the dead writer: %d, %v; want its batch of 10", rows, err)
			}
			pending, err := e.RDB.XPending(ctx, e.Key("orders"), orderwriter.GroupName).Result()
			if err != nil || pending.Count != 10 {
				t.Fatalf("entries left pending by the dead writer: %+v, %v; want its batch of 10", pending, err)
			}

			// The second instance's writer, with a short claim idle time.
			other := e.Instance("b", inventory.Lifecycle{})
			stopB := streamtest.StartWriter(t, ctx, other.Stream, e.DB.Products(), orderwriter.Options{Consumer: "b", ClaimIdle: 300 * time.Millisecond, Poll: 20 * time.Millisecond, Hooks: hooks})
			streamtest.WaitDrained(t, ctx, other.Stream, e.ID)
			// The settle empties the queue before its writer counts the
			// orders confirmed (the hook runs after the script): stop b,
			// whose Run returns after its last hook, before counting.
			if err := stopB(); err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("writer b's Run = %v", err)
			}

			for _, o := range orders {
				got, err := in.Service.Order(ctx, o.No)
				if err != nil || got.Status != inventory.StatusConfirmed {
					t.Errorf("order %s: %+v, %v; want confirmed", o.No, got, err)
				}
			}
			var distinct int
			if err := e.DB.Raw(ctx, "SELECT COUNT(*), COUNT(DISTINCT order_no) FROM orders WHERE product_id = 1").Scan(&rows, &distinct); err != nil {
				t.Fatal(err)
			}
			if rows != accepted || distinct != accepted {
				t.Errorf("order rows: %d (%d distinct), want %d, one each", rows, distinct, accepted)
			}
			if n := confirmed.Load(); n != accepted {
				t.Errorf("orders counted confirmed: %d, want %d (those written by the dead writer, such as %s, once)", n, accepted, diedOn)
			}
			a, err := e.DB.Products().Audit(ctx, e.ID)
			if err != nil || a.Sold != accepted || a.Stock != 0 || !a.Conserved() || a.Failed != 0 {
				t.Errorf("audit %+v, %v; want %d sold, 0 left, conserved, none failed", a, err, accepted)
			}
			if s := e.RedisStock(t); s != 0 {
				t.Errorf("Redis stock %d, want 0", s)
			}
			pending, err = e.RDB.XPending(ctx, e.Key("orders"), orderwriter.GroupName).Result()
			if err != nil || pending.Count != 0 {
				t.Errorf("entries still pending: %+v, %v", pending, err)
			}
			if n, _ := e.RDB.XLen(ctx, e.Key("dead")).Result(); n != 0 {
				t.Errorf("%d dead letters, want none", n)
			}
		})
	}
}

// TestWriterFailsWhatTheDatabaseCannotHold: the Redis copy says 5 units,
// the database only has 3 (another stage sold 2 meanwhile). All 5 buyers
// are accepted; the writer confirms 3, and the other 2 fail: a failed row
// each, their units back in the Redis copy, an entry each in the
// dead-letter stream, and their status answers failed.
func TestWriterFailsWhatTheDatabaseCannotHold(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			e := streamtest.NewEnv(t, b.Open(t), 5)
			in := e.Instance("a", inventory.Lifecycle{})
			if err := in.RedisStock.Reset(ctx, e.ID, 5); err != nil {
				t.Fatal(err)
			}
			streamtest.BuyN(t, in.Service, inventory.StageDBAtomic, "db", 2) // the copy does not see these
			orders := streamtest.BuyN(t, in.Service, inventory.StageRedisStream, "q", 5)
			var dead []string
			streamtest.StartWriter(t, ctx, in.Stream, e.DB.Products(), orderwriter.Options{Hooks: orderwriter.Hooks{DeadLettered: func(r string) { dead = append(dead, r) }}})
			streamtest.WaitDrained(t, ctx, in.Stream, e.ID)

			var confirmed, failed int
			for _, o := range orders {
				got, err := in.Service.Order(ctx, o.No)
				switch {
				case err != nil:
					t.Fatalf("order %s: %v", o.No, err)
				case got.Status == inventory.StatusConfirmed:
					confirmed++
				case got.Status == inventory.StatusFailed && got.Reason == "sold-out":
					failed++
				default:
					t.Fatalf("order %s is %s (reason %q)", o.No, got.Status, got.Reason)
				}
			}
			if confirmed != 3 || failed != 2 || !slices.Equal(dead, []string{"sold-out", "sold-out"}) {
				t.Fatalf("confirmed %d, failed %d, dead letters %v; want 3, 2, two sold-out", confirmed, failed, dead)
			}
			if n, err := e.RDB.XLen(ctx, e.Key("dead")).Result(); err != nil || n != 2 {
				t.Fatalf("dead-letter stream holds %d, %v; want 2", n, err)
			}
			if s := e.RedisStock(t); s != 2 {
				t.Fatalf("Redis stock %d, want the 2 failed units back", s)
			}
			a, err := e.DB.Products().Audit(ctx, e.ID)
			if err != nil || a.Sold != 5 || a.Stock != 0 || a.Failed != 2 || !a.Conserved() {
				t.Fatalf("audit %+v, %v; want 5 sold (2 db-atomic, 3 redis-stream), 2 failed, conserved", a, err)
			}
			// The writers trimmed what they acknowledged.
			if n, err := e.RDB.XLen(ctx, e.Key("orders")).Result(); err != nil || n > 1 {
				t.Fatalf("order stream holds %d entries after all were acknowledged, %v; want at most the last delivered one", n, err)
			}
		})
	}
}

// catalogThen is a Catalog that runs then once, right after its first
// Audit read the database and before that audit is returned.
type catalogThen struct {
	inventory.Catalog
	once sync.Once
	then func()
}

func (c *catalogThen) Audit(ctx context.Context, id int64) (inventory.Audit, error) {
	a, err := c.Catalog.Audit(ctx, id)
	c.once.Do(c.then)
	return a, err
}

// TestAuditNeverShowsTheQueueDrainedEarly: an audit reads the database and
// the order queue, and a writer may settle orders between the two reads.
// Forced here: the database read returns, then a writer drains the whole
// queue, then the audit goes on. Whatever it reads, an audit that says no
// order is pending must count every accepted order in the database;
// otherwise a client waiting for "pending 0" (the dashboard, the lab, the
// fleet test) reads accepted orders as lost.
func TestAuditNeverShowsTheQueueDrainedEarly(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			const accepted = 5
			e := streamtest.NewEnv(t, b.Open(t), accepted)
			in := e.Instance("a", inventory.Lifecycle{})
			streamtest.BuyN(t, in.Service, inventory.StageRedisStream, "d", accepted)
			cat := &catalogThen{Catalog: e.DB.Products(), then: func() {
				streamtest.StartWriter(t, ctx, in.Stream, e.DB.Products(), orderwriter.Options{Consumer: "a", Poll: 10 * time.Millisecond})
				streamtest.WaitDrained(t, ctx, in.Stream, e.ID)
			}}
			svc := inventory.NewService(cat, map[string]inventory.Stage{inventory.StageRedisStream: in.Stream}, "a", "O").
				WithLifecycle(inventory.Lifecycle{RedisStock: in.RedisStock, Queue: in.Stream})
			a, err := svc.Audit(ctx, e.ID)
			if err != nil {
				t.Fatal(err)
			}
			if a.PendingOrders == 0 && a.Orders != accepted {
				t.Fatalf("audit %+v: no order pending, yet %d of the %d accepted are in the database", a, a.Orders, accepted)
			}
			if a.Orders+a.PendingOrders < accepted {
				t.Fatalf("audit %+v: %d written + %d pending, want at least the %d accepted", a, a.Orders, a.PendingOrders, accepted)
			}
		})
	}
}
