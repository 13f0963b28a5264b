package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/lock"
)

// A Release that comes while the lease's loss is being reported (the Lost
// hook is running) must report the loss, not a clean release, even if the
// key, lost by the clock, was still in Redis and the release deleted it.
// The hook holds on until that Release has returned, or for half a second
// if the Release waits for the hook (as it should).
func TestReleaseWhileTheLossIsReported(t *testing.T) {
	t.Parallel()
	hookIn := make(chan struct{})
	releaseReturned := make(chan struct{})
	rdb := testRedis(t)
	var prefix string
	c, prefix := newClient(t, rdb, lock.Options{Hooks: lock.Hooks{Lost: func(key string, _ error) {
		// Redis keeps the key longer than the lease trusted it.
		rdb.PExpire(context.Background(), lockKey(prefix, key), 10*time.Second)
		close(hookIn)
		select {
		case <-releaseReturned:
		case <-time.After(500 * time.Millisecond):
		}
	}}})
	ctx := context.Background()
	l := mustObtain(t, c, ctx, "k", 100*time.Millisecond, lock.ObtainOptions{Fixed: true})
	<-hookIn
	var err error
	go func() {
		err = l.Release(ctx)
		close(releaseReturned)
	}()
	<-releaseReturned
	if !errors.Is(err, lock.ErrLockLost) || !errors.Is(l.Err(), lock.ErrLockLost) {
		t.Fatalf("Release during the Lost hook returned %v and left Err %v; want the loss from both", err, l.Err())
	}
	if !isClosed(l.Done()) {
		t.Fatal("Done is open after Release")
	}
}
