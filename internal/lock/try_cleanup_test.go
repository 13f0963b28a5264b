package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// A try whose outcome is unknown (its reply did not come in time) is
// released by owner on another pooled connection. Redis does not order
// commands across connections: if the try's bytes are still in the
// network (a TCP retransmit), the clean-up runs first and finds nothing,
// and the try then grants the lock to an owner who has given up. Here the
// try is held back until the clean-up has run.
func TestCleanUpOvertakenByItsTry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("single", func(t *testing.T) {
		t.Parallel()
		d := &testkit.NetFaults{}
		rdb := faultyClient(t, d, *lock.ClientOptions(&redis.Options{}))
		c, prefix := newClient(t, rdb, lock.Options{})
		mustRelease(t, mustObtain(t, c, ctx, "warm-up", time.Second, lock.ObtainOptions{}))
		for _, wait := range []time.Duration{0, time.Second} {
			key := "k-" + wait.String()
			d.Delay(1, scriptCall("obtain", prefix, key))
			l, err := c.Obtain(ctx, key, 10*time.Second, lock.ObtainOptions{Wait: wait})
			if err == nil {
				t.Fatalf("Wait %v: Obtain succeeded although its try never reached Redis", wait)
			}
			_ = l
			if err := d.Deliver(); err != nil { // the clean-up has run: Obtain released before returning
				t.Fatal(err)
			}
			if v := record(t, rdb, prefix, key); v != "" {
				t.Errorf("Wait %v: Obtain failed (%v), but its try, arriving after the clean-up, left the lock held by nobody: %q", wait, err, v)
			}
		}
	})
	t.Run("redlock gate", func(t *testing.T) {
		t.Parallel()
		q := newQuorum(t)
		const key = "k"
		gate := q.r.Gate(key)
		q.servers[(gate+1)%3].Kill() // so that the attempt fails: one instance can grant it at most
		q.faults[gate].Delay(1, scriptCall("obtain", "lock:", key))
		if _, err := q.r.Obtain(ctx, key, 10*time.Second, lock.ObtainOptions{}); err == nil {
			t.Fatal("Obtain succeeded with one instance dead and the gate's try held back")
		}
		if q.faults[gate].Held() != 1 {
			t.Fatalf("the gate's try was not held back (%d)", q.faults[gate].Held())
		}
		testkit.Eventually(t, "the gate's clean-up to run", 10*time.Second, func() bool { return q.releases[gate].Load() > 1 })
		if err := q.faults[gate].Deliver(); err != nil {
			t.Fatal(err)
		}
		if v := record(t, q.clients[gate], "lock:", key); v != "" {
			t.Errorf("the gate's try, arriving after the clean-up, left the lock held by nobody: %q", v)
		}
	})
}

// The same without any injection: Redis is paused (SIGSTOP) while a try is
// on its way, the client's read times out first, and the clean-up goes out
// on another connection while Redis is still paused. Once it resumes, Redis
// runs the try and the clean-up in either order: neither may leave the lock
// held by nobody (its TTL is a minute; it must be free long before).
func TestPausedRedisLeavesNoOrphan(t *testing.T) {
	t.Parallel()
	s := testenv.StartRedis(t)
	timedOut := make(chan struct{}, 1)
	rdb := redis.NewClient(lock.ClientOptions(&redis.Options{Addr: s.Addr, ReadTimeout: 200 * time.Millisecond, PoolSize: 4, MinIdleConns: 2}))
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(replyHook(func(cmd redis.Cmder, err error) {
		var ne interface{ Timeout() bool }
		if lock.ScriptOf(cmd) == "obtain" && errors.As(err, &ne) && ne.Timeout() {
			select {
			case timedOut <- struct{}{}:
			default:
			}
		}
	}))
	c, prefix := newClient(t, rdb, lock.Options{ReleaseTimeout: 30 * time.Second})
	ctx := context.Background()
	mustRelease(t, mustObtain(t, c, ctx, "warm-up", time.Second, lock.ObtainOptions{}))
	s.Pause()
	t.Cleanup(s.Resume)
	got := make(chan error, 1)
	go func() {
		_, err := c.Obtain(ctx, "k", time.Minute, lock.ObtainOptions{})
		got <- err
	}()
	<-timedOut // the try is in Redis's input buffer; the clean-up follows
	s.Resume()
	if err := <-got; err == nil {
		t.Fatal("Obtain succeeded although its reply timed out")
	}
	testkit.Eventually(t, "the lock to be free", 10*time.Second, func() bool { return !isHeld(t, rdb, prefix, "k") })
}

// An obtain whose context ends after Redis ran the script (the reply comes
// too late) must not leave the lock held by nobody for its whole TTL.
func TestObtainCancelledAfterRedisRanItReleases(t *testing.T) {
	t.Parallel()
	addr := testRedis(t).Options().Addr
	// cancelAfterObtain makes the next obtain script that succeeds in Redis
	// come back as if the caller's context had ended while the reply was on
	// its way.
	type trap struct {
		armed  atomic.Bool
		cancel atomic.Pointer[context.CancelFunc]
	}
	hook := func(tr *trap) scriptHook {
		return scriptHook{after: func(ctx context.Context, script string, cmd redis.Cmder, err error) error {
			if script == "obtain" && err == nil && tr.armed.CompareAndSwap(true, false) {
				(*tr.cancel.Load())()
				return ctx.Err()
			}
			return err
		}}
	}
	for _, tc := range []struct {
		name string
		wait time.Duration
	}{{"try", 0}, {"wait", time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tr := &trap{}
			rdb := hookedClient(t, &redis.Options{Addr: addr, ContextTimeoutEnabled: true}, hook(tr))
			c, prefix := newClient(t, rdb, lock.Options{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tr.cancel.Store(&cancel)
			tr.armed.Store(true)
			_, err := c.Obtain(ctx, "k", 10*time.Second, lock.ObtainOptions{Wait: tc.wait})
			if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want ErrNotObtained and context.Canceled", err)
			}
			if isHeld(t, rdb, prefix, "k") {
				t.Fatal("Obtain failed, but the lock it took in Redis is still held (by nobody)")
			}
		})
	}
	t.Run("redlock", func(t *testing.T) {
		t.Parallel()
		tr := &trap{}
		var clients []redis.UniversalClient
		var plain []*redis.Client
		for range 3 {
			s := testenv.StartRedis(t)
			c := redlockClient(t, s.Addr)
			c.AddHook(hook(tr))
			clients, plain = append(clients, c), append(plain, c)
		}
		r := mustRedLock(t, clients, lock.RedLockOptions{InstanceTimeout: 2 * time.Second})
		t.Cleanup(func() { _ = r.Close() })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		tr.cancel.Store(&cancel)
		tr.armed.Store(true)
		_, err := r.Obtain(ctx, "k", 10*time.Second, lock.ObtainOptions{})
		if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want ErrNotObtained and context.Canceled", err)
		}
		for i, c := range plain {
			testkit.Eventually(t, fmt.Sprintf("instance %d to be released", i), 10*time.Second, func() bool {
				return !isHeld(t, c, "lock:", "k")
			})
		}
	})
}
