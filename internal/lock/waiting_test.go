package lock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// waitingKey is the record of someone waiting for a lock.
func waitingKey(prefix, key string) string { return lockKey(prefix, key) + ":waiting" }

// Once the last waiter has gone, releases stop publishing (on Cluster each
// PUBLISH goes to every node): they published until the fence record
// expired, a day by default.
func TestReleaseStopsPublishingOnceNobodyWaits(t *testing.T) {
	t.Parallel()
	rdb, c, prefix := testClient(t, lock.Options{})
	ctx := context.Background()
	channel := lockKey(prefix, "k") + ":wake"
	ps := subscribe(t, rdb, channel)
	a := mustObtain(t, c, ctx, "k", time.Minute, lock.ObtainOptions{})
	if _, err := c.Obtain(ctx, "k", time.Minute, lock.ObtainOptions{Wait: time.Millisecond}); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("wait on a held lock: got %v, want ErrNotObtained", err)
	}
	mustRelease(t, a)
	if n := published(t, rdb, ps, channel); n != 1 {
		t.Fatalf("a release right after a wait published %d wake-ups, want 1", n)
	}
	testkit.Eventually(t, "the waiting record to expire", 20*time.Second, func() bool {
		return rdb.Exists(ctx, waitingKey(prefix, "k")).Val() == 0
	})
	for i := range 2 {
		mustRelease(t, mustObtain(t, c, ctx, "k", time.Second, lock.ObtainOptions{}))
		if n := published(t, rdb, ps, channel); n != 0 {
			t.Fatalf("release %d, long after the last waiter left, published %d wake-ups", i, n)
		}
	}
}

// The last waiter leaves (its context ends) just as another arrives and the
// holder releases: the newcomer's own try keeps the record alive, so the
// release still wakes it.
func TestReleaseRacingTheLastWaiterLeaving(t *testing.T) {
	t.Parallel()
	rdb, c, prefix := testClient(t, lock.Options{})
	other, _ := newClient(t, rdb, lock.Options{Prefix: prefix})
	ctx := context.Background()
	channel := lockKey(prefix, "k") + ":wake"
	ps := subscribe(t, rdb, channel)
	h := mustObtain(t, c, ctx, "k", time.Minute, lock.ObtainOptions{})
	leaving, leave := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() {
		_, err := c.Obtain(leaving, "k", time.Minute, lock.ObtainOptions{Wait: time.Minute})
		left <- err
	}()
	testkit.Eventually(t, "the first waiter to wait", 10*time.Second, func() bool { return numSub(rdb, channel) == 2 })
	leave()
	if err := <-left; !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter that left: %v", err)
	}
	type result struct {
		l   *lock.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := other.Obtain(ctx, "k", time.Second, lock.ObtainOptions{Wait: time.Minute})
		got <- result{l, err}
	}()
	// The newcomer has tried (and renewed the record) before it subscribes.
	testkit.Eventually(t, "the newcomer to wait", 10*time.Second, func() bool { return numSub(rdb, channel) == 2 })
	mustRelease(t, h)
	if n := published(t, rdb, ps, channel); n != 1 {
		t.Fatalf("the release published %d wake-ups, want 1", n)
	}
	r := <-got // its release comes after the count: it publishes too
	if r.err != nil {
		t.Fatalf("the newcomer: %v", r.err)
	}
	mustRelease(t, r.l)
}

const pausedWaiterEnv = "SECKILL_LOCK_PAUSED_WAITER"

// A waiter paused (SIGSTOP) past its waiting record's TTL cannot keep it
// alive, so the release publishes nothing; once resumed, its own timer must
// catch the release long before its Wait or the holder's TTL runs out.
func TestWaiterPausedPastItsRecord(t *testing.T) {
	if prefix := os.Getenv(pausedWaiterEnv); prefix != "" {
		runPausedWaiter(t, prefix)
		return
	}
	t.Parallel()
	rdb, c, prefix := testClient(t, lock.Options{})
	ctx := context.Background()
	h := mustObtain(t, c, ctx, "k", 10*time.Minute, lock.ObtainOptions{})
	cmd := exec.Command(os.Args[0], "-test.run=^TestWaiterPausedPastItsRecord$", "-test.count=1", "-test.v")
	cmd.Env = append(sameRedis(rdb), pausedWaiterEnv+"="+prefix)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	channel := lockKey(prefix, "k") + ":wake"
	testkit.Eventually(t, "the waiter to subscribe", 20*time.Second, func() bool { return numSub(rdb, channel) == 1 })
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "the paused waiter's record to expire", 20*time.Second, func() bool {
		return rdb.Exists(ctx, waitingKey(prefix, "k")).Val() == 0
	})
	ps := subscribe(t, rdb, channel)
	mustRelease(t, h)
	if n := published(t, rdb, ps, channel); n != 0 {
		t.Fatalf("the release published %d wake-ups with no live waiting record", n)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	var log []string
	for lines.Scan() {
		log = append(log, lines.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the paused waiter: %v\n%s", err, strings.Join(log, "\n"))
	}
	if !strings.Contains(strings.Join(log, "\n"), "obtained") {
		t.Fatalf("the paused waiter never said it obtained the lock:\n%s", strings.Join(log, "\n"))
	}
}

// runPausedWaiter waits for the parent's lock for up to 5 minutes, far less
// than the holder's 10 minute TTL, and says "obtained" when it has it.
func runPausedWaiter(t *testing.T, prefix string) {
	rdb := testRedis(t)
	c := mustNew(t, rdb, lock.Options{Prefix: prefix})
	defer c.Close()
	l, err := c.Obtain(context.Background(), "k", time.Second, lock.ObtainOptions{Wait: 5 * time.Minute})
	if err != nil {
		t.Fatalf("obtain: %v", err)
	}
	fmt.Println("obtained")
	mustRelease(t, l)
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
