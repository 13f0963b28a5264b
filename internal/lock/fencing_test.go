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

// Fencing tokens across server clocks that step back and leases held past
// the fence record's TTL, on a miniredis whose clock the test moves.

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
