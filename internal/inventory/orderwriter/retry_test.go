package orderwriter_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/orderwriter"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage/streamtest"
	"github.com/seckill-lab/seckill/internal/store"
)

// flaky is the store whose next writes fail as they do when the pool's
// MySQL connections were killed: transient, nothing written.
type flaky struct {
	*store.Ledger
	mu     sync.Mutex
	fail   int // writes still to fail; -1: every write fails
	writes int // writes tried, failed or not
	tried  chan struct{}
}

func newFlaky(l *store.Ledger, fail int) *flaky {
	return &flaky{Ledger: l, fail: fail, tried: make(chan struct{}, 1000)}
}

func (f *flaky) try() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes++
	select {
	case f.tried <- struct{}{}:
	default:
	}
	if f.fail == 0 {
		return nil
	}
	if f.fail > 0 {
		f.fail--
	}
	return fmt.Errorf("products: %w: invalid connection", inventory.ErrUnavailable)
}

func (f *flaky) failNext(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = n
}

func (f *flaky) tries() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes
}

func (f *flaky) DeductAll(ctx context.Context, orders []inventory.Order) error {
	if err := f.try(); err != nil {
		return err
	}
	return f.Ledger.DeductAll(ctx, orders)
}

func (f *flaky) Deduct(ctx context.Context, o inventory.Order) error {
	if err := f.try(); err != nil {
		return err
	}
	return f.Ledger.Deduct(ctx, o)
}

// settledOnce waits until the item's orders are confirmed, no entry is
// pending and the item left the set of items with work, then checks that
// each order has one row and was counted confirmed once.
func settledOnce(t *testing.T, ctx context.Context, e *streamtest.Env, in streamtest.Instance, orders []inventory.Order, counted *atomic.Int64) {
	t.Helper()
	eventually(t, "the orders to be written and acknowledged, and the item to leave the set", func() bool {
		for _, o := range orders {
			got, err := in.Service.Order(ctx, o.No)
			if err != nil || got.Status != inventory.StatusConfirmed {
				return false
			}
		}
		p, err := e.RDB.XPending(ctx, e.Key("orders"), orderwriter.GroupName).Result()
		return err == nil && p.Count == 0 && !inWorkSet(t, e, in)
	})
	if n := counted.Load(); n != int64(len(orders)) {
		t.Errorf("orders counted confirmed: %d, want %d, once each", n, len(orders))
	}
	var rows int
	if err := e.DB.Raw(ctx, "SELECT COUNT(*) FROM orders WHERE product_id = 1").Scan(&rows); err != nil || rows != len(orders) {
		t.Errorf("order rows: %d, %v; want %d", rows, err, len(orders))
	}
}

// TestOrderWhoseWriteFailedTransientlyIsRetriedByItsWriter: the first
// database write of a queued order fails as it does after a KILL of the
// pool's connections. The entry stays pending to the writer that read it,
// and that writer tries it again itself: ClaimIdle and Poll are an hour,
// so neither a take-over nor a recovery pass can be what writes it. The
// old writer left the entry to XAUTOCLAIM, ClaimIdle later (10 s by
// default), and a buyer polling its 202 waited that long for nothing.
func TestOrderWhoseWriteFailedTransientlyIsRetriedByItsWriter(t *testing.T) {
	streamtest.OnEveryBackend(t, 5, func(t *testing.T, ctx context.Context, e *streamtest.Env) {
		a := e.Instance("a", inventory.Lifecycle{})
		st := newFlaky(e.DB.Products(), 1)
		var counted atomic.Int64
		streamtest.StartWriter(t, ctx, a.Stream, st, orderwriter.Options{
			Consumer: "a", Poll: time.Hour, ClaimIdle: time.Hour,
			Hooks: orderwriter.Hooks{Confirmed: func(time.Duration) { counted.Add(1) }},
		})
		orders := streamtest.BuyN(t, a.Service, inventory.StageRedisStream, "u", 1)
		settledOnce(t, ctx, e, a, orders, &counted)
		if n := st.tries(); n != 2 {
			t.Errorf("writes tried: %d, want 2 (the one that failed, the retry)", n)
		}
	})
}

// waits records the waits a writer chose before its retry rounds.
type waits struct {
	mu sync.Mutex
	d  []time.Duration
}

func (w *waits) add(_ int64, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.d = append(w.d, d)
}

func (w *waits) get() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Duration(nil), w.d...)
}

// TestWriterRetriesAFailingDatabaseWithBackoff: the database fails an
// order's write six times in a row. The writer tries it again after each
// failure, and only after a wait: 1, 2, 4ms, then 4ms each (the cap), so
// seven tries and six waits, never a try without a wait before it. Once a
// write goes through the backoff starts over: the next order's one failure
// is retried after 1ms.
func TestWriterRetriesAFailingDatabaseWithBackoff(t *testing.T) {
	streamtest.OnEveryBackend(t, 5, func(t *testing.T, ctx context.Context, e *streamtest.Env) {
		a := e.Instance("a", inventory.Lifecycle{})
		st := newFlaky(e.DB.Products(), 6)
		var counted atomic.Int64
		var got waits
		streamtest.StartWriter(t, ctx, a.Stream, st, orderwriter.Options{
			Consumer: "a", Poll: time.Hour, ClaimIdle: time.Hour,
			RetryBackoff: time.Millisecond, RetryBackoffMax: 4 * time.Millisecond, BeforeRetry: got.add,
			Hooks: orderwriter.Hooks{Confirmed: func(time.Duration) { counted.Add(1) }},
		})
		orders := streamtest.BuyN(t, a.Service, inventory.StageRedisStream, "u", 1)
		settledOnce(t, ctx, e, a, orders, &counted)
		ms := time.Millisecond
		want := []time.Duration{ms, 2 * ms, 4 * ms, 4 * ms, 4 * ms, 4 * ms}
		if w := got.get(); fmt.Sprint(w) != fmt.Sprint(want) {
			t.Errorf("waits before the retries: %v, want %v", w, want)
		}
		if n := st.tries(); n != 7 {
			t.Errorf("writes tried: %d, want 7 (six failed, one after each wait)", n)
		}

		st.failNext(1)
		orders = append(orders, streamtest.BuyN(t, a.Service, inventory.StageRedisStream, "v", 1)...)
		settledOnce(t, ctx, e, a, orders, &counted)
		want = append(want, ms)
		if w := got.get(); fmt.Sprint(w) != fmt.Sprint(want) {
			t.Errorf("waits before the retries: %v, want %v (the backoff started over)", w, want)
		}
		if n := st.tries(); n != 9 {
			t.Errorf("writes tried: %d, want 9", n)
		}
	})
}

// TestEntryOfAWriterCutOffFromTheDatabaseIsTakenOverWhileItRetries: writer
// a cannot write at all (its database unreachable, from it alone) and
// retries its entry every few milliseconds. Its retries read the entry
// without delivering it again: the delivery count stays 1 and the idle
// time keeps growing, so writer b, which can write, takes the entry over
// ClaimIdle after its delivery and writes it, once. Retries that read
// the entry again with XREADGROUP (id 0) would reset its idle time at
// each try and keep b off for as long as a fails.
func TestEntryOfAWriterCutOffFromTheDatabaseIsTakenOverWhileItRetries(t *testing.T) {
	streamtest.OnEveryBackend(t, 5, func(t *testing.T, ctx context.Context, e *streamtest.Env) {
		a := e.Instance("a", inventory.Lifecycle{})
		cut := newFlaky(e.DB.Products(), -1)
		streamtest.StartWriter(t, ctx, a.Stream, cut, orderwriter.Options{
			Consumer: "a", Poll: time.Hour, ClaimIdle: time.Hour,
			RetryBackoff: time.Millisecond, RetryBackoffMax: 20 * time.Millisecond,
		})
		orders := streamtest.BuyN(t, a.Service, inventory.StageRedisStream, "u", 1)
		for i := 0; i < 3; i++ { // the first try and two retries
			select {
			case <-cut.tried:
			case <-ctx.Done():
				t.Fatalf("writer a tried %d writes, want 3", i)
			}
		}
		p, err := e.RDB.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: e.Key("orders"), Group: orderwriter.GroupName, Start: "-", End: "+", Count: 10}).Result()
		if err != nil || len(p) != 1 || p[0].Consumer != "a" || p[0].RetryCount != 1 {
			t.Fatalf("pending after a's retries: %+v, %v; want one entry, a's, delivered once", p, err)
		}

		var counted, claimed atomic.Int64
		b := e.Instance("b", inventory.Lifecycle{})
		streamtest.StartWriter(t, ctx, b.Stream, e.DB.Products(), orderwriter.Options{
			Consumer: "b", ClaimIdle: 300 * time.Millisecond, Poll: 20 * time.Millisecond,
			Hooks: orderwriter.Hooks{
				Confirmed: func(time.Duration) { counted.Add(1) },
				Claimed:   func(n int) { claimed.Add(int64(n)) },
			},
		})
		settledOnce(t, ctx, e, a, orders, &counted)
		if n := claimed.Load(); n < 1 {
			t.Errorf("entries b took over: %d, want a's", n)
		}
	})
}
