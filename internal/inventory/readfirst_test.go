package inventory_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// countingLocker refuses every lock and counts who asked.
type countingLocker struct{ asked atomic.Int64 }

func (l *countingLocker) Obtain(context.Context, string, time.Duration, lock.ObtainOptions) (*lock.Lease, error) {
	l.asked.Add(1)
	return nil, lock.ErrNotObtained
}

// TestLockStagesAnswerSoldOutWithoutTheLock: the crowd that arrives after
// the last unit hears "sold out" from a stock read; nobody queues for the
// lock only to learn it there.
func TestLockStagesAnswerSoldOutWithoutTheLock(t *testing.T) {
	ctx := context.Background()
	db := testenv.SQLite(t)
	if err := db.Products().Reset(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	locker := &countingLocker{}
	lo := inventory.LockOptions{TTL: time.Second, Wait: time.Second}
	for name, stage := range map[string]inventory.Stage{
		"redis-lock": inventory.NewRedisLock(locker, db.Products(), "product", inventory.SectionOptions{}, lo),
		"redlock":    inventory.NewRedLock(locker, db.Products(), "product", inventory.SectionOptions{}, lo),
	} {
		for i := 0; i < 5; i++ {
			err := stage.Buy(ctx, inventory.Order{No: "n", ItemID: 1, UserID: "u", Quantity: 1})
			if !errors.Is(err, inventory.ErrSoldOut) {
				t.Fatalf("%s: %v, want sold out", name, err)
			}
		}
	}
	if n := locker.asked.Load(); n != 0 {
		t.Fatalf("%d buyers of a sold-out item queued for the lock, want 0", n)
	}
	// With stock, the buyer does go to the lock (and this locker refuses).
	if err := db.Products().Reset(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	stage := inventory.NewRedisLock(locker, db.Products(), "product", inventory.SectionOptions{}, lo)
	if err := stage.Buy(ctx, inventory.Order{No: "n", ItemID: 1, UserID: "u", Quantity: 1}); !errors.Is(err, inventory.ErrLockTimeout) || locker.asked.Load() != 1 {
		t.Fatalf("with stock the buyer must ask for the lock: %v, asked %d", err, locker.asked.Load())
	}
}
