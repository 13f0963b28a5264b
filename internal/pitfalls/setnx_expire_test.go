package pitfalls_test

import (
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/lock"
)

// TestSetnxThenExpireLeavesLockWithoutTTL: taking a lock with SETNX and
// giving it a TTL with a second command leaves a lock that never expires
// when the client dies between the two.
func TestSetnxThenExpireLeavesLockWithoutTTL(t *testing.T) {
	ctx, rdb, key := naive(t)

	// Client A, the naive way: SETNX ...
	if ok, err := rdb.SetNX(ctx, key, "A", 0).Result(); err != nil || !ok {
		t.Fatalf("A's SETNX = %v, %v; want the lock", ok, err)
	}
	t.Logf("1. A: SETNX %s A -> 1 (A holds the lock; its TTL is to come in a second command)", key)
	// ... and A dies here: EXPIRE key 10 is never sent.
	t.Log("2. A dies before sending EXPIRE (a crash, a deploy, an OOM kill)")

	ttl, err := rdb.Do(ctx, "TTL", key).Int()
	if err != nil {
		t.Fatal(err)
	}
	if ttl != -1 {
		t.Fatalf("TTL of the orphaned lock = %d, want -1 (no expiry)", ttl)
	}
	t.Logf("3. TTL %s -> %d: the lock never expires", key, ttl)
	// Whenever B comes, now or after any TTL A meant to set, the lock is
	// still there: the item cannot be sold until someone deletes it by hand.
	if ok, err := rdb.SetNX(ctx, key, "B", 0).Result(); err != nil || ok {
		t.Fatalf("B's SETNX = %v, %v; want refused by the orphaned lock", ok, err)
	}
	t.Log("4. B: SETNX -> 0: refused by a lock whose holder is dead, now and at any later time")

	// The safe way sets the owner and the TTL in one script: there is no
	// moment at which the lock exists without an expiry.
	c, name := ourLock(t, rdb, "item")
	l, err := c.Obtain(ctx, "item", 10*time.Second, lock.ObtainOptions{Fixed: true})
	if err != nil {
		t.Fatal(err)
	}
	pttl := rdb.PTTL(ctx, name).Val()
	if pttl <= 0 || pttl > 10*time.Second {
		t.Errorf("our lock's PTTL = %v, want within (0, 10s]", pttl)
	}
	t.Logf("5. internal/lock: one script sets owner and TTL together: PTTL %s -> %v, never a moment without expiry", name, pttl)
	if err := l.Release(ctx); err != nil {
		t.Errorf("release: %v", err)
	}
}
