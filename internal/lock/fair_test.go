package lock_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// The fair mode's tests. Each forces the order it checks: a waiter is
// started only once the one before it stands in Redis's line, and a waiter
// is paused by holding its tries in a go-redis hook, or killed as a child
// process.

var fair = lock.ObtainOptions{Fair: true, Wait: time.Minute}

// fairLine reads c's line on key and fails the test if its two sets
// disagree.
func fairLine(t testing.TB, c *lock.Client, key string) []string {
	t.Helper()
	ids, ok, err := c.FairLine(context.Background(), key)
	if err != nil {
		t.Fatalf("read the line of %q: %v", key, err)
	}
	if !ok {
		t.Fatalf("the line of %q and its leases disagree: %v", key, ids)
	}
	return ids
}

// joinLine starts a fair waiter for key on c and returns once it stands in
// line, with its id; the waiter sends its lease (nil after an error, which
// it reports) on got.
func joinLine(t *testing.T, ctx context.Context, c *lock.Client, key string, ttl time.Duration, got chan<- *lock.Lease) string {
	t.Helper()
	before := fairLine(t, c, key)
	// The waiter may fail after the test has ended (the test failed
	// first): it must not call t then, so its error is reported by a
	// cleanup, if it came by the end.
	failed := make(chan error, 1)
	t.Cleanup(func() {
		select {
		case err := <-failed:
			t.Errorf("fair waiter: %v", err)
		default:
		}
	})
	go func() {
		l, err := c.Obtain(ctx, key, ttl, fair)
		if err != nil && ctx.Err() == nil {
			failed <- err
		}
		got <- l
	}()
	var id string
	testkit.Eventually(t, "the waiter to stand in line", 20*time.Second, func() bool {
		ids := fairLine(t, c, key)
		if len(ids) != len(before)+1 {
			return false
		}
		id = ids[len(ids)-1]
		return true
	})
	return id
}

// Waiters on several clients, each started only once the one before it
// stands in line, get the lock in the order they came. In the default mode
// each client wakes its own first waiter on a release and those race, so
// the order across clients is whoever's try lands first.
func TestFairGrantsInArrivalOrder(t *testing.T) {
	t.Parallel()
	rdb, first, prefix := testClient(t, lock.Options{})
	clients := []*lock.Client{first}
	for range 2 {
		c, _ := newClient(t, rdb, lock.Options{Prefix: prefix})
		clients = append(clients, c)
	}
	ctx := context.Background()
	h := mustObtain(t, first, ctx, "k", time.Minute, lock.ObtainOptions{Fair: true})
	const n = 8
	var mu sync.Mutex
	var order []int
	done := make(chan error, n)
	for i := range n {
		c := clients[i%len(clients)]
		got := make(chan *lock.Lease, 1)
		joinLine(t, ctx, c, "k", time.Minute, got)
		go func() {
			l := <-got
			if l == nil {
				done <- errors.New("not obtained")
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			done <- l.Release(ctx)
		}()
	}
	mustRelease(t, h)
	for range n {
		if err := <-done; err != nil {
			t.Fatalf("waiter: %v", err)
		}
	}
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7}; !slices.Equal(order, want) {
		t.Fatalf("grants in order %v, want the order of arrival %v", order, want)
	}
	if ids := fairLine(t, first, "k"); len(ids) != 0 {
		t.Fatalf("the line still holds %v", ids)
	}
}

// holdTries is a hook that, once armed, holds a client's fair tries and
// the renewals of its places before they are sent, until the test lets
// them go: the waiter is as good as paused. armAfterTry arms it right after
// the next try's or renewal's reply, so that the waiter's place has a
// whole lease left when the hold begins.
type holdTries struct {
	mu      sync.Mutex
	armNext bool
	armed   bool
	armedC  chan struct{} // closed once armed
	held    chan struct{} // closed once a try is being held
	heldOne bool
	release chan struct{}
}

func newHoldTries() *holdTries {
	return &holdTries{armedC: make(chan struct{}), held: make(chan struct{}), release: make(chan struct{})}
}

func (h *holdTries) armAfterTry() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armNext = true
}

func (h *holdTries) hook() scriptHook {
	return scriptHook{
		before: func(ctx context.Context, script string, _ redis.Cmder) error {
			if script != "fair-obtain" && script != "fair-renew" {
				return nil
			}
			h.mu.Lock()
			armed := h.armed
			if armed && !h.heldOne {
				h.heldOne = true
				close(h.held)
			}
			h.mu.Unlock()
			if !armed {
				return nil
			}
			select {
			case <-h.release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		after: func(_ context.Context, script string, _ redis.Cmder, err error) error {
			if script != "fair-obtain" && script != "fair-renew" {
				return err
			}
			h.mu.Lock()
			if h.armNext && !h.armed {
				h.armed = true
				close(h.armedC)
			}
			h.mu.Unlock()
			return err
		},
	}
}

// A newcomer must not take a free lock from the waiter first in line, even
// when that waiter's try comes late: here it is held back until the
// newcomer has tried. In the default mode the newcomer gets the lock (a
// barge: seen fail with the newcomer's Obtain in the default mode, which
// does not look at the line).
func TestFairNewcomerCannotBarge(t *testing.T) {
	t.Parallel()
	rdb, holder, prefix := testClient(t, lock.Options{})
	hold := newHoldTries()
	slow := mustNew(t, hookedClient(t, &redis.Options{Addr: rdb.Options().Addr}, hold.hook()), lock.Options{Prefix: prefix})
	t.Cleanup(func() { _ = slow.Close() })
	newcomer, _ := newClient(t, rdb, lock.Options{Prefix: prefix})
	ctx := context.Background()

	h := mustObtain(t, holder, ctx, "k", time.Minute, lock.ObtainOptions{Fair: true})
	got := make(chan *lock.Lease, 1)
	joinLine(t, ctx, slow, "k", time.Minute, got)
	hold.armAfterTry()
	<-hold.armedC
	mustRelease(t, h)
	<-hold.held // from now on no try or renewal of the first in line reaches Redis
	if l, err := newcomer.Obtain(ctx, "k", time.Minute, lock.ObtainOptions{Fair: true}); !errors.Is(err, lock.ErrNotObtained) {
		if l != nil {
			_ = l.Release(ctx)
		}
		t.Fatalf("a newcomer, with the lock free and a waiter first in line: got %v, want ErrNotObtained", err)
	}
	close(hold.release)
	w := <-got
	if w == nil {
		t.FailNow()
	}
	if w.Token() <= h.Token() {
		t.Fatalf("token did not increase: %d then %d", h.Token(), w.Token())
	}
	mustRelease(t, w)
}

// A waiter whose Obtain ends (its context is cancelled) leaves the line at
// once, and the next waiter is woken by the release as if it had never
// been there.
func TestFairWaiterCancelledLeavesTheLine(t *testing.T) {
	t.Parallel()
	rdb, c, prefix := testClient(t, lock.Options{})
	other, _ := newClient(t, rdb, lock.Options{Prefix: prefix})
	ctx := context.Background()
	h := mustObtain(t, c, ctx, "k", time.Minute, lock.ObtainOptions{Fair: true})
	leaving, leave := context.WithCancel(ctx)
	gone := make(chan *lock.Lease, 1)
	kid := joinLine(t, leaving, c, "k", time.Second, gone)
	got := make(chan *lock.Lease, 1)
	// A long lease, as in TestFairWaiterKilled: from its grant to its
	// release a starved machine outlived one of a second.
	lid := joinLine(t, ctx, other, "k", 10*time.Second, got)
	leave()
	if l := <-gone; l != nil {
		t.Fatalf("the cancelled waiter obtained the lock (token %d)", l.Token())
	}
	if ids := fairLine(t, c, "k"); !slices.Equal(ids, []string{lid}) {
		t.Fatalf("after %s left, the line is %v, want only %s", kid, ids, lid)
	}
	mustRelease(t, h)
	l := <-got
	if l == nil {
		t.FailNow()
	}
	mustRelease(t, l)
}

const fairKilledEnv = "SECKILL_LOCK_FAIR_KILLED"

// A waiter whose process is killed (SIGKILL: no clean-up runs) stands first
// in line when the holder releases. Its place is dropped when its lease
// runs out, and the next waiter gets the lock then: long before its own
// Wait of a minute, and the holder's TTL of ten. (Seen fail with the
// pruning of dead places taken out of fair_queue.lua: the next waiter
// waited out its minute.)
func TestFairWaiterKilled(t *testing.T) {
	if prefix := os.Getenv(fairKilledEnv); prefix != "" {
		runFairWaiter(t, prefix)
		return
	}
	t.Parallel()
	rdb, c, prefix := testClient(t, lock.Options{})
	ctx := context.Background()
	h := mustObtain(t, c, ctx, "k", 10*time.Minute, lock.ObtainOptions{Fair: true})
	cmd := exec.Command(os.Args[0], "-test.run=^TestFairWaiterKilled$", "-test.count=1")
	cmd.Env = append(sameRedis(rdb), fairKilledEnv+"="+prefix)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testkit.Eventually(t, "the child to stand in line", 30*time.Second, func() bool { return len(fairLine(t, c, "k")) == 1 })
	dead := fairLine(t, c, "k")[0]
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	got := make(chan *lock.Lease, 1)
	// The next waiter's own lease is long: from its grant to its release
	// the test reads the line, which on a starved machine outlived a
	// lease of a second (release: lock lost).
	next := joinLine(t, ctx, c, "k", 10*time.Second, got)
	if ids := fairLine(t, c, "k"); !slices.Equal(ids, []string{dead, next}) {
		t.Fatalf("line %v, want the killed waiter first and then %s", ids, next)
	}
	mustRelease(t, h)
	l := <-got
	if l == nil {
		t.Fatal("the waiter behind a killed one never got the lock")
	}
	if ids := fairLine(t, c, "k"); len(ids) != 0 {
		t.Fatalf("the line still holds %v", ids)
	}
	mustRelease(t, l)
}

// runFairWaiter waits in line for the parent's lock until it is killed.
func runFairWaiter(t *testing.T, prefix string) {
	rdb := testRedis(t)
	c := mustNew(t, rdb, lock.Options{Prefix: prefix})
	defer c.Close()
	l, err := c.Obtain(context.Background(), "k", time.Second, fair)
	if err != nil {
		t.Fatalf("obtain: %v", err)
	}
	_ = l.Release(context.Background())
	t.Fatal("the child obtained a lock its parent holds for ten minutes")
}

// A waiter first in line is paused (its tries held in a hook) past its
// place's lease: the waiters behind it move up and get the lock first. When
// it comes back, while the next waiter holds the lock, its try must not
// grant it the lock, nor give it its old place back: it joins the end of
// the line, behind the waiter that came after it. (Seen fail with dead
// places skipped but kept in line by fair_queue.lua, the paused waiter's
// place never dropped; and with only their leases pruned, the line and the
// leases disagreed.)
func TestFairWaiterPausedLosesItsPlace(t *testing.T) {
	t.Parallel()
	rdb, c, prefix := testClient(t, lock.Options{})
	hold := newHoldTries()
	paused := mustNew(t, hookedClient(t, &redis.Options{Addr: rdb.Options().Addr}, hold.hook()), lock.Options{Prefix: prefix})
	t.Cleanup(func() { _ = paused.Close() })
	other, _ := newClient(t, rdb, lock.Options{Prefix: prefix})
	ctx := context.Background()

	h := mustObtain(t, c, ctx, "k", time.Minute, lock.ObtainOptions{Fair: true})
	gotP, got2, got3 := make(chan *lock.Lease, 1), make(chan *lock.Lease, 1), make(chan *lock.Lease, 1)
	p := joinLine(t, ctx, paused, "k", 10*time.Second, gotP)
	hold.armAfterTry()
	<-hold.armedC
	w2 := joinLine(t, ctx, c, "k", 10*time.Second, got2)
	w3 := joinLine(t, ctx, other, "k", 10*time.Second, got3)
	<-hold.held
	// The live waiters renew their places every second, and drop the
	// paused one's once its lease has run out.
	testkit.Eventually(t, "the paused waiter's place to be dropped", 30*time.Second, func() bool {
		return slices.Equal(fairLine(t, c, "k"), []string{w2, w3})
	})
	mustRelease(t, h)
	l2 := <-got2
	if l2 == nil {
		t.FailNow()
	}
	close(hold.release) // the paused waiter comes back
	testkit.Eventually(t, "the paused waiter to stand in line again", 30*time.Second, func() bool {
		return len(fairLine(t, c, "k")) == 2
	})
	if ids := fairLine(t, c, "k"); !slices.Equal(ids, []string{w3, p}) {
		t.Fatalf("after the paused waiter came back the line is %v, want %v (W3, then the paused one)", ids, []string{w3, p})
	}
	select {
	case l := <-gotP:
		t.Fatalf("the paused waiter got the lock while W2 held it (lease %v)", l != nil)
	default:
	}
	var order []string
	mustRelease(t, l2)
	order = append(order, "W2")
	for range 2 {
		select {
		case l := <-got3:
			order = append(order, "W3")
			mustRelease(t, l)
		case l := <-gotP:
			order = append(order, "paused")
			if l != nil {
				mustRelease(t, l)
			}
		}
	}
	if want := []string{"W2", "W3", "paused"}; !slices.Equal(order, want) {
		t.Fatalf("grants in order %v, want %v", order, want)
	}
	if ids := fairLine(t, c, "k"); len(ids) != 0 {
		t.Fatalf("the line still holds %v", ids)
	}
}

// A crowd of fair waiters on three clients, released at once: each gets
// the lock once, never two at a time, and the line is empty at the end.
//
// Every fair waiter asks Redis itself, on arrival and then once a second,
// each time on a pooled connection: 200 waiters on the embedded Redis of a
// bare run, under -race beside CPU hogs, kept go-redis's pool (20
// connections here) so busy that tries failed with "connection pool
// timeout" and releases overran 2s. What this test checks is mutual
// exclusion and the line, so its client has a connection per waiter and
// long timeouts, as a service running that many fair waiters should.
func TestFairCrowd(t *testing.T) {
	t.Parallel()
	const n = 200
	rdb := redis.NewClient(lock.ClientOptions(&redis.Options{Addr: testRedis(t).Options().Addr, PoolSize: n, PoolTimeout: time.Minute}))
	t.Cleanup(func() { _ = rdb.Close() })
	opts := lock.Options{ReleaseTimeout: 30 * time.Second}
	first, prefix := newClient(t, rdb, opts)
	lockers := []lock.Locker{first}
	opts.Prefix = prefix
	for range 2 {
		c, _ := newClient(t, rdb, opts)
		lockers = append(lockers, c)
	}
	start := make(chan struct{})
	var inside, got, overlaps atomic.Int32
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			l, err := lockers[g%len(lockers)].Obtain(context.Background(), "k", 5*time.Second, lock.ObtainOptions{Fair: true, Wait: 2 * time.Minute})
			if err != nil {
				t.Errorf("obtain: %v", err)
				return
			}
			if inside.Add(1) != 1 {
				overlaps.Add(1)
			}
			inside.Add(-1)
			got.Add(1)
			if err := l.Release(context.Background()); err != nil {
				t.Errorf("release: %v", err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if overlaps.Load() != 0 || got.Load() != n {
		t.Fatalf("%d of %d obtained, %d found another inside", got.Load(), n, overlaps.Load())
	}
	if ids := fairLine(t, first, "k"); len(ids) != 0 {
		t.Fatalf("the line still holds %v", ids)
	}
}

// In fair mode a holder re-enters past the line (the line waits for it),
// tokens keep rising, the watchdog keeps a short lease past its first TTL
// while a waiter waits, and a lease that runs out is reported lost.
//
// The lease is 6 s, renewed every 2 s: with 1 s, a renewal that a
// starved machine ran 650 ms late lost it, and the test ran alone. At 6 s
// a renewal may come up to 4 s late, and the test runs beside the others
// as TestWatchdogKeepsLock does with the same lease; without the services
// each has an embedded Redis of its own.
func TestFairKeepsReentryFencingAndWatchdog(t *testing.T) {
	t.Parallel()
	renewed := make(chan struct{}, 64)
	rdb, c, prefix := testClient(t, lock.Options{Hooks: lock.Hooks{Renewed: func(key string, _ time.Duration) {
		if key == "k" {
			select {
			case renewed <- struct{}{}:
			default:
			}
		}
	}}})
	other, _ := newClient(t, rdb, lock.Options{Prefix: prefix})
	ctx := context.Background()
	const ttl = 6 * time.Second
	job := lock.ObtainOptions{Fair: true, Owner: "job", Wait: time.Second}
	// A fixed lease on another key, which runs out (1 s) while a is held.
	f := mustObtain(t, c, ctx, "f", time.Second, lock.ObtainOptions{Fair: true, Fixed: true})
	obtained := time.Now()
	a := mustObtain(t, c, ctx, "k", ttl, job)
	got := make(chan *lock.Lease, 1)
	joinLine(t, ctx, other, "k", ttl, got)
	again := mustObtain(t, c, ctx, "k", ttl, job)
	if again.Token() != a.Token() {
		t.Fatalf("a re-entry has token %d, the first hold %d", again.Token(), a.Token())
	}
	mustRelease(t, again)
	// Hold a past its first ttl, renewed by the watchdog (every ttl/3).
	past := time.After(time.Until(obtained.Add(ttl)))
	for renewals := 0; past != nil || renewals == 0; {
		select {
		case <-past:
			past = nil
		case <-renewed:
			renewals++
		case <-a.Done():
			t.Fatalf("lease lost while a fair waiter waited: %v", a.Err())
		case b := <-got:
			t.Fatalf("the waiter got a held lock (token %v)", b != nil)
		}
	}
	mustRelease(t, a)
	b := <-got
	if b == nil {
		t.FailNow()
	}
	if b.Token() <= a.Token() {
		t.Fatalf("token did not increase: %d then %d", a.Token(), b.Token())
	}
	mustRelease(t, b)

	<-f.Done()
	if !errors.Is(f.Err(), lock.ErrLockLost) {
		t.Fatalf("a fixed lease past its ttl: Err %v, want ErrLockLost", f.Err())
	}
	if err := f.Release(ctx); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("release after expiry: got %v, want ErrLockLost", err)
	}
}

// RedLock has no fair mode, and says so rather than ignoring the option.
func TestRedLockRefusesFair(t *testing.T) {
	t.Parallel()
	r := mustRedLock(t, []redis.UniversalClient{testRedis(t)}, lock.RedLockOptions{})
	t.Cleanup(func() { _ = r.Close() })
	if _, err := r.Obtain(context.Background(), "k", time.Second, lock.ObtainOptions{Fair: true}); err == nil || errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("RedLock with Fair: got %v, want a refusal", err)
	}
}

// The demo runs the lock on miniredis: the fair scripts must run on its Lua
// engine, keep the order, and leave every key with a TTL.
func TestFairOnMiniredis(t *testing.T) {
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	if err := m.Start(); err != nil {
		t.Fatalf("start miniredis: %v", err)
	}
	t.Cleanup(m.Close)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	c := mustNew(t, rdb, lock.Options{})
	t.Cleanup(func() { _ = c.Close() })
	other := mustNew(t, rdb, lock.Options{})
	t.Cleanup(func() { _ = other.Close() })
	ctx := context.Background()
	// Leases of a minute: the test is about the order, and a lease of a
	// second held across four joins lapsed when a busy machine starved
	// its renewals (make stress, three suites side by side).
	h := mustObtain(t, c, ctx, "k", time.Minute, lock.ObtainOptions{Fair: true})
	var chans []chan *lock.Lease
	for i := range 4 {
		got := make(chan *lock.Lease, 1)
		joinLine(t, ctx, []*lock.Client{c, other}[i%2], "k", time.Minute, got)
		chans = append(chans, got)
	}
	for _, k := range m.Keys() {
		if m.TTL(k) <= 0 {
			t.Errorf("miniredis key %q has no TTL", k)
		}
	}
	// A waiter takes the lock only after the one before it released, so
	// each must be next when it returns: receive in order.
	mustRelease(t, h)
	last := h.Token()
	for i, got := range chans {
		l := <-got
		if l == nil {
			t.Fatalf("waiter %d got nothing", i)
		}
		for j, other := range chans[i+1:] {
			select {
			case o := <-other:
				t.Fatalf("waiter %d got the lock before waiter %d released (%v)", i+1+j, i, o != nil)
			default:
			}
		}
		if l.Token() <= last {
			t.Fatalf("token did not increase: %d then %d", last, l.Token())
		}
		last = l.Token()
		mustRelease(t, l)
	}
	if ids := fairLine(t, c, "k"); len(ids) != 0 {
		t.Fatalf("the line still holds %v", ids)
	}
}
