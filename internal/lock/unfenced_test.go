package lock_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testkit"
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

// commandNames records the name of every command rdb sends, in order.
func commandNames(rdb *redis.Client) func() []string {
	var mu sync.Mutex
	var names []string
	rdb.AddHook(replyHook(func(cmd redis.Cmder, _ error) {
		mu.Lock()
		names = append(names, cmd.Name())
		mu.Unlock()
	}))
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := names
		names = nil
		return out
	}
}

// TestUnfencedTryOnceIsOneSET: an unfenced Obtain that tries once is one
// SET NX PX, no script; refused, it asks the obtain script too (which
// reads an older version's released record as free); a fenced one, or an
// unfenced one that waits, runs the obtain script alone.
func TestUnfencedTryOnceIsOneSET(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(lock.ClientOptions(&redis.Options{Addr: testRedis(t).Options().Addr}))
	t.Cleanup(func() { _ = rdb.Close() })
	prefix := testPrefix(t, rdb)
	unfenced, _ := newClient(t, rdb, lock.Options{Prefix: prefix, Unfenced: true})
	fenced, _ := newClient(t, rdb, lock.Options{Prefix: prefix + "f:"})
	ctx := context.Background()
	mustRelease(t, mustObtain(t, fenced, ctx, "warm-up", time.Second, lock.ObtainOptions{})) // loads the scripts
	sent := commandNames(rdb)
	held := mustObtain(t, unfenced, ctx, "k", time.Second, lock.ObtainOptions{})
	if got := sent(); !slices.Equal(got, []string{"set"}) {
		t.Fatalf("an unfenced try-once obtain sent %q, want one set", got)
	}
	if _, err := unfenced.Obtain(ctx, "k", time.Second, lock.ObtainOptions{}); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("try-once while held: got %v, want ErrNotObtained", err)
	}
	if got := sent(); !slices.Equal(got, []string{"set", "evalsha"}) {
		t.Fatalf("a refused unfenced try-once sent %q, want set then the obtain script", got)
	}
	mustRelease(t, held)
	sent()
	for _, tc := range []struct {
		name string
		c    *lock.Client
		o    lock.ObtainOptions
	}{{"fenced", fenced, lock.ObtainOptions{}}, {"unfenced, waiting", unfenced, lock.ObtainOptions{Wait: time.Second}}} {
		mustRelease(t, mustObtain(t, tc.c, ctx, "k", time.Second, tc.o))
		if got := sent(); len(got) == 0 || got[0] != "evalsha" || slices.Contains(got, "set") {
			t.Fatalf("%s: sent %q, want the obtain script", tc.name, got)
		}
	}
}

// TestUnfencedTryOnceLostReplyIsCleanedUp: when the SET of an unfenced
// try-once reaches Redis and its reply is lost, Obtain fails and its
// clean-up by owner deletes the grant, so that the key is not left held
// by nobody for its TTL.
func TestUnfencedTryOnceLostReplyIsCleanedUp(t *testing.T) {
	t.Parallel()
	d := &testkit.NetFaults{}
	rdb := faultyClient(t, d, *lock.ClientOptions(&redis.Options{}))
	c, prefix := newClient(t, rdb, lock.Options{Unfenced: true})
	ctx := context.Background()
	lk := []byte(lockKey(prefix, "k"))
	d.Drop(1, func(req []byte) bool { return bytes.Contains(req, []byte("$3\r\nset\r\n")) && bytes.Contains(req, lk) })
	l, err := c.Obtain(ctx, "k", time.Minute, lock.ObtainOptions{})
	if d.Dropped() != 1 {
		t.Fatalf("%d replies dropped, want the SET's", d.Dropped())
	}
	if err == nil {
		t.Fatalf("Obtain without a reply granted a lease (token %d)", l.Token())
	}
	if v := record(t, rdb, prefix, "k"); v != "" {
		t.Fatalf("Obtain failed (%v), yet the lock is held by an owner nobody knows: %q", err, v)
	}
}
