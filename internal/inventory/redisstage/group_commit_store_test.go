package redisstage_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage/streamtest"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// heldLedger is a Ledger whose first write waits for release, and which
// counts the transactions it was asked for.
type heldLedger struct {
	*store.Ledger
	entered chan struct{}
	release chan struct{}

	mu     sync.Mutex
	single int
	groups []int // size of each multi-order write
	held   bool
}

func (h *heldLedger) wait() {
	h.mu.Lock()
	first := !h.held
	h.held = true
	h.mu.Unlock()
	if first {
		close(h.entered)
		<-h.release
	}
}

func (h *heldLedger) Deduct(ctx context.Context, o inventory.Order) error {
	h.mu.Lock()
	h.single++
	h.mu.Unlock()
	h.wait()
	return h.Ledger.Deduct(ctx, o)
}

func (h *heldLedger) DeductAll(ctx context.Context, orders []inventory.Order) error {
	h.mu.Lock()
	h.groups = append(h.groups, len(orders))
	h.mu.Unlock()
	h.wait()
	return h.Ledger.DeductAll(ctx, orders)
}

// TestRedisAtomicCrowdCommitsInGroups: a crowd of eleven buyers gets units
// from Redis while the first sale's transaction still holds the hot row.
// The ten behind it are written in one more transaction, not ten; every
// buyer gets 201, and the database, the Redis copy and the reservations
// agree (11 sold, conserved, nothing left pending).
func TestRedisAtomicCrowdCommitsInGroups(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			const stock, crowd = 20, 10
			e := streamtest.NewEnv(t, b.Open(t), stock)
			h := &heldLedger{Ledger: e.DB.Products(), entered: make(chan struct{}), release: make(chan struct{})}
			ra := redisstage.NewRedisAtomic(e.RDB, h, e.NS, nil)
			svc := inventory.NewService(e.DB.Products(), map[string]inventory.Stage{inventory.StageRedisAtomic: ra}, "a", "O").
				WithLifecycle(inventory.Lifecycle{RedisStock: ra})

			errs := make(chan error, crowd+1)
			buy := func(user string) {
				_, err := svc.Buy(ctx, inventory.StageRedisAtomic, inventory.Request{ItemID: e.ID, UserID: user, Quantity: 1})
				errs <- err
			}
			go buy("first")
			<-h.entered
			for i := range crowd {
				go buy(fmt.Sprintf("c%d", i))
			}
			testkit.Eventually(t, fmt.Sprintf("%d sales to wait behind the first write", crowd), 30*time.Second, func() bool {
				return ra.WaitingToWrite(e.ID) == crowd
			})
			close(h.release)
			for range crowd + 1 {
				if err := <-errs; err != nil {
					t.Errorf("a buyer: %v", err)
				}
			}
			h.mu.Lock()
			single, groups := h.single, h.groups
			h.mu.Unlock()
			if single != 1 || len(groups) != 1 || groups[0] != crowd {
				t.Errorf("%d single writes and groups %v; want the first alone and one group of %d", single, groups, crowd)
			}
			a, err := svc.Audit(ctx, e.ID)
			if err != nil || a.Sold != crowd+1 || a.Stock != stock-crowd-1 || !a.Conserved() || a.Pending != 0 {
				t.Errorf("audit %+v, %v; want %d sold, %d left, conserved, nothing pending", a, err, crowd+1, stock-crowd-1)
			}
			if err := ra.WaitConfirms(ctx); err != nil {
				t.Fatal(err)
			}
			if n, err := e.RDB.HLen(ctx, e.Key("pending")).Result(); err != nil || n != 0 {
				t.Errorf("%d reservations still pending (%v), want every sale confirmed", n, err)
			}
			if s := e.RedisStock(t); s != stock-crowd-1 {
				t.Errorf("Redis copy holds %d, want %d", s, stock-crowd-1)
			}
		})
	}
}
