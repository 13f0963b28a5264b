package inventory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// pausedHolder runs the pitfall "a pause past the TTL" on a stock of 1:
// buyer A obtains the lock (watchdog off, 150ms lease), reads stock 1, and
// is paused by the test hook until its lease has expired and buyer B has
// obtained the lock and bought the unit. Then A resumes and writes.
func pausedHolder(t *testing.T, fencing bool) (errA error, audit inventory.Audit) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := testenv.SQLite(t)
	rdb := testenv.Redis(t)
	locker := lock.New(rdb, lock.Options{Prefix: testenv.Name("fence") + ":"})
	t.Cleanup(func() {
		if err := locker.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := db.Products().Reset(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}

	aRead := make(chan struct{})
	bDone := make(chan struct{})
	section := inventory.SectionOptions{
		Fencing: fencing,
		BetweenReadAndWrite: func(ctx context.Context, o inventory.Order) {
			if o.UserID == "A" {
				close(aRead)
				<-bDone // the pause: A's lease runs out meanwhile
			}
		},
	}
	lo := inventory.LockOptions{TTL: 150 * time.Millisecond, Wait: 5 * time.Second, Fixed: true}
	stage := inventory.NewRedisLock(locker, db.Products(), "product", section, lo)
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{"redis-lock": stage}, "t", "O")

	doneA := make(chan error, 1)
	go func() {
		_, err := svc.Buy(ctx, "redis-lock", inventory.Request{ItemID: 1, UserID: "A", Quantity: 1})
		doneA <- err
	}()
	<-aRead
	// B waits on the lock until A's lease expires, then buys the unit.
	if _, err := svc.Buy(ctx, "redis-lock", inventory.Request{ItemID: 1, UserID: "B", Quantity: 1}); err != nil {
		t.Fatalf("B must get the lock once A's lease expired and buy the unit: %v", err)
	}
	close(bDone)
	errA = <-doneA
	a, err := db.Products().Audit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	return errA, a
}

// TestFencingRejectsPausedHolder: with fencing, the paused holder's write
// is refused by the database, its transaction rolls back, and nothing is
// oversold.
func TestFencingRejectsPausedHolder(t *testing.T) {
	errA, a := pausedHolder(t, true)
	if !errors.Is(errA, inventory.ErrLockLost) {
		t.Fatalf("A's write must be fenced off with ErrLockLost, got %v", errA)
	}
	if a.Orders != 1 || a.Oversold() != 0 || !a.Conserved() {
		t.Fatalf("want exactly B's order and conservation, got %+v", a)
	}
}

// TestWithoutFencingThePausedHolderOversells is the workshop's proof that
// the lock alone is not enough: the same pause, with SECKILL_FENCING=false,
// sells the one unit twice.
func TestWithoutFencingThePausedHolderOversells(t *testing.T) {
	errA, a := pausedHolder(t, false)
	if errA != nil && !errors.Is(errA, lock.ErrLockLost) {
		t.Fatalf("A's purchase: %v", errA)
	}
	if a.Orders != 2 || a.Oversold() != 1 || a.Conserved() {
		t.Fatalf("without fencing the paused holder must oversell by one, got %+v oversold=%d", a, a.Oversold())
	}
}
