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
	// B holds for 10 s and A's watchdog renews for an hour: long enough that
	// B's lock cannot lapse before A's PEXPIRE or B's release, however
	// slow the machine (200 ms could), and far apart, so that the renewal
	// shows.
	if !rdb.SetNX(ctx, key, "B", 10*time.Second).Val() {
		t.Fatal("B did not obtain the expired lock")
	}
	t.Log("3. B: SET NX PX 10000 -> OK (B holds the lock for 10s)")
	// A's watchdog ticks: PEXPIRE without asking whose lock it is.
	renewed, err := rdb.PExpire(ctx, key, time.Hour).Result()
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
	if pttl <= 10*time.Second {
		t.Fatalf("B's PTTL = %v, want A's hour", pttl)
	}
	t.Logf("4. A's watchdog: PEXPIRE %s 3600000 -> 1; the key's owner is B and its PTTL is now %v:", key, pttl.Round(time.Second))
	t.Log("   A's watchdog extended B's lock to an hour, and A was told the renewal worked")

	// The safe way: renewal checks the owner token, and the lease tells its
	// holder it is lost.
	c, name := ourLock(t, rdb, "item")
	a := lapsedLease(t, ctx, c)
	waitGone(t, rdb, name)
	t.Log("5. internal/lock, same order: A's 50ms lease runs out and A is told (Lease.Done)")
	b, err := c.Obtain(ctx, "item", 10*time.Second, lock.ObtainOptions{Fixed: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("6. B obtains the lock for 10s")
	err = a.Refresh(ctx, time.Hour)
	if !errors.Is(err, lock.ErrLockLost) {
		t.Errorf("A's Refresh = %v, want ErrLockLost", err)
	}
	pttl = rdb.PTTL(ctx, name).Val()
	if pttl > 10*time.Second {
		t.Errorf("B's PTTL = %v after A's refused renewal, want at most 10s", pttl)
	}
	t.Logf("7. A renews: %v; B's PTTL stays %v (the script renews only its owner's lock)", err, pttl)
	if err := b.Release(ctx); err != nil {
		t.Errorf("B's Release = %v", err)
	}
}
