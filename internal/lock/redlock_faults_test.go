package lock_test

import (
	"context"
	"errors"
	"fmt"
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

// quorum is a RedLock over three redis-servers of its own whose
// connections can be broken (faults) and whose answered releases are
// counted per instance.
type quorum struct {
	r        *lock.RedLock
	servers  []*testenv.RedisProcess
	clients  []*redis.Client
	faults   []*testkit.NetFaults
	releases [3]atomic.Int32
}

// newQuorum starts the three servers and obtains and releases a warm-up key,
// so that the scripts are loaded and every call below is one EVALSHA; it
// returns once that release has been answered everywhere (releases all 1).
func newQuorum(t *testing.T) *quorum {
	t.Helper()
	q := &quorum{}
	var universal []redis.UniversalClient
	for i := range 3 {
		s := testenv.StartRedis(t)
		d := &testkit.NetFaults{}
		c := redlockClient(t, s.Addr, func(o *redis.Options) { o.Dialer = d.Dial })
		c.AddHook(replyHook(func(cmd redis.Cmder, err error) {
			if lock.ScriptOf(cmd) == "release" && err == nil {
				q.releases[i].Add(1)
			}
		}))
		q.servers, q.clients, q.faults = append(q.servers, s), append(q.clients, c), append(q.faults, d)
		universal = append(universal, c)
	}
	q.r = mustRedLock(t, universal, lock.RedLockOptions{InstanceTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = q.r.Close() })
	// A TTL of a minute: under make stress a warm-up of one second took
	// longer than its TTL to be granted, and was refused.
	mustRelease(t, mustObtain(t, q.r, context.Background(), "warm-up", time.Minute, lock.ObtainOptions{}))
	testkit.Eventually(t, "the warm-up to be released everywhere", 10*time.Second, func() bool {
		return q.releases[0].Load() == 1 && q.releases[1].Load() == 1 && q.releases[2].Load() == 1
	})
	return q
}

// A RedLock lease is returned once a majority granted it; an instance whose
// answer was still out is released by owner with the lease. If that
// instance's try is still in the network when the release reaches it, the
// release finds nothing, and the late grant then lived for its whole TTL:
// with one more instance down, nobody could obtain the lock.
func TestRedLockLateGrantAfterRelease(t *testing.T) {
	t.Parallel()
	q := newQuorum(t)
	ctx := context.Background()
	const key = "k"
	gate := q.r.Gate(key)
	late, other := (gate+1)%3, (gate+2)%3
	q.faults[late].Delay(1, scriptCall("obtain", "lock:", key))
	l := mustObtain(t, q.r, ctx, key, time.Minute, lock.ObtainOptions{})
	// Obtain returned once two instances granted; the late one's try may not
	// even have been written yet.
	testkit.Eventually(t, "the late instance's try to be held back", 10*time.Second, func() bool { return q.faults[late].Held() == 1 })
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	testkit.Eventually(t, "the release to reach the late instance", 10*time.Second, func() bool { return q.releases[late].Load() > 1 })
	if err := q.faults[late].Deliver(); err != nil {
		t.Fatal(err)
	}
	if v := record(t, q.clients[late], "lock:", key); v != "" {
		t.Errorf("a grant that landed after the release is still held: %q", v)
	}
	q.servers[other].Kill()
	next, err := q.r.Obtain(ctx, key, time.Second, lock.ObtainOptions{})
	if err != nil {
		t.Fatalf("with 2 of 3 instances up and the lock released, Obtain: %v", err)
	}
	mustRelease(t, next)
}

// published returns how many messages were published on channel, which ps
// is subscribed to on rdb, since the last call: it publishes a sentinel and
// counts the messages before it, which Redis delivers in the order it ran
// the commands.
func published(t *testing.T, rdb *redis.Client, ps *redis.PubSub, channel string) int {
	t.Helper()
	ctx := context.Background()
	if err := rdb.Publish(ctx, channel, "sentinel").Err(); err != nil {
		t.Fatalf("publish: %v", err)
	}
	n := 0
	for {
		m, err := ps.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		if m.Payload == "sentinel" {
			return n
		}
		n++
	}
}

// subscribe subscribes a connection of rdb's to channel and returns once
// Redis has confirmed it.
func subscribe(t *testing.T, rdb *redis.Client, channel string) *redis.PubSub {
	t.Helper()
	ps := rdb.Subscribe(context.Background(), channel)
	t.Cleanup(func() { _ = ps.Close() })
	if _, err := ps.Receive(context.Background()); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	return ps
}

// A waiter's failed try reaches only the key's gate, so only the gate
// learnt that someone waits; if the gate dies before the holder releases,
// the majority left released without a word, and the waiter slept until
// its own timer. The instances left must publish the release.
func TestRedLockWakeUpWhenGateDiesAfterAWaiterCame(t *testing.T) {
	t.Parallel()
	q := newQuorum(t)
	ctx := context.Background()
	const key = "k"
	channel := lockKey("lock:", key) + ":wake"
	gate := q.r.Gate(key)
	healthy := []int{(gate + 1) % 3, (gate + 2) % 3}
	holder := mustObtain(t, q.r, ctx, key, time.Minute, lock.ObtainOptions{})
	got := make(chan error, 1)
	go func() {
		l, err := q.r.Obtain(ctx, key, time.Minute, lock.ObtainOptions{Wait: 20 * time.Second})
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	testkit.Eventually(t, "the waiter to subscribe", 10*time.Second, func() bool {
		return numSub(q.clients[healthy[0]], "*{k}:wake") == 1 && numSub(q.clients[healthy[1]], "*{k}:wake") == 1
	})
	var subs []*redis.PubSub
	for _, i := range healthy {
		subs = append(subs, subscribe(t, q.clients[i], channel))
	}
	q.servers[gate].Kill()
	if err := holder.Release(ctx); err != nil {
		t.Fatalf("release with 2 of 3 instances up: %v", err)
	}
	n := 0
	for k, i := range healthy {
		n += published(t, q.clients[i], subs[k], channel)
	}
	if n == 0 {
		t.Error("the instances left released the lock without publishing a wake-up")
	}
	if err := <-got; err != nil {
		t.Errorf("the waiter: %v", err)
	}
}

// holdObtains is a hook that keeps the answer of each obtain script from
// the caller until let is closed, after telling held that one came back.
type holdObtains struct {
	replyHook
	held chan<- struct{}
	let  <-chan struct{}
}

func (h holdObtains) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if lock.ScriptOf(cmd) == "obtain" {
			select {
			case h.held <- struct{}{}:
			default:
			}
			<-h.let
		}
		return err
	}
}

// TestRedLockGrantsTooLateAreNotCalledHeld: the instances grant the lock,
// but their answers reach the caller after its TTL has run out. Obtain must
// refuse it (no validity is left) and release the grants; and without a
// Wait it must say so, not that the lock "is held": nobody holds it, and
// the caller would look for a holder. (Seen under make stress: a warm-up
// with a TTL of one second took longer than that and was refused as held.)
func TestRedLockGrantsTooLateAreNotCalledHeld(t *testing.T) {
	t.Parallel()
	const ttl = 50 * time.Millisecond
	held, let := make(chan struct{}, 3), make(chan struct{})
	var clients []redis.UniversalClient
	var plain []*redis.Client
	for range 3 {
		s := testenv.StartRedis(t)
		plain = append(plain, s.Client())
		c := redlockClient(t, s.Addr, func(o *redis.Options) { o.ReadTimeout, o.WriteTimeout = time.Minute, time.Minute })
		c.AddHook(holdObtains{held: held, let: let})
		clients = append(clients, c)
	}
	r := mustRedLock(t, clients, lock.RedLockOptions{InstanceTimeout: time.Minute})
	t.Cleanup(func() { _ = r.Close() })
	done := make(chan error, 1)
	go func() {
		l, err := r.Obtain(context.Background(), "k", ttl, lock.ObtainOptions{})
		if l != nil {
			_ = l.Release(context.Background())
			err = errors.New("obtained with grants older than the TTL")
		}
		done <- err
	}()
	<-held          // the first instance (the gate) granted it; its answer waits
	time.Sleep(ttl) // and is now older than the TTL
	close(let)
	err := <-done
	if !errors.Is(err, lock.ErrNotObtained) || strings.Contains(err.Error(), "is held") || !strings.Contains(err.Error(), "no validity") {
		t.Fatalf("Obtain with every grant answered after the TTL: %v, want ErrNotObtained saying that no validity was left", err)
	}
	// An instance asked last may answer after Obtain returned: its grant
	// is released when its answer comes.
	testkit.Eventually(t, "every refused grant to be released", 10*time.Second, func() bool {
		for _, c := range plain {
			if record(t, c, "lock:", "k") != "" {
				return false
			}
		}
		return true
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
