package pitfalls_test

import (
	"errors"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestDelWithoutOwnerCheckReleasesAnotherClientsLock: a holder that
// releases with a plain DEL after its lease ran out deletes the next
// holder's lock, and a third client gets in while the second still works.
func TestDelWithoutOwnerCheckReleasesAnotherClientsLock(t *testing.T) {
	ctx := ctxT(t)
	rdb := testenv.Redis(t)
	key := naiveKey(t, rdb)

	// A obtains atomically (SET NX PX): the only flaw here is the release.
	if !rdb.SetNX(ctx, key, "A", 50*time.Millisecond).Val() {
		t.Fatal("A did not obtain the lock")
	}
	waitGone(t, rdb, key) // A is slow: its lease runs out
	if !rdb.SetNX(ctx, key, "B", time.Minute).Val() {
		t.Fatal("B did not obtain the expired lock")
	}
	// A finishes and "releases" its lock.
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	// C comes while B is still in its critical section.
	if !rdb.SetNX(ctx, key, "C", time.Minute).Val() {
		t.Fatal("C was refused; the pitfall did not happen")
	}
	t.Log("B and C both hold the lock: A's DEL released B's lock")

	// The safe way: release compares the owner token in the same script.
	c, _ := ourLock(t, rdb, "item")
	a, err := c.Obtain(ctx, "item", 50*time.Millisecond, lock.ObtainOptions{Fixed: true})
	if err != nil {
		t.Fatal(err)
	}
	waitLost(t, a)
	var b *lock.Lease
	deadline := time.Now().Add(5 * time.Second)
	for b == nil { // Redis expires the key no earlier than A's lease says it is lost
		b, err = c.Obtain(ctx, "item", time.Minute, lock.ObtainOptions{Fixed: true})
		if err != nil && (!errors.Is(err, lock.ErrNotObtained) || time.Now().After(deadline)) {
			t.Fatalf("B's obtain: %v", err)
		}
	}
	if err := a.Release(ctx); !errors.Is(err, lock.ErrLockLost) {
		t.Errorf("A's Release = %v, want ErrLockLost", err)
	}
	if _, err := c.Obtain(ctx, "item", time.Minute, lock.ObtainOptions{Fixed: true}); !errors.Is(err, lock.ErrNotObtained) {
		t.Errorf("C's obtain = %v, want ErrNotObtained: B must still hold the lock", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Errorf("B's Release = %v, want nil", err)
	}
}
