package lock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

var probe = redis.NewScript(`return redis.call('INCR', KEYS[1])`)

// TestInstanceClientsReturnWithinDeadline drives the clients of RedLock
// instances, built with lock.InstanceOptions as the app builds them,
// through refused dials and very short deadlines from many goroutines while
// instances are killed and restarted, and checks that every call returns
// within its own deadline (plus slack for a busy machine), and that every
// pool serves again once its server is back. go-redis v9.17.0 lost pool
// turns this way and hung for good (go-redis issues 3619, 3630).
func TestInstanceClientsReturnWithinDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("kills and restarts two instances under 64 workers; left to the full tier")
	}
	t.Parallel()
	var servers []*testenv.RedisProcess
	var clients []*redis.Client
	var universal []redis.UniversalClient
	for range 3 {
		s := testenv.StartRedis(t)
		c := redis.NewClient(lock.InstanceOptions(&redis.Options{Addr: s.Addr}))
		t.Cleanup(func() { _ = c.Close() })
		servers, clients, universal = append(servers, s), append(clients, c), append(universal, c)
	}
	const releaseTimeout = 500 * time.Millisecond
	r := mustRedLock(t, universal, lock.RedLockOptions{
		Options:         lock.Options{ReleaseTimeout: releaseTimeout},
		InstanceTimeout: 50 * time.Millisecond,
	})
	t.Cleanup(func() { _ = r.Close() })

	const workers = 64
	type call struct {
		what     string
		deadline time.Time
	}
	inflight := make([]atomic.Pointer[call], workers)
	var calls, failed, overran atomic.Int64
	var worst atomic.Int64 // ns past deadline+slack
	var hung sync.Once
	var hangReport string
	// timed runs one call and checks it returned by its deadline plus slack.
	timed := func(w int, what string, deadline time.Time, f func() error) error {
		c := &call{what, deadline}
		inflight[w].Store(c)
		err := f()
		inflight[w].Store(nil)
		calls.Add(1)
		if err != nil {
			failed.Add(1)
		}
		if over := time.Since(deadline.Add(slack)); over > 0 {
			overran.Add(1)
			for old := worst.Load(); over > time.Duration(old) && !worst.CompareAndSwap(old, int64(over)); old = worst.Load() {
			}
		}
		return err
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 14))
			for {
				select {
				case <-stop:
					return
				default:
				}
				switch rng.IntN(3) {
				case 0: // one command on one instance, 1-30ms to live
					c := clients[rng.IntN(len(clients))]
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+rng.IntN(30))*time.Millisecond)
					deadline, _ := ctx.Deadline()
					_ = timed(w, "script on "+c.Options().Addr, deadline, func() error {
						return probe.Run(ctx, c, []string{fmt.Sprintf("probe-%d", w)}).Err()
					})
					cancel()
				case 1: // a ping, 1-10ms to live
					c := clients[rng.IntN(len(clients))]
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+rng.IntN(10))*time.Millisecond)
					deadline, _ := ctx.Deadline()
					_ = timed(w, "ping "+c.Options().Addr, deadline, func() error { return c.Ping(ctx).Err() })
					cancel()
				case 2: // a RedLock cycle, 5-100ms to obtain
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(5+rng.IntN(96))*time.Millisecond)
					deadline, _ := ctx.Deadline()
					key := fmt.Sprintf("k%d", rng.IntN(4))
					var l *lock.Lease
					err := timed(w, "RedLock obtain", deadline, func() (err error) {
						l, err = r.Obtain(ctx, key, time.Second, lock.ObtainOptions{Wait: time.Duration(rng.IntN(50)) * time.Millisecond})
						return err
					})
					cancel()
					if err == nil {
						_ = timed(w, "RedLock release", time.Now().Add(releaseTimeout), func() error {
							return l.Release(context.Background())
						})
					}
				}
			}
		}()
	}

	// A monitor reports the first call that outlives its bound, while it
	// still hangs, with the goroutines' stacks (grouped, with counts).
	monitorStop, monitorDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(monitorDone)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-monitorStop:
				return
			case <-tick.C:
			}
			for w := range inflight {
				if c := inflight[w].Load(); c != nil && time.Since(c.deadline) > slack {
					hung.Do(func() {
						var b strings.Builder
						_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
						hangReport = fmt.Sprintf("%s still running %v after its deadline:\n%s",
							c.what, time.Since(c.deadline).Round(time.Millisecond), b.String())
					})
				}
			}
		}
	}()

	// Faults: kill an instance mid-load and restart it, twice.
	phase := func() { time.Sleep(700 * time.Millisecond) } // load between faults, not a settle
	for _, s := range []*testenv.RedisProcess{servers[0], servers[1]} {
		phase()
		s.Kill()
		phase()
		s.Restart()
	}
	phase()
	close(stop)
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
		close(monitorStop)
	case <-time.After(time.Second + releaseTimeout + slack):
		close(monitorStop)
		<-monitorDone
		stuck := 0
		for w := range inflight {
			if inflight[w].Load() != nil {
				stuck++
			}
		}
		t.Fatalf("%d of %d workers still inside a call well past its deadline\n%s", stuck, workers, hangReport)
	}
	<-monitorDone
	t.Logf("%d calls, %d failed (expected while instances were down), %d overran their deadline by more than %v (worst by %v)",
		calls.Load(), failed.Load(), overran.Load(), slack, time.Duration(worst.Load()))
	if n := overran.Load(); n > 0 {
		t.Fatalf("%d calls returned more than %v after their deadline\n%s", n, slack, hangReport)
	}
	// Every pool serves again.
	for i, c := range clients {
		testkit.Eventually(t, fmt.Sprintf("instance %d's client to answer", i), 10*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			deadline, _ := ctx.Deadline()
			return returnsBy(t, "a ping after the faults", deadline, func() error { return c.Ping(ctx).Err() }) == nil
		})
	}
	l, err := r.Obtain(context.Background(), "after", time.Second, lock.ObtainOptions{Wait: 10 * time.Second})
	if err != nil {
		t.Fatalf("obtain after the faults: %v", err)
	}
	mustRelease(t, l)
}
