package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/lock"
)

// The zero-set-up demo runs the lock on miniredis with real-time TTLs; the
// scripts must work on its Lua engine too.
func TestMiniredis(t *testing.T) {
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	if err := m.Start(); err != nil {
		t.Fatalf("start miniredis: %v", err)
	}
	t.Cleanup(m.Close)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	renewed := make(chan struct{}, 64)
	c := mustNew(t, rdb, lock.Options{Hooks: lock.Hooks{Renewed: func(key string, _ time.Duration) {
		if key == "k" {
			select {
			case renewed <- struct{}{}:
			default:
			}
		}
	}}})
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	ctx := context.Background()
	// Leases long enough that a renewal late by a scheduling stall on a
	// busy machine (the watchdog renews every ttl/3) cannot lose them: at
	// 300 ms, 2 of 20 runs under -race beside two CPU hogs lost "k".
	const ttl = 3 * time.Second

	obtained := time.Now()
	a := mustObtain(t, c, ctx, "k", ttl, lock.ObtainOptions{})
	if _, err := c.Obtain(ctx, "k", ttl, lock.ObtainOptions{}); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("obtain while held: got %v, want ErrNotObtained", err)
	}
	got := make(chan *lock.Lease)
	go func() {
		b, err := c.Obtain(ctx, "k", ttl, lock.ObtainOptions{Wait: 30 * time.Second})
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- b
	}()
	// The watchdog keeps the lock past its first TTL, renewing it, while
	// the waiter waits.
	var b *lock.Lease
	for renewals := 0; !t.Failed() && (renewals == 0 || time.Since(obtained) <= ttl); {
		select {
		case <-renewed:
			renewals++
		case <-a.Done():
			t.Errorf("lease lost on miniredis: %v", a.Err())
		case b = <-got:
			t.Errorf("waiter obtained a held lock (token %d)", b.Token())
		}
	}
	if err := a.Release(ctx); err != nil {
		t.Errorf("release: %v", err)
	}
	if b == nil {
		b = <-got
	}
	if t.Failed() {
		t.FailNow()
	}
	if b == nil {
		t.FailNow()
	}
	if b.Token() <= a.Token() {
		t.Fatalf("token did not increase: %d then %d", a.Token(), b.Token())
	}
	if err := b.Refresh(ctx, time.Second); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	mustRelease(t, b)

	r1 := mustObtain(t, c, ctx, "r", ttl, lock.ObtainOptions{Owner: "me"})
	r2 := mustObtain(t, c, ctx, "r", ttl, lock.ObtainOptions{Owner: "me"})
	mustRelease(t, r2)
	mustRelease(t, r1)
	if err := r1.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("extra release: got %v, want ErrNotHeld", err)
	}

	f := mustObtain(t, c, ctx, "f", 300*time.Millisecond, lock.ObtainOptions{Fixed: true})
	<-f.Done()
	if err := f.Release(ctx); !errors.Is(err, lock.ErrLockLost) {
		t.Fatalf("release after expiry: got %v, want ErrLockLost", err)
	}
	for _, k := range m.Keys() {
		if m.TTL(k) <= 0 {
			t.Errorf("miniredis key %q has no TTL", k)
		}
	}
}
