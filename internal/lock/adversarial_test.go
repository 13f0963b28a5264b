package lock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// The attacks of issue 14, one test each: delayed and lost replies, paused
// processes, dead and paused instances, cancelled contexts.

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

const pauseChildEnv = "SECKILL_LOCK_PAUSE_CHILD"

// A holder stopped with SIGSTOP past its lease (while another client takes
// the lock) must not see its lease as healthy for a single check after it
// resumes. The holder is a child process with GOMAXPROCS=1 that spins on
// Err and Context().Err(), so after SIGCONT it keeps checking before the
// lease's timer gets a chance to run.
func TestPausedHolderSeesLossOnResume(t *testing.T) {
	if prefix := os.Getenv(pauseChildEnv); prefix != "" {
		runPausedHolder(t, prefix)
		return
	}
	t.Parallel()
	rdb := testRedis(t)
	prefix := testPrefix(t, rdb)
	cmd := exec.Command(os.Args[0], "-test.run=^TestPausedHolderSeesLossOnResume$", "-test.count=1", "-test.v")
	cmd.Env = append(sameRedis(rdb), pauseChildEnv+"="+prefix, "GOMAXPROCS=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := bufio.NewScanner(out)
	var log []string
	waitFor := func(prefix string) string {
		for lines.Scan() {
			log = append(log, lines.Text())
			if strings.HasPrefix(lines.Text(), prefix) {
				return lines.Text()
			}
		}
		t.Fatalf("the holder exited before %q:\n%s", prefix, strings.Join(log, "\n"))
		return ""
	}
	waitFor("holding")
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// While the holder is stopped its lease runs out and we take the lock.
	other, _ := newClient(t, rdb, lock.Options{Prefix: prefix})
	taken := mustObtain(t, other, context.Background(), "k", 10*time.Second, lock.ObtainOptions{Wait: 30 * time.Second})
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	result := waitFor("checks")
	for lines.Scan() {
		log = append(log, lines.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("holder process: %v\n%s", err, strings.Join(log, "\n"))
	}
	var checks, stale int
	if _, err := fmt.Sscanf(result, "checks %d stale %d", &checks, &stale); err != nil {
		t.Fatalf("holder said %q: %v", result, err)
	}
	t.Logf("after resuming, the holder checked its lease %d times", checks)
	if stale != 0 {
		t.Fatalf("%d checks after the validity deadline still reported the lease healthy (while we held the lock)", stale)
	}
	mustRelease(t, taken)
}

func runPausedHolder(t *testing.T, prefix string) {
	rdb := testRedis(t)
	c := mustNew(t, rdb, lock.Options{Prefix: prefix})
	l := mustObtain(t, c, context.Background(), "k", 300*time.Millisecond, lock.ObtainOptions{})
	lctx := l.Context()
	fmt.Println("holding")
	var checks, stale int
	// The parent takes the lock over within seconds of the pause; a lease
	// still healthy a minute on means the two never shared a Redis.
	giveUp := time.Now().Add(time.Minute)
	for {
		now := time.Now()
		if now.After(giveUp) {
			t.Fatalf("the lease was never lost after %d checks: is the parent on the same Redis?", checks)
		}
		err, cerr := l.Err(), lctx.Err()
		checks++
		if !now.Before(l.Deadline()) && (err == nil || cerr == nil) {
			stale++
		}
		if err != nil && cerr != nil {
			break
		}
	}
	fmt.Printf("checks %d stale %d\n", checks, stale)
	if stale != 0 {
		t.Errorf("%d stale checks", stale)
	}
	if err := l.Release(context.Background()); !errors.Is(err, lock.ErrLockLost) {
		t.Errorf("release after the pause: %v, want ErrLockLost", err)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
}

// miniredisAt starts a miniredis whose clock reads now and moves only when
// the test moves it (SetTime, FastForward), and returns it with a client;
// both are closed when the test ends.
func miniredisAt(t *testing.T, now time.Time) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	m.SetTime(now)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return m, rdb
}

// Tokens issued as "last + 1" (the server clock had stepped back) must keep
// rising after a lease that nobody released expires: the record of the last
// token must outlive the lease.
func TestFencingTokensSurviveClockStepBack(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	m, rdb := miniredisAt(t, now)
	c, _ := newClient(t, rdb, lock.Options{Prefix: "fence:"})
	ctx := context.Background()
	fixed := lock.ObtainOptions{Fixed: true}

	a := mustObtain(t, c, ctx, "k", time.Minute, fixed)
	mustRelease(t, a)
	m.SetTime(now.Add(-time.Hour)) // NTP steps the server's clock back
	b := mustObtain(t, c, ctx, "k", time.Second, fixed)
	if b.Token() <= a.Token() {
		t.Fatalf("after the clock stepped back: token %d not above %d", b.Token(), a.Token())
	}
	m.FastForward(2 * time.Second) // b's holder crashed: its key expires unreleased
	next := mustObtain(t, c, ctx, "k", time.Second, fixed)
	if next.Token() <= b.Token() {
		t.Fatalf("after an unreleased lease expired: token %d not above %d", next.Token(), b.Token())
	}
	mustRelease(t, next)
	if err := b.Release(ctx); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("release of the expired lease: %v, want ErrLockLost", err)
	}
	for _, k := range m.Keys() {
		if m.TTL(k) <= 0 {
			t.Errorf("key %q has no TTL", k)
		}
	}
}

// A lease kept alive (Refresh, or the watchdog) for longer than FenceTTL
// must keep its fence record: otherwise, once it expires unreleased, the
// next token comes from the server clock alone, which may have stepped
// back, and the order breaks.
func TestFenceRecordOutlivesALongHeldLease(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	m, rdb := miniredisAt(t, now)
	c, _ := newClient(t, rdb, lock.Options{Prefix: "fence:", FenceTTL: time.Hour})
	ctx := context.Background()

	a := mustObtain(t, c, ctx, "k", 40*time.Minute, lock.ObtainOptions{Fixed: true})
	for range 3 { // held for 90 minutes, past the FenceTTL of an hour
		m.FastForward(30 * time.Minute)
		if err := a.Refresh(ctx, 40*time.Minute); err != nil {
			t.Fatalf("refresh: %v", err)
		}
	}
	if !m.Exists("fence:{k}:fence") {
		t.Fatal("the fence record expired while its lease was still held")
	}
	m.SetTime(now.Add(-time.Hour))  // NTP steps the server's clock back
	m.FastForward(41 * time.Minute) // a's holder crashed: its key expires unreleased
	next := mustObtain(t, c, ctx, "k", time.Minute, lock.ObtainOptions{Fixed: true})
	if next.Token() <= a.Token() {
		t.Fatalf("after a long-held lease expired: token %d not above %d", next.Token(), a.Token())
	}
	mustRelease(t, next)
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

// With one of three instances dead, a release published while a waiter
// is still subscribing (after its failed try) must not be lost: the waiter
// must try again once the live instances have confirmed its subscription,
// rather than sleep until its context ends.
//
// Instance timeouts of seconds: with 200 ms, a live instance that a starved
// machine timed out failed the try outright (one instance is down), it was
// never refused as held, and the test waited for the release for good.
func TestRedLockWakeUpWithInstanceDown(t *testing.T) {
	t.Parallel()
	r, servers, clients := redLock(t, 3, 5*time.Second, patientClient)
	var holder atomic.Pointer[lock.Lease]
	var once sync.Once
	released := make(chan error, 1)
	for _, c := range clients {
		c.AddHook(scriptHook{after: func(_ context.Context, script string, cmd redis.Cmder, err error) error {
			if h := holder.Load(); h != nil && script == "obtain" && err == nil {
				if v, _ := cmd.(*redis.Cmd).Int64(); v < 0 { // the waiter's failed try
					once.Do(func() { released <- h.Release(context.Background()) })
				}
			}
			return err
		}})
	}
	servers[2].Kill()
	holder.Store(mustObtain(t, r, context.Background(), "k", time.Minute, lock.ObtainOptions{}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := r.Obtain(ctx, "k", time.Minute, lock.ObtainOptions{Wait: time.Minute})
	// The hook releases in the waiter's own call, so by now it has or never
	// will.
	select {
	case rerr := <-released:
		if rerr != nil {
			t.Fatalf("release: %v", rerr)
		}
	default:
		t.Fatalf("the waiter's try was never refused as held (so nothing was released); Obtain: %v", err)
	}
	if err != nil {
		t.Fatalf("the waiter missed a release made before its subscription was confirmed: %v", err)
	}
	mustRelease(t, l)
}

// 2 RedLock clients x 8 goroutines, one instance dead, a TTL far longer
// than the wait: each goroutine must get the lock once, handed over by
// release wake-ups, since no fallback re-check comes within the wait.
// Instance timeouts are seconds and the wait a minute: with 200 ms and
// 5 s, a live instance that a starved machine timed out failed an obtain
// at once (one instance is down), and 15 handoffs had to fit in 5 s.
func TestRedLockHandoffsWithInstanceDown(t *testing.T) {
	t.Parallel()
	var servers []*testenv.RedisProcess
	var clients []redis.UniversalClient
	for range 3 {
		s := testenv.StartRedis(t)
		servers = append(servers, s)
		clients = append(clients, redlockClient(t, s.Addr))
	}
	var locks []*lock.RedLock
	for range 2 {
		var own []redis.UniversalClient
		for _, s := range servers {
			own = append(own, redlockClient(t, s.Addr, patientClient))
		}
		r := mustRedLock(t, own, lock.RedLockOptions{InstanceTimeout: 5 * time.Second})
		t.Cleanup(func() { _ = r.Close() })
		locks = append(locks, r)
	}
	servers[1].Kill()
	got, overlaps, failures := crowd(t, 16, "hot", 5*time.Minute, time.Minute, locks[0], locks[1])
	if got != 16 || overlaps != 0 {
		t.Fatalf("%d of 16 obtained, %d overlaps; failures: %q", got, overlaps, failures)
	}
}

// A majority that is busy (paused, not dead) answers with timeouts, which
// go-redis reports as "i/o timeout": a waiter must wait through them and get
// the lock once the instances answer again.
func TestRedLockWaitsThroughBusyMajority(t *testing.T) {
	t.Parallel()
	// Reads time out at 1 s, well inside the 5 s instance timeout, so
	// every failure is go-redis's own "i/o timeout". They used to time out
	// at 20 ms: on a starved machine a resumed instance then timed out
	// too, and the release after the obtain failed (make stress, bare).
	// timeouts counts, per instance, the package's scripts that failed
	// with a timeout.
	var timeouts [3]atomic.Int32
	var servers []*testenv.RedisProcess
	var clients []redis.UniversalClient
	for i := range 3 {
		s := testenv.StartRedis(t)
		c := redis.NewClient(lock.InstanceOptions(&redis.Options{Addr: s.Addr, ReadTimeout: time.Second}))
		c.AddHook(replyHook(func(cmd redis.Cmder, err error) {
			var ne interface{ Timeout() bool }
			if lock.ScriptOf(cmd) != "" && (errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())) {
				timeouts[i].Add(1)
			}
		}))
		t.Cleanup(func() { _ = c.Close() })
		servers, clients = append(servers, s), append(clients, c)
	}
	r := mustRedLock(t, clients, lock.RedLockOptions{InstanceTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = r.Close() })
	servers[0].Pause()
	servers[1].Pause()
	t.Cleanup(servers[0].Resume)
	t.Cleanup(servers[1].Resume)
	got := make(chan error, 1)
	go func() {
		l, err := r.Obtain(context.Background(), "k", time.Minute, lock.ObtainOptions{Wait: time.Minute})
		if err == nil {
			// What is asserted is the grant; a release is another test's.
			t.Cleanup(func() { _ = l.Release(context.Background()) })
		}
		got <- err
	}()
	testkit.Eventually(t, "both paused instances to time out", 30*time.Second, func() bool {
		return timeouts[0].Load() > 0 && timeouts[1].Load() > 0
	})
	servers[0].Resume()
	servers[1].Resume()
	if err := <-got; err != nil {
		t.Fatalf("a busy majority was treated as dead: %v", err)
	}
}

// While one instance is paused, its notifier's network calls must not block
// waiters on other keys: a waiter that gives up returns at its wait, and a
// waiter on another key is woken by a release. The instances' clients wait
// 20s on a read, as a client without short timeouts would.
func TestNotifierPausedInstanceBlocksNobody(t *testing.T) {
	t.Parallel()
	var servers []*testenv.RedisProcess
	var clients []redis.UniversalClient
	var plain []*redis.Client
	for range 3 {
		s := testenv.StartRedis(t)
		c := redis.NewClient(lock.InstanceOptions(&redis.Options{
			Addr: s.Addr, DialTimeout: 20 * time.Second, ReadTimeout: 20 * time.Second, WriteTimeout: 20 * time.Second,
		}))
		t.Cleanup(func() { _ = c.Close() })
		servers, clients, plain = append(servers, s), append(clients, c), append(plain, c)
	}
	r := mustRedLock(t, clients, lock.RedLockOptions{InstanceTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = r.Close() })
	// The holders take their locks through a patient RedLock, so that each
	// lock is held on all three instances: with 100 ms an instance starved
	// for longer was left out of A's grant, and with the third paused, A
	// then held a bare majority that its release could not reach (make
	// stress, bare: "released on 1 of 3 instances").
	holders := mustRedLock(t, clients, lock.RedLockOptions{InstanceTimeout: 5 * time.Second})
	t.Cleanup(func() { _ = holders.Close() })
	bg := context.Background()
	ha := mustObtain(t, holders, bg, "a", time.Minute, lock.ObtainOptions{Fixed: true})
	hb := mustObtain(t, holders, bg, "b", time.Minute, lock.ObtainOptions{Fixed: true})
	servers[2].Pause()
	t.Cleanup(servers[2].Resume) // runs before the clients close

	// W1 waits 2s for "a" and gives up: long enough for the poll below to
	// see it subscribed on a busy machine, far shorter than the 20s a call
	// to the paused instance could block it.
	ctx1, cancel1 := context.WithTimeout(bg, 10*time.Second)
	defer cancel1()
	w1 := make(chan error, 1)
	go func() {
		_, err := r.Obtain(ctx1, "a", time.Second, lock.ObtainOptions{Wait: 2 * time.Second})
		w1 <- err
	}()
	testkit.Eventually(t, "W1 to subscribe", 10*time.Second, func() bool { return numSub(plain[0], "*{a}:wake") == 1 })

	// W2 waits for "b", which is released.
	ctx2, cancel2 := context.WithTimeout(bg, 10*time.Second)
	defer cancel2()
	w2 := make(chan error, 1)
	go func() {
		l, err := r.Obtain(ctx2, "b", time.Minute, lock.ObtainOptions{Wait: time.Minute})
		if err == nil {
			err = l.Release(bg)
		}
		w2 <- err
	}()
	testkit.Eventually(t, "W2 to subscribe", 10*time.Second, func() bool { return numSub(plain[0], "*{b}:wake") == 1 })
	mustRelease(t, hb)

	deadline, _ := ctx2.Deadline()
	if err := returnsBy(t, "W2's Obtain", deadline, func() error { return <-w2 }); err != nil {
		t.Errorf("W2 was not handed the released lock: %v", err)
	}
	deadline, _ = ctx1.Deadline()
	err := returnsBy(t, "W1's Obtain", deadline, func() error { return <-w1 })
	if !errors.Is(err, lock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("W1: got %v, want ErrNotObtained at the end of its 2s wait", err)
	}
	mustRelease(t, ha)
}

// One paused instance must not slow a hot key down to one handoff per
// instance timeout: a cycle returns once a quorum has answered. The
// instance timeout is 4s and each cycle gets 2s, so a cycle that waits for
// the paused instance fails. A key whose first-asked instance is the paused
// one pays for it once, on a first obtain without a deadline.
func TestRedLockHotKeyIgnoresSlowInstance(t *testing.T) {
	t.Parallel()
	// Reads wait up to 10s, so the 4s instance timeout is what bounds a
	// call to the paused instance.
	r, servers, _ := redLock(t, 3, 4*time.Second, func(o *redis.Options) { o.ReadTimeout = 10 * time.Second })
	servers[0].Pause()
	t.Cleanup(servers[0].Resume)
	var gated, other string
	for i := 0; gated == "" || other == ""; i++ {
		key := fmt.Sprintf("hot-%d", i)
		if r.Gate(key) == 0 {
			gated = key
		} else {
			other = key
		}
	}
	bg := context.Background()
	mustRelease(t, mustObtain(t, r, bg, gated, 10*time.Second, lock.ObtainOptions{}))
	for _, key := range []string{other, gated} {
		for i := range 20 {
			ctx, cancel := context.WithTimeout(bg, 2*time.Second)
			l, err := r.Obtain(ctx, key, 10*time.Second, lock.ObtainOptions{})
			if err == nil {
				err = l.Release(ctx)
			}
			cancel()
			if err != nil {
				t.Fatalf("%s, cycle %d: %v", key, i, err)
			}
		}
	}
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

// An Owner that contains the record's separator, even at its start, works
// like any other owner.
func TestOwnerWithSeparator(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t, testRedis(t), lock.Options{})
	ctx := context.Background()
	for i, owner := range []string{"|x", "|", "a|b", "x|1|1", "x|1|1w", "w", "||"} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			key := fmt.Sprintf("k%d", i)
			o := lock.ObtainOptions{Owner: owner}
			outer := mustObtain(t, c, ctx, key, time.Second, o)
			inner := mustObtain(t, c, ctx, key, time.Second, o)
			if inner.Token() != outer.Token() {
				t.Fatalf("owner %q: re-entered token %d, want %d", owner, inner.Token(), outer.Token())
			}
			if _, err := c.Obtain(ctx, key, time.Second, lock.ObtainOptions{}); !errors.Is(err, lock.ErrNotObtained) {
				t.Fatalf("owner %q holds the lock; another obtain got %v, want ErrNotObtained", owner, err)
			}
			mustRelease(t, inner)
			mustRelease(t, outer)
			next := mustObtain(t, c, ctx, key, time.Second, lock.ObtainOptions{})
			if next.Token() <= outer.Token() {
				t.Fatalf("token did not increase after owner %q: %d then %d", owner, outer.Token(), next.Token())
			}
			mustRelease(t, next)
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

// A flash crowd on RedLock, shaped like the app's: three app instances,
// each with its own RedLock clients to the same three servers, TTL 5s,
// instance timeout 250ms, and 400 buyers arriving at once, each waiting up
// to 2s for the lock within a request deadline of 4s to buy one of 50
// items. A buyer told that the lock stayed busy (a 429), or whose request
// ran out of its deadline first (a 503 timeout; nothing was written), comes
// back while items are left. The whole stock must sell, one buyer at a
// time, also with one server paused from the start (busy, not dead), and no
// buyer may hear anything but those two refusals. How fast it sells is not
// asserted: on a machine whose cores are fully taken every wait, deadline
// and instance timeout runs out before the work it bounds (with the test at
// nice 10 beside two hogs on one core, 27 requests ran out of their
// deadline, and a two-minute bound on the sale ended it at 36 of 50). So
// the sale is bounded by progress, not by the clock: it fails as a livelock
// when, since the last unit sold, the buyers were refused ten times each
// and the instances answered two tries per buyer in time. Refusals alone
// come on the clock (each after a wait), and a machine too starved for the
// instances to answer within their timeout makes no tries either: that
// sale is slow, not stuck. (A lock held for good reaches both counts in
// about 20 s on a quiet machine; a healthy sale answers 10 to 45 tries per
// unit. A sale that stops answering at all is caught by go test's
// -timeout.) Not parallel: the burst is the load, and it runs alone.
func TestRedLockFlashCrowd(t *testing.T) {
	for _, paused := range []bool{false, true} {
		t.Run(fmt.Sprintf("paused=%v", paused), func(t *testing.T) {
			var servers []*testenv.RedisProcess
			for range 3 {
				servers = append(servers, testenv.StartRedis(t))
			}
			// answered counts the tries that an instance answered in time:
			// the lock's own progress.
			var answered atomic.Int64
			var apps []*lock.RedLock
			for range 3 {
				var clients []redis.UniversalClient
				for _, s := range servers {
					c := redis.NewClient(lock.InstanceOptions(&redis.Options{Addr: s.Addr}))
					t.Cleanup(func() { _ = c.Close() })
					c.AddHook(replyHook(func(cmd redis.Cmder, err error) {
						if err == nil && lock.ScriptOf(cmd) == "obtain" {
							answered.Add(1)
						}
					}))
					clients = append(clients, c)
				}
				r := mustRedLock(t, clients, lock.RedLockOptions{InstanceTimeout: 250 * time.Millisecond})
				t.Cleanup(func() { _ = r.Close() })
				apps = append(apps, r)
			}
			if paused {
				servers[1].Pause()
				t.Cleanup(servers[1].Resume)
			}
			const buyers, stock = 400, 50
			var left atomic.Int32
			left.Store(stock)
			var inside, overlaps, sold, busy, timedOut atomic.Int32
			// sinceSale counts the refusals since the last unit sold (or
			// the start), and answeredAtSale is answered then.
			var sinceSale atomic.Int32
			var answeredAtSale atomic.Int64
			var mu sync.Mutex
			var other []string
			start := make(chan struct{})
			sale, endSale := context.WithCancel(context.Background())
			defer endSale()
			var stalled atomic.Bool
			// refused counts a refusal and ends the sale when it has stalled.
			refused := func() {
				n, tries := sinceSale.Add(1), answered.Load()-answeredAtSale.Load()
				if n >= 10*buyers && tries >= 2*buyers && left.Load() > 0 && stalled.CompareAndSwap(false, true) {
					t.Errorf("no unit sold in %d refusals and %d tries the instances answered: sold %d of %d", n, tries, sold.Load(), stock)
					endSale()
				}
			}
			// buy is one request: true when the buyer was refused and may
			// come back.
			buy := func(b int) bool {
				ctx, cancel := context.WithTimeout(sale, 4*time.Second) // the request deadline
				defer cancel()
				l, err := apps[b%3].Obtain(ctx, "sku-1", 5*time.Second, lock.ObtainOptions{Wait: 2 * time.Second})
				switch {
				case errors.Is(err, lock.ErrNotObtained) && !errors.Is(err, context.DeadlineExceeded) && strings.Contains(err.Error(), "still held"):
					busy.Add(1) // a 429: the lock stayed busy for the whole wait
					refused()
					return true
				case errors.Is(err, lock.ErrNotObtained) && ctx.Err() == context.DeadlineExceeded && sale.Err() == nil && strings.Contains(err.Error(), "waiting for"):
					timedOut.Add(1) // a 503 timeout: the request's deadline came first
					refused()
					return true
				case err != nil && sale.Err() != nil:
					return false // the sale stalled and was ended
				case err != nil:
					mu.Lock()
					other = append(other, err.Error())
					mu.Unlock()
					return false
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				if left.Load() > 0 {
					time.Sleep(time.Millisecond) // the order write
					left.Add(-1)
					sold.Add(1)
					sinceSale.Store(0)
					answeredAtSale.Store(answered.Load())
				}
				inside.Add(-1)
				if err := l.Release(context.Background()); err != nil {
					mu.Lock()
					other = append(other, "release: "+err.Error())
					mu.Unlock()
				}
				return false
			}
			var wg sync.WaitGroup
			for b := range buyers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for {
						if !buy(b) || left.Load() == 0 || sale.Err() != nil {
							return
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			t.Logf("sold %d of %d; %d tries found the lock busy for their whole wait, %d requests ran out of their deadline, %d other errors",
				sold.Load(), stock, busy.Load(), timedOut.Load(), len(other))
			if len(other) > 0 {
				t.Errorf("%d buyers failed other than by a refusal, e.g. %q", len(other), other[:min(5, len(other))])
			}
			if sold.Load() != stock || overlaps.Load() != 0 {
				t.Fatalf("sold %d of %d with %d overlaps", sold.Load(), stock, overlaps.Load())
			}
		})
	}
}
