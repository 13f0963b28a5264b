package pitfalls_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// naive returns what a pitfall's naive half works with: a context bound
// to 30s, the test Redis, and a fresh key, deleted at cleanup.
func naive(t *testing.T) (context.Context, *redis.Client, string) {
	t.Helper()
	rdb := testenv.Redis(t)
	key := testenv.Name("seckill:pitfall:")
	t.Cleanup(func() { _ = rdb.Del(context.Background(), key).Err() })
	return ctxT(t), rdb, key
}

// lapse has client A take key the naive way, SET key A NX PX 50, and
// returns once the key has expired: A's lease ran out while A still works.
func lapse(t *testing.T, ctx context.Context, rdb *redis.Client, key string) {
	t.Helper()
	if !rdb.SetNX(ctx, key, "A", 50*time.Millisecond).Val() {
		t.Fatal("A did not obtain the lock")
	}
	waitGone(t, rdb, key)
}

// ourLock returns a lock client with a prefix of its own, so its keys do not
// collide with other tests, and the Redis name of key's lock.
func ourLock(t *testing.T, rdb *redis.Client, key string) (*lock.Client, string) {
	t.Helper()
	prefix := testenv.Name("seckill:pitfall:") + ":"
	c := testenv.NewLock(t, rdb, lock.Options{Prefix: prefix})
	name := prefix + "{" + key + "}"
	t.Cleanup(func() {
		// The lock and its fence record, which keeps the last token.
		_ = rdb.Del(context.Background(), name, name+":fence").Err()
		if err := c.Close(); err != nil {
			t.Errorf("close lock client: %v", err)
		}
	})
	return c, name
}

// waitGone polls until key has expired: the forced "the lease ran out"
// step of a test. It polls rather than sleeping a guessed time.
func waitGone(t *testing.T, rdb *redis.Client, key string) {
	t.Helper()
	testkit.Eventually(t, key+" to expire", 5*time.Second, func() bool {
		return rdb.Exists(context.Background(), key).Val() == 0
	})
}

// lapsedLease obtains our lock on "item" with c for a fixed 50ms and waits
// until the lease reports itself lost, as its holder would learn it from
// Lease.Done.
func lapsedLease(t *testing.T, ctx context.Context, c *lock.Client) *lock.Lease {
	t.Helper()
	a, err := c.Obtain(ctx, "item", 50*time.Millisecond, lock.ObtainOptions{Fixed: true})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lease did not report its loss within 5s")
	}
	return a
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
