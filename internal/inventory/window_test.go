package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
	"github.com/seckill-lab/seckill/internal/inventory/orderwriter"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage/streamtest"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// windowInstance is one instance of one stage whose own clock is off by
// skew: its orders, and its crowd control (for the stages the composition
// root wraps), read that clock. The window must not care.
type windowInstance struct {
	svc   *inventory.Service
	queue *redisstage.RedisStream // redis-stream only
	// ref reads the stage's reference clock: Redis TIME for the Redis
	// stages, the database's clock for the others.
	ref func() time.Time
	mu  sync.Mutex
	// refusals counts the crowd's refusals by reason.
	refusals map[string]int
}

func newWindowInstance(t *testing.T, ctx context.Context, db *store.DB, sc stageCase, skew time.Duration) *windowInstance {
	t.Helper()
	env := newRaceEnv(t)
	clock := func() time.Time { return time.Now().Add(skew) }
	st := sc.build(env, db.Products(), inventory.SectionOptions{})
	w := &windowInstance{refusals: map[string]int{}}
	if q, ok := st.(*redisstage.RedisStream); ok {
		w.queue = q
		streamtest.StartWriter(t, ctx, q, db.Products(), orderwriter.Options{})
	}
	crowd := admission.NewCrowd(admission.CrowdOptions{Epochs: &memEpochs{}, Kind: env.ns, Now: clock,
		Refused: func(reason string) { w.mu.Lock(); w.refusals[reason]++; w.mu.Unlock() }})
	if !inventory.Oversells(sc.stage, 2) {
		st = crowd.Wrap(st) // as the composition root does
	}
	w.svc = inventory.NewService(db.Products(), map[string]inventory.Stage{sc.stage: st}, "skewed", "O").
		WithCrowd(crowd).WithLifecycle(inventory.Lifecycle{Now: clock})
	w.ref = func() time.Time {
		t.Helper()
		var now time.Time
		var err error
		if env.rdb != nil && (sc.stage == inventory.StageRedisAtomic || sc.stage == inventory.StageRedisStream) {
			now, err = env.rdb.Time(ctx).Result()
		} else {
			now, err = db.Products().Now(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		return now
	}
	return w
}

func (w *windowInstance) buy(ctx context.Context, stage string, id int64, user string) error {
	_, err := w.svc.Buy(ctx, stage, inventory.Request{ItemID: id, UserID: user, Quantity: 1})
	return err
}

func (w *windowInstance) refused(reason string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.refusals[reason]
}

// untilRef polls the reference clock until it reaches at.
func (w *windowInstance) untilRef(t *testing.T, ctx context.Context, at time.Time) {
	t.Helper()
	for w.ref().Before(at) {
		select {
		case <-ctx.Done():
			t.Fatalf("the reference clock never reached %v", at)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// sold is how many units of id were sold, once the queue (redis-stream)
// has written what it accepted.
func (w *windowInstance) sold(t *testing.T, ctx context.Context, db *store.DB, id int64) int {
	t.Helper()
	if w.queue != nil {
		streamtest.WaitDrained(t, ctx, w.queue, id)
	}
	a, err := db.Products().Audit(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return a.Sold
}

// windowAttempts bounds the tries of a check that the reference clock made
// inconclusive (the machine was so slow that the opening came before the
// answer): such a try proves nothing and is made again, never counted.
const windowAttempts = 5

// TestWindowOnTheReferenceClock runs every stage on an instance whose own
// clock is two seconds fast, then two seconds slow, on both SQL backends.
// Fast, it sells nothing before opens_at by the reference clock (its own
// clock says the sale opened half a second ago) and sells once the
// reference clock reaches it. Slow, it sells a sale that opened a second
// ago (its clock says a second to go) and sells nothing of a sale that
// closed a second ago.
func TestWindowOnTheReferenceClock(t *testing.T) {
	for _, backend := range testenv.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			db := backend.Open(t)
			var nextID atomic.Int64
			nextID.Store(3000)
			for _, sc := range stageCases {
				t.Run(sc.stage, func(t *testing.T) {
					t.Parallel()
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					t.Run("fast", func(t *testing.T) { windowFast(t, ctx, db, sc, nextID.Add(1)) })
					t.Run("slow", func(t *testing.T) { windowSlow(t, ctx, db, sc, nextID.Add(1)) })
				})
			}
		})
	}
}

func insertItem(t *testing.T, ctx context.Context, db *store.DB, id int64, name string) {
	t.Helper()
	if err := db.Exec(ctx, "INSERT INTO products (id, name, initial_stock, stock) VALUES (?, ?, 5, 5)", id, name); err != nil {
		t.Fatal(err)
	}
}

func windowFast(t *testing.T, ctx context.Context, db *store.DB, sc stageCase, id int64) {
	insertItem(t, ctx, db, id, "window-fast-"+sc.stage)
	w := newWindowInstance(t, ctx, db, sc, 2*time.Second)
	for attempt := 1; ; attempt++ {
		if attempt > windowAttempts {
			t.Fatalf("%d tries in a row answered after the opening: the machine is too slow to tell", windowAttempts)
		}
		opens := w.ref().Add(1500 * time.Millisecond)
		if err := w.svc.ResetSale(ctx, id, 5, inventory.SaleWindow{OpensAt: opens}); err != nil {
			t.Fatal(err)
		}
		// Twice: the second may come from the crowd's memory.
		errs := []error{w.buy(ctx, sc.stage, id, "early-1"), w.buy(ctx, sc.stage, id, "early-2")}
		if !w.ref().Before(opens) {
			continue // inconclusive: the opening came before the answers
		}
		for _, err := range errs {
			var no *inventory.NotOpen
			if !errors.As(err, &no) || !errors.Is(err, inventory.ErrSaleNotOpen) {
				t.Fatalf("a buy before opens_at by the reference clock, on an instance 2 s fast: %v, want not open yet", err)
			}
			// At most what was left when the window was set, give or
			// take the reference clock's resolution (SQLite's is a ms).
			if no.Wait <= 0 || no.Wait > 1500*time.Millisecond+time.Millisecond {
				t.Errorf("not open yet with a wait of %v, want in (0, 1.5s]", no.Wait)
			}
		}
		if got := w.sold(t, ctx, db, id); got != 0 {
			t.Fatalf("sold %d units before the opening", got)
		}
		w.untilRef(t, ctx, opens)
		if err := w.buy(ctx, sc.stage, id, "on-time"); err != nil {
			t.Fatalf("a buy once the reference clock reached opens_at: %v", err)
		}
		if got := w.sold(t, ctx, db, id); got != 1 {
			t.Fatalf("sold %d units, want the on-time buyer's 1", got)
		}
		return
	}
}

func windowSlow(t *testing.T, ctx context.Context, db *store.DB, sc stageCase, id int64) {
	insertItem(t, ctx, db, id, "window-slow-"+sc.stage)
	w := newWindowInstance(t, ctx, db, sc, -2*time.Second)
	if err := w.svc.ResetSale(ctx, id, 5, inventory.SaleWindow{OpensAt: w.ref().Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	if err := w.buy(ctx, sc.stage, id, "open"); err != nil {
		t.Fatalf("a buy a second after opens_at by the reference clock, on an instance 2 s slow: %v", err)
	}
	if got := w.sold(t, ctx, db, id); got != 1 {
		t.Fatalf("sold %d units, want 1", got)
	}
	if err := w.svc.ResetSale(ctx, id, 5, inventory.SaleWindow{ClosesAt: w.ref().Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"late-1", "late-2"} {
		if err := w.buy(ctx, sc.stage, id, user); !errors.Is(err, inventory.ErrSaleClosed) {
			t.Fatalf("a buy a second after closes_at by the reference clock, on an instance 2 s slow: %v, want closed", err)
		}
	}
	if got := w.sold(t, ctx, db, id); got != 0 {
		t.Fatalf("sold %d units after the closing", got)
	}
}

// TestWindowPrecedence checks the order of the answers where the window
// and a sell-out meet, on every stage: the window comes first. An item
// with no stock that is not open yet is "not open yet", not "sold out";
// and a sell-out that the crowd's memory holds gives way to "closed" once
// the sale closes by the reference clock, though the memory's own
// instance runs two seconds slow.
func TestWindowPrecedence(t *testing.T) {
	for _, backend := range testenv.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			db := backend.Open(t)
			var nextID atomic.Int64
			nextID.Store(4000)
			for _, sc := range stageCases {
				t.Run(sc.stage, func(t *testing.T) {
					t.Parallel()
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					id := nextID.Add(1)
					insertItem(t, ctx, db, id, "window-precedence-"+sc.stage)
					w := newWindowInstance(t, ctx, db, sc, -2*time.Second)

					if err := w.svc.ResetSale(ctx, id, 0, inventory.SaleWindow{OpensAt: w.ref().Add(time.Hour)}); err != nil {
						t.Fatal(err)
					}
					if err := w.buy(ctx, sc.stage, id, "early"); !errors.Is(err, inventory.ErrSaleNotOpen) || errors.Is(err, inventory.ErrSoldOut) {
						t.Fatalf("no stock, not open yet: %v, want not open yet", err)
					}

					for attempt := 1; ; attempt++ {
						if attempt > windowAttempts {
							t.Fatalf("%d tries in a row closed before the sale ended: the machine is too slow to tell", windowAttempts)
						}
						closes := w.ref().Add(time.Second)
						if err := w.svc.ResetSale(ctx, id, 1, inventory.SaleWindow{ClosesAt: closes}); err != nil {
							t.Fatal(err)
						}
						err := w.buy(ctx, sc.stage, id, fmt.Sprintf("winner-%d", attempt))
						var soldOut []error
						for i := range 3 {
							soldOut = append(soldOut, w.buy(ctx, sc.stage, id, fmt.Sprintf("after-%d-%d", attempt, i)))
						}
						if !w.ref().Before(closes) {
							continue // inconclusive: the sale closed before it sold out
						}
						if err != nil {
							t.Fatalf("the one unit: %v", err)
						}
						for _, err := range soldOut {
							if !errors.Is(err, inventory.ErrSoldOut) {
								t.Fatalf("after the last unit, in the window: %v, want sold out", err)
							}
						}
						w.untilRef(t, ctx, closes)
						for _, user := range []string{"closed-1", "closed-2"} {
							if err := w.buy(ctx, sc.stage, id, user); !errors.Is(err, inventory.ErrSaleClosed) {
								t.Fatalf("sold out, then closed by the reference clock: %v, want closed", err)
							}
						}
						t.Logf("%s: refusals %v", sc.stage, w.refusals)
						return
					}
				})
			}
		})
	}
}

// TestEarlyCrowdSellsNothing releases 200 buyers at once, an hour before
// the opening, on every stage: every one is told "not open yet", nothing
// is sold, and on the stages behind the crowd control a buyer after the
// crowd is answered from memory. How many reached the stage is logged:
// the ones that arrived before the first answer came back.
func TestEarlyCrowdSellsNothing(t *testing.T) {
	for _, backend := range testenv.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			db := backend.Open(t)
			var nextID atomic.Int64
			nextID.Store(5000)
			for _, sc := range stageCases {
				t.Run(sc.stage, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					id := nextID.Add(1)
					insertItem(t, ctx, db, id, "window-crowd-"+sc.stage)
					w := newWindowInstance(t, ctx, db, sc, 2*time.Second)
					if err := w.svc.ResetSale(ctx, id, 5, inventory.SaleWindow{OpensAt: w.ref().Add(time.Hour)}); err != nil {
						t.Fatal(err)
					}
					start := make(chan struct{})
					var wg sync.WaitGroup
					errs := make(chan error, raceBuyers)
					for b := range raceBuyers {
						wg.Add(1)
						go func() {
							defer wg.Done()
							<-start
							if err := w.buy(ctx, sc.stage, id, fmt.Sprint("early-", b)); !errors.Is(err, inventory.ErrSaleNotOpen) {
								errs <- err
							}
						}()
					}
					close(start)
					wg.Wait()
					close(errs)
					for err := range errs {
						t.Errorf("an early buyer: %v, want not open yet", err)
					}
					if got := w.sold(t, ctx, db, id); got != 0 {
						t.Fatalf("sold %d units an hour before the opening", got)
					}
					wrapped := !inventory.Oversells(sc.stage, 2)
					stage := w.refused(admission.RefusedWindow)
					if err := w.buy(ctx, sc.stage, id, "after-the-crowd"); !errors.Is(err, inventory.ErrSaleNotOpen) {
						t.Fatalf("after the crowd: %v, want not open yet", err)
					}
					if wrapped && w.refused(admission.RefusedWindow) != stage {
						t.Errorf("after the crowd, a buyer reached the stage: the memory should have answered")
					}
					if !wrapped {
						t.Logf("%s: %d early buyers, each refused by one read of the window (no crowd control)", sc.stage, raceBuyers+1)
						return
					}
					t.Logf("%s: %d early buyers, %d answered by the stage, %d from memory", sc.stage, raceBuyers+1, w.refused(admission.RefusedWindow), w.refused(admission.RefusedWindowRemembered))
				})
			}
		})
	}
}

// memEpochs is a fleet's shared epoch store, in memory (as in
// admission's tests).
type memEpochs struct {
	mu    sync.Mutex
	n     map[string]int
	fail  bool
	reads int
}

func (e *memEpochs) Epoch(_ context.Context, item string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reads++
	if e.fail {
		return "", errors.New("epoch store unreachable")
	}
	return strconv.Itoa(e.n[item]), nil
}

func (e *memEpochs) Bump(_ context.Context, item string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[string]int{}
	}
	e.n[item]++
	return nil
}
