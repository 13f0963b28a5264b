package lock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/lock"
)

// The zero-set-up demo runs the lock on miniredis with real-time TTLs; the
// scripts must work on its Lua engine too.
func TestMiniredis(t *testing.T) {
	t.Parallel()
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

// thawedRedis is a miniredis whose TTLs run on the wall clock even while a
// script runs (ClockTTL alone: what the demo's in-process server did until
// it froze time per command). Redis freezes the clock for a script, so a key
// a script has read stays there until the script ends; here it can expire
// between two of the script's calls. stall forces that: it holds the
// script before its next call of one command for longer than any key the
// test set can live.
type thawedRedis struct {
	rdb *redis.Client

	mu    sync.Mutex
	cmd   string        // the command to hold a script before, "" for none
	nap   time.Duration // how long
	fired chan struct{} // closed once the hold is over
}

func newThawedRedis(t *testing.T) *thawedRedis {
	t.Helper()
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	if err := m.Start(); err != nil {
		t.Fatalf("start miniredis: %v", err)
	}
	t.Cleanup(m.Close)
	s := &thawedRedis{rdb: redis.NewClient(&redis.Options{Addr: m.Addr()})}
	t.Cleanup(func() { _ = s.rdb.Close() })
	// The hook runs before every command, a script's own calls included
	// (miniredis dispatches them like a client's).
	m.Server().SetPreHook(func(_ *server.Peer, cmd string, _ ...string) bool {
		s.mu.Lock()
		if s.cmd != cmd {
			s.mu.Unlock()
			return false
		}
		nap, fired := s.nap, s.fired
		s.cmd = ""
		s.mu.Unlock()
		time.Sleep(nap)
		close(fired)
		return false
	})
	return s
}

// stall holds the next call of cmd for nap and returns a channel closed
// when that hold is over.
func (s *thawedRedis) stall(cmd string, nap time.Duration) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cmd, s.nap, s.fired = cmd, nap, make(chan struct{})
	return s.fired
}

// TestScriptsOnAServerWhoseClockRunsInScripts: each lock script reads the
// lock, is held (by the hook) until the lock's TTL has run out, and goes on.
// Whatever it then answers, it must not grant a lock nobody holds, extend a
// lease that is gone, or write back a lock with no expiry. Seen in the demo
// and in tests on the in-process Redis beside CPU hogs: obtain.lua answered
// -1 - PTTL with PTTL = -2, that is +1, and the client took it for a grant of
// token 1 while another client could obtain the same key.
func TestScriptsOnAServerWhoseClockRunsInScripts(t *testing.T) {
	ctx := context.Background()
	const fenceTTL = "600000"
	for _, c := range []struct {
		name  string
		held  string // the lock's value before the script runs
		stall string // the command the script is held before
		run   func(rdb *redis.Client, lockKey, fenceKey string) (int64, error)
		// ok judges the reply; fresh reports a reply that shows the script
		// found no lock at all (the set-up was too slow), to try again.
		ok    func(reply int64) bool
		fresh func(reply int64) bool
		want  string
	}{
		{
			name: "obtain while another owner holds it", held: "other|5|1", stall: "PTTL",
			run: func(rdb *redis.Client, l, f string) (int64, error) {
				return lock.RunScript(ctx, rdb, "obtain", []string{l, f, l + ":waiting"}, "me", "60000", "0", "0", fenceTTL, "3000")
			},
			ok: func(r int64) bool { return r <= -1 }, fresh: isFreshToken,
			want: "a refusal (<= -1): the lock was held when the script read it",
		},
		{
			name: "obtain and wait while another owner holds it", held: "other|5|1", stall: "SET",
			run: func(rdb *redis.Client, l, f string) (int64, error) {
				return lock.RunScript(ctx, rdb, "obtain", []string{l, f, l + ":waiting"}, "me", "60000", "0", "1", fenceTTL, "3000")
			},
			ok: func(r int64) bool { return r <= -1 }, fresh: isFreshToken,
			want: "a refusal (<= -1)",
		},
		{
			name: "re-enter a hold of its own", held: "me|5|1", stall: "PTTL",
			run: func(rdb *redis.Client, l, f string) (int64, error) {
				return lock.RunScript(ctx, rdb, "obtain", []string{l, f, l + ":waiting"}, "me", "60000", "1", "0", fenceTTL, "3000")
			},
			ok: func(r int64) bool { return r <= -1 }, fresh: isFreshToken,
			want: "a refusal (<= -1): the hold it would add to had expired",
		},
		{
			name: "fair obtain and wait while another owner holds it", held: "other|5|1", stall: "PTTL",
			run: func(rdb *redis.Client, l, f string) (int64, error) {
				return lock.RunScript(ctx, rdb, "fair-obtain", fairKeys(l, f), "me", "60000", "0", "1", fenceTTL, "3000", "w-me", "3000")
			},
			ok: func(r int64) bool { return r <= -1 }, fresh: isFreshToken,
			want: "a refusal (<= -1): the lock was held when the script read it",
		},
		{
			name: "fair re-entry of a hold of its own", held: "me|5|1", stall: "PTTL",
			run: func(rdb *redis.Client, l, f string) (int64, error) {
				return lock.RunScript(ctx, rdb, "fair-obtain", fairKeys(l, f), "me", "60000", "1", "1", fenceTTL, "3000", "w-me", "3000")
			},
			ok: func(r int64) bool { return r <= -1 }, fresh: isFreshToken,
			want: "a refusal (<= -1): the hold it would add to had expired",
		},
		{
			name: "refresh", held: "me|5|1", stall: "PEXPIRE",
			run: func(rdb *redis.Client, l, f string) (int64, error) {
				return lock.RunScript(ctx, rdb, "refresh", []string{l, f}, "me", "5", "60000", fenceTTL)
			},
			ok:   func(r int64) bool { return r == 0 },
			want: "0 (not extended): the lease had expired",
		},
		{
			name: "release one of two holds", held: "me|5|2", stall: "SET",
			run: func(rdb *redis.Client, l, f string) (int64, error) {
				return lock.RunScript(ctx, rdb, "release", []string{l, l + ":waiting"}, "me", "5")
			},
			ok:   func(r int64) bool { return r == -1 },
			want: "-1 (not the owner any more): the lease had expired",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newThawedRedis(t)
			// The lock lives for ttl and the script is held for longer, so the
			// lock is gone when the script goes on. If setting up took longer
			// than ttl, the script found no lock and the hold proves nothing:
			// then try again with a longer ttl. The first is short (each try
			// holds a script for 1.5 ttl, and the test runs alone); a slow
			// machine pays a try or two more.
			for ttl := 100 * time.Millisecond; ; ttl *= 2 {
				if ttl > 16*time.Second {
					t.Fatal("the script never found the lock: the set-up never took less than its TTL")
				}
				lockKey, fenceKey := "lock:"+ttl.String(), "fence:"+ttl.String()
				if err := s.rdb.Set(ctx, lockKey, c.held, ttl).Err(); err != nil {
					t.Fatal(err)
				}
				if err := s.rdb.Set(ctx, fenceKey, "5", time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				fired := s.stall(c.stall, ttl+ttl/2)
				reply, err := c.run(s.rdb, lockKey, fenceKey)
				if err != nil {
					t.Fatalf("script: %v", err)
				}
				select {
				case <-fired:
				default:
					continue // the script never reached the stalled call: it found no lock
				}
				if c.fresh != nil && c.fresh(reply) {
					continue
				}
				if !c.ok(reply) {
					t.Errorf("reply %d; want %s", reply, c.want)
				}
				pttl, err := s.rdb.PTTL(ctx, lockKey).Result()
				if err != nil {
					t.Fatal(err)
				}
				if pttl == -1 {
					v, _ := s.rdb.Get(ctx, lockKey).Result()
					t.Errorf("the script wrote the lock back with no expiry (%q): nobody can obtain it, ever", v)
				}
				return
			}
		})
	}
}

// isFreshToken reports a grant the obtain script made because it found no
// lock: its token is the server's clock in microseconds, far above 5.
func isFreshToken(reply int64) bool { return reply > 1_000_000 }

// fairKeys are the fair obtain script's keys for lock l with fence f.
func fairKeys(l, f string) []string {
	return []string{l, f, l + ":waiting", l + ":queue", l + ":queue:until", l + ":gone:me"}
}
