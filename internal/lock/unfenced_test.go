package lock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// noFence fails the test if key's fence record exists: a lock made with
// Options.Unfenced never writes one.
func noFence(t *testing.T, rdb redis.UniversalClient, prefix, key, when string) {
	t.Helper()
	if n := rdb.Exists(context.Background(), fenceKey(prefix, key)).Val(); n != 0 {
		t.Fatalf("%s: the unfenced lock wrote a fence record", when)
	}
}

// TestUnfencedObtainRelease: a lock without a fence record grants, refuses
// a second owner while held, renews (Refresh) and releases as the fenced
// one does, and writes no fence record at any step.
func TestUnfencedObtainRelease(t *testing.T) {
	t.Parallel()
	rdb, c, prefix := testClient(t, lock.Options{Unfenced: true})
	ctx := context.Background()
	lease := mustObtain(t, c, ctx, "item", time.Second, lock.ObtainOptions{})
	if lease.Token() <= 0 || lease.Err() != nil || isClosed(lease.Done()) {
		t.Fatalf("fresh lease: token %d err %v", lease.Token(), lease.Err())
	}
	noFence(t, rdb, prefix, "item", "after obtain")
	if _, err := c.Obtain(ctx, "item", time.Second, lock.ObtainOptions{}); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("second obtain: got %v, want ErrNotObtained", err)
	}
	if err := lease.Refresh(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if pttl := rdb.PTTL(ctx, lockKey(prefix, "item")).Val(); pttl <= time.Second {
		t.Fatalf("after Refresh(5s) the lock's PTTL is %v", pttl)
	}
	noFence(t, rdb, prefix, "item", "after a renewal")
	mustRelease(t, lease)
	if isHeld(t, rdb, prefix, "item") || !errors.Is(lease.Err(), lock.ErrNotHeld) || lease.Context().Err() == nil {
		t.Fatalf("after release: held %v, err %v", isHeld(t, rdb, prefix, "item"), lease.Err())
	}
	noFence(t, rdb, prefix, "item", "after release")
	mustRelease(t, mustObtain(t, c, ctx, "item", time.Second, lock.ObtainOptions{}))
}

// TestUnfencedExpiry: an unfenced lease that is not renewed (Fixed)
// expires at its TTL; a waiter then gets the lock, and the expired
// lease's Release reports the loss.
func TestUnfencedExpiry(t *testing.T) {
	t.Parallel()
	rdb, c, prefix := testClient(t, lock.Options{Unfenced: true})
	ctx := context.Background()
	expired := mustObtain(t, c, ctx, "k", 50*time.Millisecond, lock.ObtainOptions{Fixed: true})
	next := mustObtain(t, c, ctx, "k", time.Second, lock.ObtainOptions{Wait: 10 * time.Second})
	if err := expired.Release(ctx); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("release of the expired lease: got %v, want ErrLockLost", err)
	}
	if !isHeld(t, rdb, prefix, "k") {
		t.Fatal("the expired lease's release took the next holder's lock")
	}
	mustRelease(t, next)
	noFence(t, rdb, prefix, "k", "after expiry")
}

// TestUnfencedWatchdogKeepsLock: the watchdog renews an unfenced lease
// past its first TTL while a waiter on another client waits, and the
// waiter gets the lock only after the release.
func TestUnfencedWatchdogKeepsLock(t *testing.T) {
	t.Parallel()
	renewed := make(chan struct{}, 64)
	rdb, c, prefix := testClient(t, lock.Options{Unfenced: true, Hooks: lock.Hooks{
		Renewed: func(string, time.Duration) {
			select {
			case renewed <- struct{}{}:
			default:
			}
		},
	}})
	other, _ := newClient(t, rdb, lock.Options{Prefix: prefix, Unfenced: true})
	ctx := context.Background()
	const ttl = 3 * time.Second
	obtained := time.Now()
	lease := mustObtain(t, c, ctx, "k", ttl, lock.ObtainOptions{})
	var released atomic.Bool
	got := make(chan error, 1)
	go func() {
		l, err := other.Obtain(ctx, "k", ttl, lock.ObtainOptions{Wait: 30 * time.Second})
		if err == nil {
			if !released.Load() {
				err = errors.New("the waiter obtained the lock before the holder released it")
			}
			err = errors.Join(err, l.Release(ctx))
		}
		got <- err
	}()
	past := time.After(time.Until(obtained.Add(ttl)))
	for renewals := 0; past != nil || renewals < 2; {
		select {
		case <-past:
			past = nil
		case <-renewed:
			renewals++
		case <-lease.Done():
			t.Fatalf("lease lost while held (after %d renewals): %v", renewals, lease.Err())
		}
	}
	noFence(t, rdb, prefix, "k", "after renewals")
	released.Store(true)
	mustRelease(t, lease)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// TestUnfencedWatchdogReportsLoss: when an unfenced lock is deleted under
// its holder, the lease ends by its validity deadline with ErrLockLost,
// its context is cancelled with that cause, and the Lost hook runs once.
func TestUnfencedWatchdogReportsLoss(t *testing.T) {
	t.Parallel()
	s := testenv.StartRedis(t)
	rdb := redlockClient(t, s.Addr)
	var lost atomic.Int32
	c, prefix := newClient(t, rdb, lock.Options{Unfenced: true, Hooks: lock.Hooks{Lost: func(string, error) { lost.Add(1) }}})
	ctx := context.Background()
	lease := mustObtain(t, c, ctx, "k", 600*time.Millisecond, lock.ObtainOptions{})
	deadline := lease.Deadline()
	rdb.Del(ctx, lockKey(prefix, "k"))
	deadline = later(deadline, lease.Deadline())
	<-returnsBy(t, "the loss", deadline, lease.Done)
	if !errors.Is(lease.Err(), lock.ErrLockLost) || !errors.Is(context.Cause(lease.Context()), lock.ErrLockLost) {
		t.Fatalf("Err %v, context cause %v; want ErrLockLost", lease.Err(), context.Cause(lease.Context()))
	}
	if lost.Load() != 1 {
		t.Fatalf("Lost hook called %d times, want 1", lost.Load())
	}
	if err := lease.Release(ctx); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("release of a lost lease: got %v, want ErrLockLost", err)
	}
}

// TestUnfencedReentrant: a reentrant Owner re-enters an unfenced lock,
// each hold needs its own release, and other owners are refused meanwhile.
func TestUnfencedReentrant(t *testing.T) {
	t.Parallel()
	rdb, c, prefix := testClient(t, lock.Options{Unfenced: true})
	ctx := context.Background()
	owner := lock.ObtainOptions{Owner: "job-7"}
	first := mustObtain(t, c, ctx, "k", 10*time.Second, owner)
	second := mustObtain(t, c, ctx, "k", 10*time.Second, owner)
	if second.Token() != first.Token() {
		t.Fatalf("re-entered hold has token %d, want %d", second.Token(), first.Token())
	}
	if _, err := c.Obtain(ctx, "k", time.Second, lock.ObtainOptions{Owner: "job-8"}); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("another owner while held: got %v, want ErrNotObtained", err)
	}
	mustRelease(t, second)
	if !isHeld(t, rdb, prefix, "k") {
		t.Fatal("released after one of two holds")
	}
	mustRelease(t, first)
	if isHeld(t, rdb, prefix, "k") {
		t.Fatal("held after both holds were released")
	}
	noFence(t, rdb, prefix, "k", "after re-entries")
}

// TestUnfencedCrowd: 200 goroutines released at once on two clients of an
// unfenced lock each get it once, never two at a time.
func TestUnfencedCrowd(t *testing.T) {
	t.Parallel()
	rdb := testRedis(t)
	prefix := testPrefix(t, rdb)
	a, _ := newClient(t, rdb, lock.Options{Prefix: prefix, Unfenced: true})
	b, _ := newClient(t, rdb, lock.Options{Prefix: prefix, Unfenced: true})
	got, overlaps, failures := crowd(t, 200, "hot", 5*time.Second, time.Minute, a, b)
	if got != 200 || overlaps != 0 || len(failures) != 0 {
		t.Fatalf("%d of 200 got the lock, %d overlaps, failures %v", got, overlaps, failures)
	}
	noFence(t, rdb, prefix, "hot", "after the crowd")
}
