package pitfalls_test

import (
	"errors"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/lock"
)

// TestWatchdogWithoutOwnerCheckExtendsAnotherClientsLock: a watchdog that
// renews with plain PEXPIRE, after its own lease lapsed, extends the lock of
// whoever holds it now, and is told its renewal worked.
func TestWatchdogWithoutOwnerCheckExtendsAnotherClientsLock(t *testing.T) {
	ctx, rdb, key := naive(t)

	lapse(t, ctx, rdb, key) // A's watchdog tick came late: the lease ran out
	t.Logf("1. A: SET %s A NX PX 50 -> OK; A's watchdog is to renew it", key)
	t.Log("2. A's watchdog tick comes late: the 50ms lease runs out and the key expires")
	if !rdb.SetNX(ctx, key, "B", 200*time.Millisecond).Val() {
		t.Fatal("B did not obtain the expired lock")
	}
	t.Log("3. B: SET NX PX 200 -> OK (B holds the lock for 200ms)")
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
	pttl := rdb.PTTL(ctx, key).Val()
	if pttl <= 200*time.Millisecond {
		t.Fatalf("B's PTTL = %v, want A's minute", pttl)
	}
	t.Logf("4. A's watchdog: PEXPIRE %s 60000 -> 1; the key's owner is B and its PTTL is now %v:", key, pttl.Round(time.Second))
	t.Log("   A's watchdog extended B's lock to a minute, and A was told the renewal worked")

	// The safe way: renewal checks the owner token, and the lease tells its
	// holder it is lost.
	c, name := ourLock(t, rdb, "item")
	a := lapsedLease(t, ctx, c)
	waitGone(t, rdb, name)
	t.Log("5. internal/lock, same order: A's 50ms lease runs out and A is told (Lease.Done)")
	b, err := c.Obtain(ctx, "item", 200*time.Millisecond, lock.ObtainOptions{Fixed: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("6. B obtains the lock for 200ms")
	err = a.Refresh(ctx, time.Minute)
	if !errors.Is(err, lock.ErrLockLost) {
		t.Errorf("A's Refresh = %v, want ErrLockLost", err)
	}
	pttl = rdb.PTTL(ctx, name).Val()
	if pttl > 200*time.Millisecond {
		t.Errorf("B's PTTL = %v after A's refused renewal, want at most 200ms", pttl)
	}
	t.Logf("7. A renews: %v; B's PTTL stays %v (the script renews only its owner's lock)", err, pttl)
	if err := b.Release(ctx); err != nil {
		t.Errorf("B's Release = %v", err)
	}
}
