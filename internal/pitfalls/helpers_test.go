package pitfalls_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// naiveKey returns a fresh key for the naive code, deleted at cleanup.
func naiveKey(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	key := testenv.Name("seckill:pitfall:")
	t.Cleanup(func() { _ = rdb.Del(context.Background(), key).Err() })
	return key
}

// ourLock returns a lock client with a prefix of its own, so its keys do not
// collide with other tests, and the Redis name of key's lock.
func ourLock(t *testing.T, rdb *redis.Client, key string) (*lock.Client, string) {
	t.Helper()
	prefix := testenv.Name("seckill:pitfall:") + ":"
	c := lock.New(rdb, lock.Options{Prefix: prefix})
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
	deadline := time.Now().Add(5 * time.Second)
	for rdb.Exists(context.Background(), key).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not expire within 5s", key)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitLost waits until our lease reports itself lost, as its holder would
// learn it from Lease.Done.
func waitLost(t *testing.T, l *lock.Lease) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lease did not report its loss within 5s")
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
