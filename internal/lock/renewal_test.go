package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// Renewals (Refresh and the watchdog's) whose replies are late, lost or
// racing a Release, and a Release while a renewal hangs.

// The watchdog's renewal (PEXPIRE 900ms) runs in Redis, then a Refresh to
// 60ms runs and is answered, and only then is the renewal's reply handled.
// The older reply must not lengthen the deadline past the 60ms Redis holds.
func TestRefreshRacingWatchdogNeverOutlivesRedis(t *testing.T) {
	t.Parallel()
	const ttl = 900 * time.Millisecond
	var lease atomic.Pointer[lock.Lease]
	var once sync.Once
	nested := make(chan error, 1)
	rdb := hookedClient(t, &redis.Options{Addr: testRedis(t).Options().Addr}, scriptHook{
		after: func(_ context.Context, script string, cmd redis.Cmder, err error) error {
			if script == "refresh" && scriptTTL(cmd) == "900" && err == nil {
				once.Do(func() {
					// The renewal has run in Redis; its reply waits here
					// while a shorter Refresh goes out and comes back.
					ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
					defer cancel()
					nested <- lease.Load().Refresh(ctx, 60*time.Millisecond)
				})
			}
			return err
		},
	})
	c, prefix := newClient(t, rdb, lock.Options{})
	// The watchdog's first renewal is due 300 ms in. A starved machine may
	// run it after the lease's end, when the watchdog drops the lease and
	// sends no renewal: nothing was raced, and the test takes a new lease
	// (the hook fires once, on the first renewal sent). It used to wait
	// for the renewal for good.
	var l *lock.Lease
	var key string
	for attempt := 1; l == nil; attempt++ {
		key = fmt.Sprint("k", attempt)
		try := mustObtain(t, c, context.Background(), key, ttl, lock.ObtainOptions{})
		lease.Store(try)
		first := try.Deadline()
		select {
		case err := <-nested:
			t.Logf("nested Refresh: %v", describe(err))
			l = try
			testkit.Eventually(t, "the renewal's reply to be handled", 10*time.Second, func() bool {
				return l.Deadline().After(first) || l.Err() != nil
			})
		case <-try.Done():
			select {
			case err := <-nested: // renewed and raced after all
				t.Logf("nested Refresh: %v", describe(err))
				l = try
				continue
			default:
			}
			if attempt == 5 {
				t.Fatalf("5 leases of %v ended before the watchdog renewed them: %v", ttl, try.Err())
			}
		}
	}
	assertTrustNoLonger(t, rdb, lockKey(prefix, key), l)
	if err := l.Release(context.Background()); err != nil && !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("release: %v", err)
	}
}

// A Refresh to 60ms runs in Redis but its reply is lost. The lease must
// assume it ran: trust the lease no longer than the 60ms it may have set,
// and report the loss once that has passed.
func TestRefreshReplyLostShortensDeadline(t *testing.T) {
	t.Parallel()
	var drop atomic.Bool
	rdb := hookedClient(t, &redis.Options{Addr: testRedis(t).Options().Addr}, scriptHook{
		after: func(_ context.Context, script string, cmd redis.Cmder, err error) error {
			if script == "refresh" && scriptTTL(cmd) == "60" && err == nil && drop.CompareAndSwap(true, false) {
				return errReplyLost
			}
			return err
		},
	})
	c, prefix := newClient(t, rdb, lock.Options{})
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		fixed bool
	}{{"fixed", true}, {"watchdog", false}} {
		t.Run(tc.name, func(t *testing.T) {
			key := "k-" + tc.name
			l := mustObtain(t, c, ctx, key, 900*time.Millisecond, lock.ObtainOptions{Fixed: tc.fixed})
			drop.Store(true)
			if err := l.Refresh(ctx, 60*time.Millisecond); err == nil {
				t.Fatal("Refresh reported success although its reply was lost")
			}
			assertTrustNoLonger(t, rdb, lockKey(prefix, key), l)
			if tc.fixed {
				testkit.Eventually(t, "the key to expire in Redis", 10*time.Second, func() bool {
					return rdb.Exists(ctx, lockKey(prefix, key)).Val() == 0
				})
				if l.Err() == nil || l.Context().Err() == nil {
					t.Fatalf("the key has expired in Redis, yet Err = %v and Context().Err() = %v", l.Err(), l.Context().Err())
				}
			}
			if err := l.Release(ctx); err != nil && !errors.Is(err, lock.ErrLockLost) {
				t.Fatalf("release: %v", err)
			}
		})
	}
}

// A Refresh that reaches Redis after a concurrent Release has freed the
// lock must not turn the clean release into ErrLockLost or fire Lost.
func TestRefreshRacingReleaseIsClean(t *testing.T) {
	t.Parallel()
	var armed atomic.Bool
	refreshWaiting := make(chan struct{})
	releasedInRedis := make(chan struct{})
	refreshDone := make(chan struct{})
	rdb := hookedClient(t, &redis.Options{Addr: testRedis(t).Options().Addr}, scriptHook{
		before: func(_ context.Context, script string, _ redis.Cmder) error {
			if script == "refresh" && armed.Load() {
				close(refreshWaiting)
				<-releasedInRedis // the Refresh reaches Redis after the release
			}
			return nil
		},
		after: func(_ context.Context, script string, _ redis.Cmder, err error) error {
			if script == "release" && err == nil && armed.CompareAndSwap(true, false) {
				close(releasedInRedis)
				select { // and its reply is handled before the release's
				case <-refreshDone:
				case <-time.After(10 * time.Second):
				}
			}
			return err
		},
	})
	var lost atomic.Int32
	c, _ := newClient(t, rdb, lock.Options{Hooks: lock.Hooks{Lost: func(string, error) { lost.Add(1) }}})
	ctx := context.Background()
	l := mustObtain(t, c, ctx, "k", 10*time.Second, lock.ObtainOptions{Fixed: true})
	armed.Store(true)
	var refreshErr error
	go func() {
		refreshErr = l.Refresh(ctx, 10*time.Second)
		close(refreshDone)
	}()
	<-refreshWaiting
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	<-refreshDone
	if n := lost.Load(); n != 0 {
		t.Fatalf("Lost hook fired %d times for a clean release", n)
	}
	if !errors.Is(l.Err(), lock.ErrNotHeld) {
		t.Fatalf("Err after release = %v, want ErrNotHeld", l.Err())
	}
	t.Logf("the racing Refresh returned %v", refreshErr)
}

// Release must return within its ReleaseTimeout even while a renewal hangs
// on a paused server and the client does not honour context deadlines (its
// reads wait 30s).
func TestReleaseBoundedWhileRenewalHangs(t *testing.T) {
	t.Parallel()
	s := testenv.StartRedis(t)
	var renewals atomic.Int32
	rdb := hookedClient(t, &redis.Options{Addr: s.Addr, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second}, scriptHook{
		before: func(_ context.Context, script string, _ redis.Cmder) error {
			if script == "refresh" {
				renewals.Add(1)
			}
			return nil
		},
	})
	const releaseTimeout = 200 * time.Millisecond
	c, _ := newClient(t, rdb, lock.Options{ReleaseTimeout: releaseTimeout})
	// A lease of 3 s, renewed every second. A watchdog whose tick comes
	// after the lease's end (a starved machine) drops the lease and sends
	// no renewal: then the test takes another. With 300 ms it waited for
	// a renewal that never came (make stress, local, run 5 of 20).
	var l *lock.Lease
	for attempt := 1; l == nil; attempt++ {
		try := mustObtain(t, c, context.Background(), fmt.Sprint("k", attempt), 3*time.Second, lock.ObtainOptions{})
		s.Pause()
		sent := renewals.Load()
		hung := testkit.Poll(30*time.Second, func() bool {
			return renewals.Load() > sent || try.Err() != nil
		})
		switch {
		case renewals.Load() > sent:
			l = try
			t.Cleanup(s.Resume)
		case !hung:
			s.Resume()
			t.Fatal("no renewal was sent, and the lease did not end, within 30 s")
		case attempt == 5:
			s.Resume()
			t.Fatalf("5 leases ended before their watchdog sent a renewal: %v", try.Err())
		default:
			s.Resume()
		}
	}
	start := time.Now()
	err := returnsBy(t, "Release", start.Add(releaseTimeout), func() error { return l.Release(context.Background()) })
	if err == nil {
		t.Fatal("Release reported success against a paused server")
	}
	if l.Err() == nil {
		t.Fatal("the lease did not end with Release")
	}
}
