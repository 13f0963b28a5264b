package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/lock"
)

// The examples run against the test Redis (SECKILL_TEST_REDIS_ADDR), or an
// in-process one when there is none; exampleRedis stands for
//
//	rdb := redis.NewClient(lock.ClientOptions(&redis.Options{Addr: "127.0.0.1:6379"}))
//
// plus a key prefix of the example's own, deleted by cleanup.

// The common case: wait a little for the lock, work under the lease's
// context, check the lease right before the write, release.
func ExampleClient_Obtain() {
	rdb, prefix, cleanup := exampleRedis(0)
	defer cleanup()
	locks, err := lock.New(rdb, lock.Options{Prefix: prefix})
	if err != nil {
		fmt.Println(err) // a client that retries, or a bad Prefix
		return
	}
	defer locks.Close()

	ctx := context.Background()
	lease, err := locks.Obtain(ctx, "sku-1", 5*time.Second, lock.ObtainOptions{Wait: 2 * time.Second})
	if errors.Is(err, lock.ErrNotObtained) {
		fmt.Println("busy, try later") // a 429 in an HTTP service
		return
	}
	if err != nil {
		fmt.Println("redis:", err) // a 503
		return
	}
	defer func() {
		if err := lease.Release(ctx); errors.Is(err, lock.ErrLockLost) {
			fmt.Println("the lock was lost during the work: check the store")
		}
	}()

	// Work under lease.Context(): it is cancelled if the lock is lost. The
	// write carries lease.Token(), so the store refuses a stale holder.
	if err := sellOne(lease.Context(), "sku-1", lease.Token()); err != nil {
		fmt.Println("not sold:", err)
		return
	}
	fmt.Println("sold one")
	// Output: sold one
}

// sellOne stands for the guarded write, e.g.
//
//	UPDATE stock SET qty = qty - 1, fence_token = ?
//	 WHERE sku = ? AND qty > 0 AND fence_token <= ?
func sellOne(ctx context.Context, sku string, token int64) error {
	// ... read the stock, check it ...
	// Right before the write: Err looks at the clock, so a holder that
	// was paused past its lease finds out here.
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	_ = token // ... and the write ...
	return nil
}

// Stop work when the lock is lost: here someone deletes the key behind the
// holder's back, and the watchdog's next renewal finds out.
func ExampleLease_Done() {
	rdb, prefix, cleanup := exampleRedis(0)
	defer cleanup()
	locks, err := lock.New(rdb, lock.Options{Prefix: prefix})
	if err != nil {
		fmt.Println(err) // a client that retries, or a bad Prefix
		return
	}
	defer locks.Close()

	ctx := context.Background()
	lease, err := locks.Obtain(ctx, "report", 300*time.Millisecond, lock.ObtainOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	// The lock's key (PREFIX{key}, see the package docs) disappears: an
	// operator, a failover to a replica that had not seen it.
	rdb.Del(ctx, prefix+"{report}")

	select {
	case <-lease.Done():
		fmt.Println("stop, lock lost:", errors.Is(lease.Err(), lock.ErrLockLost))
	case <-time.After(time.Minute): // the long job
		fmt.Println("done")
	}
	fmt.Println("release reports the loss:", errors.Is(lease.Release(ctx), lock.ErrLockLost))
	// Output:
	// stop, lock lost: true
	// release reports the loss: true
}

// Reentrancy needs an explicit owner: the same owner may obtain the lock
// again while it holds it, and every hold is released on its own.
func ExampleObtainOptions_owner() {
	rdb, prefix, cleanup := exampleRedis(0)
	defer cleanup()
	locks, err := lock.New(rdb, lock.Options{Prefix: prefix})
	if err != nil {
		fmt.Println(err) // a client that retries, or a bad Prefix
		return
	}
	defer locks.Close()

	ctx := context.Background()
	me := lock.ObtainOptions{Owner: "order-42"}
	outer, err := locks.Obtain(ctx, "cart", time.Second, me)
	if err != nil {
		fmt.Println(err)
		return
	}
	inner, err := locks.Obtain(ctx, "cart", time.Second, me) // same owner: succeeds
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("same token:", inner.Token() == outer.Token())
	_, err = locks.Obtain(ctx, "cart", time.Second, lock.ObtainOptions{Owner: "order-43"})
	fmt.Println("another owner:", errors.Is(err, lock.ErrNotObtained))
	fmt.Println("release inner:", inner.Release(ctx)) // still held by outer
	fmt.Println("release outer:", outer.Release(ctx)) // now free
	fmt.Println("release again:", errors.Is(outer.Release(ctx), lock.ErrNotHeld))
	// Output:
	// same token: true
	// another owner: true
	// release inner: <nil>
	// release outer: <nil>
	// release again: true
}

// RedLock takes the lock on a majority of independent servers; it and
// Client are interchangeable behind the Locker interface. (Here three
// logical databases of one server stand in for three servers.)
func ExampleNewRedLock() {
	var clients []redis.UniversalClient
	var prefix string
	for db := 1; db <= 3; db++ {
		rdb, p, cleanup := exampleRedis(db)
		defer cleanup()
		clients, prefix = append(clients, rdb), p
	}
	quorum, err := lock.NewRedLock(clients, lock.RedLockOptions{
		Options:         lock.Options{Prefix: prefix},
		InstanceTimeout: 250 * time.Millisecond, // far below the TTL
	})
	if err != nil {
		fmt.Println(err) // an instance client that retries
		return
	}
	defer quorum.Close()

	var locker lock.Locker = quorum
	lease, err := locker.Obtain(context.Background(), "sku-1", 5*time.Second, lock.ObtainOptions{Wait: 2 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("held by a majority; token > 0:", lease.Token() > 0)
	fmt.Println("release:", lease.Release(context.Background()))
	// Output:
	// held by a majority; token > 0: true
	// release: <nil>
}

// Feeding metrics without importing a metrics library here.
func ExampleHooks() {
	rdb, prefix, cleanup := exampleRedis(0)
	defer cleanup()
	var obtained, busy int
	locks, err := lock.New(rdb, lock.Options{Prefix: prefix, Hooks: lock.Hooks{
		Obtained: func(key string, d time.Duration, err error) { // histogram.Observe(d.Seconds())
			if err == nil {
				obtained++
			} else {
				busy++
			}
		},
		Lost: func(key string, err error) { /* counter.Inc() */ },
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locks.Close()

	ctx := context.Background()
	lease, _ := locks.Obtain(ctx, "k", time.Second, lock.ObtainOptions{})
	_, _ = locks.Obtain(ctx, "k", time.Second, lock.ObtainOptions{}) // held: not obtained
	_ = lease.Release(ctx)
	fmt.Println("obtained:", obtained, "not obtained:", busy)
	// Output: obtained: 1 not obtained: 1
}

// A lock for mutual exclusion alone, with no fencing tokens to send to a
// store: Options.Unfenced saves the fence record's read and write on every
// obtain. Everything else (the watchdog, Done, reentrancy) is the same.
func ExampleOptions_unfenced() {
	rdb, prefix, cleanup := exampleRedis(0)
	defer cleanup()
	locks, err := lock.New(rdb, lock.Options{Prefix: prefix, Unfenced: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locks.Close()

	ctx := context.Background()
	lease, err := locks.Obtain(ctx, "nightly-report", 30*time.Second, lock.ObtainOptions{})
	if errors.Is(err, lock.ErrNotObtained) {
		fmt.Println("another instance runs it")
		return
	}
	if err != nil {
		fmt.Println("redis:", err)
		return
	}
	// Work under lease.Context(); lease.Token() is no fencing token here.
	fmt.Println("running the report")
	if err := lease.Release(ctx); err != nil {
		fmt.Println("the lock was lost during the work:", err)
	}
	// Output: running the report
}
