package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/lock"
)

// The common case: wait a little for the lock, do the work under the
// lease's context, release.
func ExampleClient_Obtain() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	locks := lock.New(rdb, lock.Options{Prefix: "example:"})
	defer locks.Close()

	lease, err := locks.Obtain(ctx, "sku-1", 2*time.Second, lock.ObtainOptions{Wait: 500 * time.Millisecond})
	if errors.Is(err, lock.ErrNotObtained) {
		fmt.Println("busy, try later")
		return
	}
	if err != nil {
		fmt.Println("redis:", err)
		return
	}
	defer func() {
		if err := lease.Release(ctx); errors.Is(err, lock.ErrLockLost) {
			fmt.Println("the lock was lost during the work: check the store")
		}
	}()

	// Work under lease.Context(): it is cancelled if the lock is lost.
	// Writes carry lease.Token() so the store can reject stale holders.
	if err := sellOne(lease.Context(), "sku-1", lease.Token()); err != nil {
		fmt.Println("sell:", err)
	}
}

func sellOne(ctx context.Context, sku string, token int64) error {
	// UPDATE stock SET qty = qty - 1, fence_token = ? WHERE sku = ? AND qty > 0 AND fence_token < ?
	return ctx.Err()
}

// Watching for loss during a long critical section.
func ExampleLease_Done() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	locks := lock.New(rdb, lock.Options{Prefix: "example:"})
	defer locks.Close()

	lease, err := locks.Obtain(ctx, "report", time.Second, lock.ObtainOptions{})
	if err != nil {
		return
	}
	work := time.After(3 * time.Second) // longer than the TTL: the watchdog renews
	select {
	case <-work:
	case <-lease.Done():
		fmt.Println("stop:", lease.Err())
	}
	if err := lease.Release(ctx); err != nil {
		fmt.Println("release:", err)
	}
}

// Reentrancy needs an explicit owner.
func ExampleObtainOptions_owner() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	locks := lock.New(rdb, lock.Options{Prefix: "example:"})
	defer locks.Close()

	me := lock.ObtainOptions{Owner: "order-42"}
	outer, err := locks.Obtain(ctx, "cart", time.Second, me)
	if err != nil {
		return
	}
	inner, err := locks.Obtain(ctx, "cart", time.Second, me) // same owner: succeeds
	if err == nil {
		if err := inner.Release(ctx); err != nil { // still held by outer
			fmt.Println("release inner:", err)
		}
	}
	if err := outer.Release(ctx); err != nil { // now free
		fmt.Println("release outer:", err)
	}
}

// RedLock and Client are interchangeable behind the Locker interface.
func ExampleNewRedLock() {
	var clients []redis.UniversalClient
	for _, addr := range []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"} {
		clients = append(clients, redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}))
	}
	var locker lock.Locker = lock.NewRedLock(clients, lock.RedLockOptions{InstanceTimeout: 50 * time.Millisecond})
	_ = locker
}

// Feeding metrics without importing a metrics library here.
func ExampleHooks() {
	var lost int
	opts := lock.Options{Hooks: lock.Hooks{
		Obtained: func(key string, d time.Duration, err error) { /* histogram.Observe(d.Seconds()) */ },
		Lost:     func(key string, err error) { lost++ /* counter.Inc() */ },
	}}
	_ = opts
}
