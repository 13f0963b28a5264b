package pitfalls_test

import (
	"errors"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestWatchdogWithoutOwnerCheckExtendsAnotherClientsLock: a watchdog that
// renews with plain PEXPIRE, after its own lease lapsed, extends the lock of
// whoever holds it now, and is told its renewal worked.
func TestWatchdogWithoutOwnerCheckExtendsAnotherClientsLock(t *testing.T) {
	ctx := ctxT(t)
	rdb := testenv.Redis(t)
	key := naiveKey(t, rdb)

	if !rdb.SetNX(ctx, key, "A", 50*time.Millisecond).Val() {
		t.Fatal("A did not obtain the lock")
	}
	waitGone(t, rdb, key) // A's watchdog tick came late: the lease ran out
	if !rdb.SetNX(ctx, key, "B", 200*time.Millisecond).Val() {
		t.Fatal("B did not obtain the expired lock")
	}
	// A's watchdog ticks: PEXPIRE without asking whose lock it is.
	renewed, err := rdb.PExpire(ctx, key, time.Minute).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !renewed {
		t.Fatal("A's PEXPIRE found no key; the pitfall did not happen")
	}
	if owner := rdb.Get(ctx, key).Val(); owner != "B" {
		t.Fatalf("lock owner = %q, want B", owner)
	}
	if pttl := rdb.PTTL(ctx, key).Val(); pttl <= 200*time.Millisecond {
		t.Fatalf("B's PTTL = %v, want A's minute", pttl)
	}
	t.Log("A's watchdog extended B's lock to a minute, and A was told the renewal worked")

	// The safe way: renewal checks the owner token, and the lease tells its
	// holder it is lost.
	c, name := ourLock(t, rdb, "item")
	a, err := c.Obtain(ctx, "item", 50*time.Millisecond, lock.ObtainOptions{Fixed: true})
	if err != nil {
		t.Fatal(err)
	}
	waitLost(t, a)
	waitGone(t, rdb, name)
	b, err := c.Obtain(ctx, "item", 200*time.Millisecond, lock.ObtainOptions{Fixed: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Refresh(ctx, time.Minute); !errors.Is(err, lock.ErrLockLost) {
		t.Errorf("A's Refresh = %v, want ErrLockLost", err)
	}
	if pttl := rdb.PTTL(ctx, name).Val(); pttl > 200*time.Millisecond {
		t.Errorf("B's PTTL = %v after A's refused renewal, want at most 200ms", pttl)
	}
	if err := b.Release(ctx); err != nil {
		t.Errorf("B's Release = %v", err)
	}
}
