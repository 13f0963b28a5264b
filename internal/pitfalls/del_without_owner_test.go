package pitfalls_test

import (
	"errors"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/lock"
)

// TestDelWithoutOwnerCheckReleasesAnotherClientsLock: a holder that
// releases with a plain DEL after its lease ran out deletes the next
// holder's lock, and a third client gets in while the second still works.
func TestDelWithoutOwnerCheckReleasesAnotherClientsLock(t *testing.T) {
	ctx, rdb, key := naive(t)

	// A obtains atomically (SET NX PX): the only flaw here is the release.
	lapse(t, ctx, rdb, key) // A is slow: its lease runs out
	t.Logf("1. A: SET %s A NX PX 50 -> OK (A holds the lock)", key)
	t.Log("2. A is still working when its 50ms lease runs out: the key expires")
	if !rdb.SetNX(ctx, key, "B", time.Minute).Val() {
		t.Fatal("B did not obtain the expired lock")
	}
	t.Log("3. B: SET NX -> OK (B holds the lock now)")
	// A finishes and "releases" its lock.
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	t.Log("4. A finishes and releases with a plain DEL: it deletes B's lock")
	// C comes while B is still in its critical section.
	if !rdb.SetNX(ctx, key, "C", time.Minute).Val() {
		t.Fatal("C was refused; the pitfall did not happen")
	}
	t.Log("5. C: SET NX -> OK while B still works: B and C both hold the lock")

	// The safe way: release compares the owner token in the same script.
	c, _ := ourLock(t, rdb, "item")
	a := lapsedLease(t, ctx, c)
	t.Log("6. internal/lock, same order: A's 50ms lease runs out and A is told (Lease.Done)")
	var b *lock.Lease
	var err error
	deadline := time.Now().Add(5 * time.Second)
	for b == nil { // Redis expires the key no earlier than A's lease says it is lost
		b, err = c.Obtain(ctx, "item", time.Minute, lock.ObtainOptions{Fixed: true})
		if err != nil && (!errors.Is(err, lock.ErrNotObtained) || time.Now().After(deadline)) {
			t.Fatalf("B's obtain: %v", err)
		}
	}
	t.Log("7. B obtains the lock")
	err = a.Release(ctx)
	if !errors.Is(err, lock.ErrLockLost) {
		t.Errorf("A's Release = %v, want ErrLockLost", err)
	}
	t.Logf("8. A releases: %v (the script compares owner tokens; B's lock stays)", err)
	_, err = c.Obtain(ctx, "item", time.Minute, lock.ObtainOptions{Fixed: true})
	if !errors.Is(err, lock.ErrNotObtained) {
		t.Errorf("C's obtain = %v, want ErrNotObtained: B must still hold the lock", err)
	}
	t.Logf("9. C tries: %v (B is still the only holder)", err)
	if err := b.Release(ctx); err != nil {
		t.Errorf("B's Release = %v, want nil", err)
	}
}
