package lock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// newClient returns a lock.Client on rdb with a prefix of the test's own,
// closed when the test ends.
func newClient(t testing.TB, rdb redis.UniversalClient, opts lock.Options) (*lock.Client, string) {
	t.Helper()
	if opts.Prefix == "" {
		opts.Prefix = testPrefix(t, rdb)
	}
	c := mustNew(t, rdb, opts)
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close lock client: %v", err)
		}
	})
	return c, opts.Prefix
}

// testClient returns the test Redis and a lock.Client on it with opts,
// and the client's key prefix (see newClient).
func testClient(t testing.TB, opts lock.Options) (*redis.Client, *lock.Client, string) {
	t.Helper()
	rdb := testRedis(t)
	c, prefix := newClient(t, rdb, opts)
	return rdb, c, prefix
}

// mustNew is lock.New for a test, which fails if New refuses.
func mustNew(t testing.TB, rdb redis.UniversalClient, opts lock.Options) *lock.Client {
	t.Helper()
	c, err := lock.New(rdb, opts)
	if err != nil {
		t.Fatalf("lock.New: %v", err)
	}
	return c
}

// mustRedLock is lock.NewRedLock for a test, which fails if it refuses.
func mustRedLock(t testing.TB, clients []redis.UniversalClient, opts lock.RedLockOptions) *lock.RedLock {
	t.Helper()
	r, err := lock.NewRedLock(clients, opts)
	if err != nil {
		t.Fatalf("lock.NewRedLock: %v", err)
	}
	return r
}

func mustObtain(t testing.TB, l lock.Locker, ctx context.Context, key string, ttl time.Duration, o lock.ObtainOptions) *lock.Lease {
	t.Helper()
	lease, err := l.Obtain(ctx, key, ttl, o)
	if err != nil {
		t.Fatalf("obtain %q: %v", key, err)
	}
	return lease
}

func mustRelease(t testing.TB, lease *lock.Lease) {
	t.Helper()
	if err := lease.Release(context.Background()); err != nil {
		t.Fatalf("release %q: %v", lease.Key(), err)
	}
}

// releaseSparesHolder releases stale, a lease whose lock now belongs to
// holder, expects want from it, and checks that holder still holds the lock
// before releasing it: what names the stale release in failures.
func releaseSparesHolder(t testing.TB, ctx context.Context, what string, stale, holder *lock.Lease, want error) {
	t.Helper()
	if err := stale.Release(ctx); !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want %v", what, err, want)
	}
	if err := holder.Refresh(ctx, time.Second); err != nil {
		t.Fatalf("the holder lost its lock after the %s: %v", what, err)
	}
	mustRelease(t, holder)
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestObtainRelease(t *testing.T) {
	t.Parallel()
	rdb, c, prefix := testClient(t, lock.Options{})
	ctx := context.Background()

	lease := mustObtain(t, c, ctx, "item", time.Second, lock.ObtainOptions{})
	if lease.Token() <= 0 || lease.Key() != "item" || lease.Err() != nil || isClosed(lease.Done()) {
		t.Fatalf("fresh lease: token %d key %q err %v", lease.Token(), lease.Key(), lease.Err())
	}
	if pttl := rdb.PTTL(ctx, lockKey(prefix, "item")).Val(); pttl <= 0 || pttl > time.Second {
		t.Fatalf("lock key PTTL = %v, want (0, 1s]", pttl)
	}

	_, err := c.Obtain(ctx, "item", time.Second, lock.ObtainOptions{})
	if !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("second obtain: got %v, want ErrNotObtained", err)
	}

	mustRelease(t, lease)
	if isHeld(t, rdb, prefix, "item") {
		t.Fatalf("lock still held after release")
	}
	if pttl := rdb.PTTL(ctx, fenceKey(prefix, "item")).Val(); pttl <= time.Second {
		t.Fatalf("the fence record has PTTL %v, want the fencing TTL", pttl)
	}
	if !isClosed(lease.Done()) || !errors.Is(lease.Err(), lock.ErrNotHeld) {
		t.Fatalf("after release: done %v err %v", isClosed(lease.Done()), lease.Err())
	}
	if lease.Context().Err() == nil {
		t.Fatalf("lease context not cancelled after release")
	}
	again := mustObtain(t, c, ctx, "item", time.Second, lock.ObtainOptions{})
	if again.Token() <= lease.Token() {
		t.Fatalf("token did not increase: %d then %d", lease.Token(), again.Token())
	}
	mustRelease(t, again)
}

func TestBadArguments(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t, testRedis(t), lock.Options{})
	for _, tc := range []struct {
		name string
		key  string
		ttl  time.Duration
	}{
		{"empty key", "", time.Second},
		{"ttl below MinTTL", "k", lock.MinTTL - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := c.Obtain(context.Background(), tc.key, tc.ttl, lock.ObtainOptions{}); err == nil {
				t.Fatalf("Obtain(%q, %v) succeeded", tc.key, tc.ttl)
			}
		})
	}
}

func TestDoubleRelease(t *testing.T) {
	t.Parallel()
	_, c, _ := testClient(t, lock.Options{})
	ctx := context.Background()

	a := mustObtain(t, c, ctx, "k", time.Second, lock.ObtainOptions{})
	mustRelease(t, a)
	b := mustObtain(t, c, ctx, "k", time.Second, lock.ObtainOptions{})
	releaseSparesHolder(t, ctx, "second release", a, b, lock.ErrNotHeld)
}

func TestReleaseAfterExpiry(t *testing.T) {
	t.Parallel()
	_, c, _ := testClient(t, lock.Options{})
	ctx := context.Background()
	const ttl = 50 * time.Millisecond

	t.Run("expired", func(t *testing.T) {
		a := mustObtain(t, c, ctx, "expired", ttl, lock.ObtainOptions{Fixed: true})
		<-a.Done() // the fixed lease ends at its validity deadline
		if !errors.Is(a.Err(), lock.ErrLockLost) {
			t.Fatalf("Err after expiry = %v, want ErrLockLost", a.Err())
		}
		err := a.Release(ctx)
		if !errors.Is(err, lock.ErrLockLost) || errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("release after expiry: got %v, want ErrLockLost only", err)
		}
	})
	t.Run("taken", func(t *testing.T) {
		a := mustObtain(t, c, ctx, "taken", ttl, lock.ObtainOptions{Fixed: true})
		b := mustObtain(t, c, ctx, "taken", time.Second, lock.ObtainOptions{Wait: 5 * time.Second})
		releaseSparesHolder(t, ctx, "release of a taken lock", a, b, lock.ErrLockLost)
	})
}

func TestReleaseWithCancelledContext(t *testing.T) {
	t.Parallel()
	rdb, c, prefix := testClient(t, lock.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	lease := mustObtain(t, c, ctx, "k", time.Second, lock.ObtainOptions{})
	cancel()
	if err := lease.Release(ctx); err != nil {
		t.Fatalf("release with cancelled context: %v", err)
	}
	if isHeld(t, rdb, prefix, "k") {
		t.Fatalf("lock still held after release")
	}
}

func TestRefresh(t *testing.T) {
	t.Parallel()
	rdb, c, prefix := testClient(t, lock.Options{})
	ctx := context.Background()

	// 10 s, then a minute: a lease that had to live only until the
	// refresh (200 ms once) could run out first on a starved machine.
	lease := mustObtain(t, c, ctx, "k", 10*time.Second, lock.ObtainOptions{Fixed: true})
	before := lease.Deadline()
	if err := lease.Refresh(ctx, time.Minute); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if pttl := rdb.PTTL(ctx, lockKey(prefix, "k")).Val(); pttl <= 10*time.Second {
		t.Fatalf("PTTL after refresh = %v, want > 10s", pttl)
	}
	if !lease.Deadline().After(before) {
		t.Fatalf("deadline did not move: %v then %v", before, lease.Deadline())
	}
	rdb.Del(ctx, lockKey(prefix, "k"))
	if err := lease.Refresh(ctx, time.Second); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("refresh of a deleted lock: got %v, want ErrLockLost", err)
	}
	if !isClosed(lease.Done()) || !errors.Is(context.Cause(lease.Context()), lock.ErrLockLost) {
		t.Fatalf("lost lease: done %v cause %v", isClosed(lease.Done()), context.Cause(lease.Context()))
	}
	if err := lease.Release(ctx); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("release of a lost lease: got %v, want ErrLockLost", err)
	}
	if err := lease.Refresh(ctx, time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("refresh after release: got %v, want ErrNotHeld", err)
	}
}

// A critical section that outlasts the TTL keeps the lock while the
// watchdog renews it: a contender gets it only after the release. The
// section ends once the lease is past its first TTL and has been renewed
// twice. The TTL is six seconds: a renewal is sent every TTL/3 and given
// TTL/3 to answer, and with a shorter one a starved machine can delay a
// renewal past the lease, which the lease then rightly reports as lost
// (with two seconds, make stress on the embedded Redis beside two other
// suites saw it once in 20 runs).
func TestWatchdogKeepsLock(t *testing.T) {
	t.Parallel()
	renewed := make(chan struct{}, 64)
	rdb, c, _ := testClient(t, lock.Options{Hooks: lock.Hooks{
		Renewed: func(string, time.Duration) {
			select {
			case renewed <- struct{}{}:
			default:
			}
		},
	}})
	other, _ := newClient(t, rdb, lock.Options{Prefix: prefixOf(t, c, rdb)})
	ctx := context.Background()
	const ttl = 6 * time.Second

	obtained := time.Now()
	lease := mustObtain(t, c, ctx, "k", ttl, lock.ObtainOptions{})
	var released atomic.Bool
	got := make(chan error, 1)
	go func() {
		l, err := other.Obtain(ctx, "k", ttl, lock.ObtainOptions{Wait: 30 * time.Second})
		if err == nil {
			if !released.Load() {
				err = errors.New("contender obtained the lock before the holder released it")
			} else if l.Token() <= lease.Token() {
				err = errors.New("contender's token is not larger")
			}
			if rerr := l.Release(ctx); err == nil {
				err = rerr
			}
		}
		got <- err
	}()

	// The critical section: past the first TTL, and renewed twice.
	past := time.After(time.Until(obtained.Add(ttl)))
	for renewals := 0; past != nil || renewals < 2; {
		select {
		case <-past:
			past = nil
		case <-renewed:
			renewals++
		case <-lease.Done():
			t.Fatalf("lease lost during the critical section (after %d renewals): %v", renewals, lease.Err())
		}
	}
	released.Store(true)
	mustRelease(t, lease)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// prefixOf is a test-only way to share one client's prefix with another: it
// obtains a probe key and finds its name in Redis.
func prefixOf(t *testing.T, c *lock.Client, rdb *redis.Client) string {
	t.Helper()
	key := "probe-" + randHex(4)
	// A minute: the probe is never renewed, so a starved renewal cannot
	// lose it before its release (seen beside CPU hogs with one second).
	l := mustObtain(t, c, context.Background(), key, time.Minute, lock.ObtainOptions{})
	defer mustRelease(t, l)
	keys := rdb.Keys(context.Background(), "*{"+key+"}").Val()
	if len(keys) != 1 {
		t.Fatalf("probe key not found: %v", keys)
	}
	return keys[0][:len(keys[0])-len(key)-2]
}

// When the lock disappears from under the holder, Done closes and Err says
// why, for the fenced lock and the one without a fence record alike. (No check made after the validity deadline can see the lease healthy,
// since Err and Done look at the clock; see TestPausedHolderSeesLossOnResume.)
func TestWatchdogReportsLoss(t *testing.T) {
	t.Parallel()
	const ttl = 600 * time.Millisecond
	for _, tc := range []struct {
		name   string
		break_ func(ctx context.Context, rdb *redis.Client, key string, s *testenv.RedisProcess)
	}{
		{"deleted", func(ctx context.Context, rdb *redis.Client, key string, _ *testenv.RedisProcess) {
			rdb.Del(ctx, key)
		}},
		{"taken by another owner", func(ctx context.Context, rdb *redis.Client, key string, _ *testenv.RedisProcess) {
			rdb.Set(ctx, key, "someone-else|1|1", time.Minute)
		}},
		{"overwritten with a string", func(ctx context.Context, rdb *redis.Client, key string, _ *testenv.RedisProcess) {
			rdb.Set(ctx, key, "garbage", time.Minute)
		}},
		{"redis killed", func(_ context.Context, _ *redis.Client, _ string, s *testenv.RedisProcess) {
			s.Kill()
		}},
	} {
		for _, unfenced := range []bool{false, true} {
			name := tc.name
			if unfenced {
				name = "unfenced/" + name // Options.Unfenced: the same loss signal
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				s := testenv.StartRedis(t)
				rdb := redlockClient(t, s.Addr)
				var lost atomic.Int32
				c, prefix := newClient(t, rdb, lock.Options{Unfenced: unfenced, Hooks: lock.Hooks{
					Lost: func(string, error) { lost.Add(1) },
				}})
				ctx := context.Background()
				lease := mustObtain(t, c, ctx, "k", ttl, lock.ObtainOptions{})
				deadline := lease.Deadline()
				tc.break_(ctx, rdb, lockKey(prefix, "k"), s)
				deadline = later(deadline, lease.Deadline()) // a renewal may have run just before
				<-returnsBy(t, "the loss", deadline, lease.Done)
				if !errors.Is(lease.Err(), lock.ErrLockLost) {
					t.Fatalf("Err = %v, want ErrLockLost", lease.Err())
				}
				if !errors.Is(context.Cause(lease.Context()), lock.ErrLockLost) {
					t.Fatalf("lease context cause = %v", context.Cause(lease.Context()))
				}
				if lost.Load() != 1 {
					t.Fatalf("Lost hook called %d times, want 1", lost.Load())
				}
				if err := lease.Release(ctx); !errors.Is(err, lock.ErrLockLost) {
					t.Fatalf("release of a lost lease: got %v, want ErrLockLost", err)
				}
			})
		}
	}
}

// A renewal that hangs (a paused server, and a client that does not honour
// context deadlines, so the call would wait out its one-minute read
// timeout) cannot keep the lease alive: the lease gives up on the call and
// reports the loss.
func TestWatchdogRenewalHangs(t *testing.T) {
	t.Parallel()
	s := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, ReadTimeout: time.Minute, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	var lost atomic.Int32
	c, _ := newClient(t, rdb, lock.Options{Hooks: lock.Hooks{
		Lost: func(string, error) { lost.Add(1) },
	}})
	ctx := context.Background()
	lease := mustObtain(t, c, ctx, "k", 300*time.Millisecond, lock.ObtainOptions{})
	s.Pause()
	t.Cleanup(s.Resume) // before the server is killed, so cleanup can reach it
	deadline := lease.Deadline()
	<-returnsBy(t, "the loss", deadline, lease.Done)
	if !errors.Is(lease.Err(), lock.ErrLockLost) {
		t.Fatalf("Err = %v, want ErrLockLost", lease.Err())
	}
	s.Resume()
	if err := lease.Release(ctx); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("release of a lost lease: got %v, want ErrLockLost", err)
	}
	if n := lost.Load(); n != 1 {
		t.Fatalf("Lost hook called %d times, want 1", n)
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// When the holder's context ends, the watchdog stops: the lease context is
// cancelled at once and the lease is reported lost at its deadline, after
// which another owner can take the key.
func TestHolderContextEndStopsWatchdog(t *testing.T) {
	t.Parallel()
	_, c, _ := testClient(t, lock.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	lease := mustObtain(t, c, ctx, "k", 200*time.Millisecond, lock.ObtainOptions{})
	cancel()
	<-lease.Context().Done()
	<-lease.Done()
	if !errors.Is(lease.Err(), lock.ErrLockLost) {
		t.Fatalf("Err = %v, want ErrLockLost", lease.Err())
	}
	next := mustObtain(t, c, context.Background(), "k", time.Second, lock.ObtainOptions{Wait: 5 * time.Second})
	mustRelease(t, next)
	if err := lease.Release(context.Background()); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("release after expiry: got %v, want ErrLockLost", err)
	}
}

func TestWaitHandoff(t *testing.T) {
	t.Parallel()
	var wakeups atomic.Int32
	rdb, c, prefix := testClient(t, lock.Options{Hooks: lock.Hooks{
		Waited: func(_ string, _ time.Duration, n int) { wakeups.Add(int32(n)) },
	}})
	ctx := context.Background()
	// A long TTL: only the release message can hand the lock over quickly.
	a := mustObtain(t, c, ctx, "k", time.Minute, lock.ObtainOptions{})
	got := subscribedWaiter(t, ctx, c, rdb, prefix, "k")
	mustRelease(t, a)
	b := <-got
	if b == nil {
		t.FailNow()
	}
	if b.Token() <= a.Token() {
		t.Fatalf("token did not increase: %d then %d", a.Token(), b.Token())
	}
	mustRelease(t, b)
	// The waiter may have caught the release on its own re-check; either way
	// it cannot have used the fallback, which comes after the 1 min TTL.
	t.Logf("wake-ups: %d", wakeups.Load())
}

// A release publishes a wake-up only when someone waited for the lock;
// then the releases that follow publish too for a few seconds (the waiting
// record's TTL), since other waiters may still be queued behind the one
// that got it. TestReleaseStopsPublishingOnceNobodyWaits checks the end.
func TestReleasePublishesOnlyWhenWaitedFor(t *testing.T) {
	t.Parallel()
	rdb, c, prefix := testClient(t, lock.Options{})
	ctx := context.Background()
	channel := lockKey(prefix, "k") + ":wake"
	ps := rdb.Subscribe(ctx, channel)
	t.Cleanup(func() { _ = ps.Close() })
	if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatalf("subscribe: %v", err)
	}
	// published returns what was published on the channel since the last
	// call: it publishes a sentinel and collects the messages before it,
	// which Redis delivers in the order it ran the commands.
	published := func() []string {
		t.Helper()
		if err := rdb.Publish(ctx, channel, "sentinel").Err(); err != nil {
			t.Fatalf("publish: %v", err)
		}
		var got []string
		for {
			m, err := ps.ReceiveMessage(ctx)
			if err != nil {
				t.Fatalf("receive: %v", err)
			}
			if m.Payload == "sentinel" {
				return got
			}
			got = append(got, m.Payload)
		}
	}

	for i := range 3 {
		mustRelease(t, mustObtain(t, c, ctx, "k", time.Second, lock.ObtainOptions{}))
		if got := published(); len(got) != 0 {
			t.Fatalf("cycle %d, nobody waiting: release published %q", i, got)
		}
	}
	// A try without Wait does not count as waiting.
	a := mustObtain(t, c, ctx, "k", time.Second, lock.ObtainOptions{})
	if _, err := c.Obtain(ctx, "k", time.Second, lock.ObtainOptions{}); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("try on a held lock: got %v, want ErrNotObtained", err)
	}
	mustRelease(t, a)
	if got := published(); len(got) != 0 {
		t.Fatalf("after a try without Wait: release published %q", got)
	}
	// A waiter that gave up still leaves its record until it expires.
	a = mustObtain(t, c, ctx, "k", time.Second, lock.ObtainOptions{})
	if _, err := c.Obtain(ctx, "k", time.Second, lock.ObtainOptions{Wait: time.Millisecond}); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("wait on a held lock: got %v, want ErrNotObtained", err)
	}
	mustRelease(t, a)
	if got := published(); len(got) != 1 {
		t.Fatalf("after a wait: release published %q, want one wake-up", got)
	}
	for i := range 2 {
		mustRelease(t, mustObtain(t, c, ctx, "k", time.Second, lock.ObtainOptions{}))
		if got := published(); len(got) != 1 {
			t.Fatalf("holder %d after the wait: release published %q, want one wake-up", i, got)
		}
	}
	if pttl := rdb.PTTL(ctx, fenceKey(prefix, "k")).Val(); pttl <= 0 {
		t.Fatalf("the fence record has PTTL %v, want a TTL", pttl)
	}
}

// Waiters of one Client on one key line up: only the first asks Redis, and
// a release wakes it. When it releases in turn, its release must wake the
// second, which began to try only once the first had the lock.
func TestWaitQueueOnOneClient(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: testRedis(t).Options().Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	// tries counts obtain attempts that found the lock held (the obtain
	// script's reply is negative).
	var tries atomic.Int32
	rdb.AddHook(replyHook(func(cmd redis.Cmder, _ error) {
		if c, ok := cmd.(*redis.Cmd); ok && cmd.Name() == "evalsha" {
			if v, err := c.Int64(); err == nil && v < 0 {
				tries.Add(1)
			}
		}
	}))
	var mu sync.Mutex
	var wakeups []int
	c, _ := newClient(t, rdb, lock.Options{Hooks: lock.Hooks{
		Waited: func(_ string, _ time.Duration, n int) {
			mu.Lock()
			defer mu.Unlock()
			wakeups = append(wakeups, n)
		},
	}})
	ctx := context.Background()
	// Long TTLs: a waiter left without a wake-up would sleep until its Wait
	// runs out and fail, since no fallback re-check comes in time.
	h := mustObtain(t, c, ctx, "k", time.Minute, lock.ObtainOptions{})
	got := make(chan *lock.Lease, 2)
	waiter := func() {
		l, err := c.Obtain(ctx, "k", time.Minute, lock.ObtainOptions{Wait: 10 * time.Second})
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- l
	}
	go waiter()
	// The first tries once, subscribes, and tries again once Redis has
	// confirmed the subscription; two failed tries mean it is asleep.
	testkit.Eventually(t, "the first waiter to sleep", 5*time.Second, func() bool { return tries.Load() >= 2 })
	go waiter()
	testkit.Eventually(t, "the second waiter to line up", 5*time.Second, func() bool { return c.InLine("k") == 2 })
	if n := tries.Load(); n != 2 {
		t.Fatalf("%d failed tries; the second waiter asked Redis while not first in line", n)
	}
	mustRelease(t, h)
	first := <-got
	if first == nil {
		t.FailNow()
	}
	// Now first in line, the second tries, subscribes and tries again.
	testkit.Eventually(t, "the second waiter to sleep", 5*time.Second, func() bool { return tries.Load() >= 4 })
	mustRelease(t, first)
	second := <-got
	if second == nil {
		t.FailNow()
	}
	if !(h.Token() < first.Token() && first.Token() < second.Token()) {
		t.Fatalf("tokens not increasing: %d, %d, %d", h.Token(), first.Token(), second.Token())
	}
	mustRelease(t, second)
	mu.Lock()
	defer mu.Unlock()
	if len(wakeups) != 2 || wakeups[0] < 1 || wakeups[1] < 1 {
		t.Fatalf("wake-ups per waiter = %v, want two waits woken by a release each", wakeups)
	}
}

// subscribedWaiter starts a waiter that obtains key on c with a 1s TTL,
// waiting up to 30s, and returns once the waiter has subscribed to the
// lock's wake-up channel on rdb. The waiter sends the lease it got, nil
// if none, on the channel returned.
func subscribedWaiter(t *testing.T, ctx context.Context, c *lock.Client, rdb *redis.Client, prefix, key string) <-chan *lock.Lease {
	t.Helper()
	got := make(chan *lock.Lease, 1)
	go func() {
		l, err := c.Obtain(ctx, key, time.Second, lock.ObtainOptions{Wait: 30 * time.Second})
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- l
	}()
	testkit.Eventually(t, "the waiter to subscribe", 5*time.Second, func() bool {
		return numSub(rdb, lockKey(prefix, key)+":wake") == 1
	})
	return got
}

// numSub counts subscribers of channels matching pattern.
func numSub(rdb *redis.Client, pattern string) int64 {
	ctx := context.Background()
	var n int64
	for _, ch := range rdb.PubSubChannels(ctx, pattern).Val() {
		n += rdb.PubSubNumSub(ctx, ch).Val()[ch]
	}
	return n
}

// A holder that dies without releasing publishes nothing; the waiter's
// fallback re-check at the remaining TTL still gets the lock.
func TestWaitFallbackWhenHolderVanishes(t *testing.T) {
	t.Parallel()
	_, c, _ := testClient(t, lock.Options{})
	ctx := context.Background()
	a := mustObtain(t, c, ctx, "k", 300*time.Millisecond, lock.ObtainOptions{Fixed: true})
	b := mustObtain(t, c, ctx, "k", time.Second, lock.ObtainOptions{Wait: 10 * time.Second})
	if b.Token() <= a.Token() {
		t.Fatalf("token did not increase: %d then %d", a.Token(), b.Token())
	}
	mustRelease(t, b)
	if err := a.Release(ctx); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("release of the vanished holder: got %v, want ErrLockLost", err)
	}
}

// Killing the shared subscriber connection loses release messages; the
// handoff must still happen.
func TestWaitSubscriberKilled(t *testing.T) {
	t.Parallel()
	s := testenv.StartRedis(t)
	rdb := redlockClient(t, s.Addr)
	c, prefix := newClient(t, rdb, lock.Options{})
	ctx := context.Background()
	a := mustObtain(t, c, ctx, "k", 2*time.Second, lock.ObtainOptions{})
	got := subscribedWaiter(t, ctx, c, rdb, prefix, "k")
	if err := rdb.ClientKillByFilter(ctx, "TYPE", "pubsub").Err(); err != nil {
		t.Fatalf("client kill: %v", err)
	}
	mustRelease(t, a)
	b := <-got
	if b == nil {
		t.FailNow()
	}
	mustRelease(t, b)
}

func TestWaitContextEnds(t *testing.T) {
	t.Parallel()
	rdb, c, prefix := testClient(t, lock.Options{})
	channel := lockKey(prefix, "k") + ":wake"
	holder := mustObtain(t, c, context.Background(), "k", time.Minute, lock.ObtainOptions{})
	defer mustRelease(t, holder)

	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error)
		go func() {
			_, err := c.Obtain(ctx, "k", time.Second, lock.ObtainOptions{Wait: time.Minute})
			errc <- err
		}()
		testkit.Eventually(t, "the waiter to subscribe", 5*time.Second, func() bool {
			return numSub(rdb, channel) == 1
		})
		cancel()
		err := <-errc
		if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want ErrNotObtained and context.Canceled", err)
		}
		testkit.Eventually(t, "the subscription to go away", 5*time.Second, func() bool {
			return numSub(rdb, channel) == 0
		})
	})
	t.Run("deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := c.Obtain(ctx, "k", time.Second, lock.ObtainOptions{Wait: time.Minute})
		if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want ErrNotObtained and context.DeadlineExceeded", err)
		}
	})
	t.Run("wait runs out", func(t *testing.T) {
		_, err := c.Obtain(context.Background(), "k", time.Second, lock.ObtainOptions{Wait: 50 * time.Millisecond})
		if !errors.Is(err, lock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want ErrNotObtained only", err)
		}
	})
}

func TestReentrant(t *testing.T) {
	t.Parallel()
	rdb, c, prefix := testClient(t, lock.Options{})
	ctx := context.Background()
	owner := lock.ObtainOptions{Owner: "order-42"}

	// Leases of 10 s: their length is not what is tested, and one of a
	// second was lost (renewing failed) between its grant and its release
	// under -race beside a loaded machine's other tests.
	const ttl = 10 * time.Second
	var holds []*lock.Lease
	for range 3 {
		holds = append(holds, mustObtain(t, c, ctx, "k", ttl, owner))
	}
	for _, h := range holds[1:] {
		if h.Token() != holds[0].Token() {
			t.Fatalf("re-entered hold has token %d, want %d", h.Token(), holds[0].Token())
		}
	}
	for _, o := range []lock.ObtainOptions{{}, {Owner: "order-43"}} {
		if _, err := c.Obtain(ctx, "k", ttl, o); !errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("obtain by %q while held: got %v, want ErrNotObtained", o.Owner, err)
		}
	}
	for i := len(holds) - 1; i >= 0; i-- {
		if !isHeld(t, rdb, prefix, "k") {
			t.Fatalf("lock released after %d of 3 releases", len(holds)-1-i)
		}
		mustRelease(t, holds[i])
	}
	if isHeld(t, rdb, prefix, "k") {
		t.Fatalf("lock held after 3 releases of 3 holds")
	}
	if err := holds[0].Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("fourth release: got %v, want ErrNotHeld", err)
	}

	// A plain lease is never re-entered, even by a reentrant owner.
	plain := mustObtain(t, c, ctx, "p", ttl, lock.ObtainOptions{})
	if _, err := c.Obtain(ctx, "p", ttl, owner); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("reentrant obtain of a plain lock: got %v, want ErrNotObtained", err)
	}
	mustRelease(t, plain)
}

func TestFencingTokens(t *testing.T) {
	t.Parallel()
	rdb, c, prefix := testClient(t, lock.Options{})
	ctx := context.Background()
	var last int64
	next := func(how string, o lock.ObtainOptions, ttl time.Duration) *lock.Lease {
		t.Helper()
		l := mustObtain(t, c, ctx, "k", ttl, o)
		if l.Token() <= last {
			t.Fatalf("%s: token %d not above %d", how, l.Token(), last)
		}
		last = l.Token()
		return l
	}
	for range 100 {
		mustRelease(t, next("after release", lock.ObtainOptions{}, time.Second))
	}
	if pttl := rdb.PTTL(ctx, fenceKey(prefix, "k")).Val(); pttl <= 0 {
		t.Fatalf("the fence record's PTTL = %v, want a TTL", pttl)
	}
	for range 20 {
		rdb.Del(ctx, fenceKey(prefix, "k")) // the record of the last token
		mustRelease(t, next("after the fence record was deleted", lock.ObtainOptions{}, time.Second))
	}
	expired := next("before expiry", lock.ObtainOptions{Fixed: true}, 20*time.Millisecond)
	mustRelease(t, next("after expiry", lock.ObtainOptions{Wait: 5 * time.Second}, time.Second))
	if err := expired.Release(ctx); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("release of expired lease: got %v", err)
	}
}

// Many cycles leave no key without a TTL and no goroutine behind.
// Not parallel: goleak must not see other tests' goroutines.
func TestCyclesLeaveNothingBehind(t *testing.T) {
	rdb := testRedis(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(), ignoreEmbeddedRedis, ignoreEmbeddedReader)
	prefix := testPrefix(t, rdb)
	c := mustNew(t, rdb, lock.Options{Prefix: prefix})
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 250 {
				key := []string{"a", "b", "c"}[(g+i)%3]
				l, err := c.Obtain(ctx, key, time.Second, lock.ObtainOptions{Wait: 10 * time.Second, Fixed: i%5 == 0})
				if err != nil {
					t.Errorf("obtain: %v", err)
					return
				}
				if err := l.Release(ctx); err != nil {
					t.Errorf("release: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	keys, err := scanKeys(ctx, rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if pttl := rdb.PTTL(ctx, k).Val(); pttl <= 0 {
			t.Errorf("key %q has no TTL (PTTL %v)", k, pttl)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestHooks(t *testing.T) {
	t.Parallel()
	rdb := testRedis(t)
	var mu sync.Mutex
	seen := map[string]int{}
	note := func(name string) { mu.Lock(); seen[name]++; mu.Unlock() }
	c, _ := newClient(t, rdb, lock.Options{Hooks: lock.Hooks{
		Obtained: func(_ string, _ time.Duration, err error) {
			if err == nil {
				note("obtained")
			} else {
				note("not obtained")
			}
		},
		Waited:      func(string, time.Duration, int) { note("waited") },
		Renewed:     func(string, time.Duration) { note("renewed") },
		RenewFailed: func(string, error) { note("renew failed") },
		Lost:        func(string, error) { note("lost") },
	}})
	ctx := context.Background()
	// A lease long enough that a busy machine renews it before it runs
	// out (the watchdog renews every TTL/3): with 300 ms, a renewal late
	// by a scheduling stall lost the lease before any "renewed".
	a := mustObtain(t, c, ctx, "k", 3*time.Second, lock.ObtainOptions{})
	if _, err := c.Obtain(ctx, "k", time.Second, lock.ObtainOptions{Wait: 10 * time.Millisecond}); err == nil {
		t.Fatal("obtained a held lock")
	}
	testkit.Eventually(t, "a renewal", 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return seen["renewed"] > 0 })
	rdb.Del(ctx, lockKey(prefixOf(t, c, rdb), "k"))
	<-a.Done()
	if err := a.Release(ctx); !errors.Is(err, lock.ErrLockLost) {
		t.Errorf("release: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]int{"obtained": 1, "not obtained": 1, "waited": 1, "renew failed": 1, "lost": 1}
	for k, n := range want {
		if seen[k] < n {
			t.Errorf("hook %q called %d times, want >= %d (all: %v)", k, seen[k], n, seen)
		}
	}
}
