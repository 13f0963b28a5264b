package embedded

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// expiryAges sets keys with ttl, each at a different point of the ageing
// tick, and returns how long each lived, measured from before its SET was
// sent (the server cannot have started the TTL earlier than that) to the
// first EXISTS that no longer found it.
func expiryAges(t *testing.T, r *Redis, ttl time.Duration) []time.Duration {
	t.Helper()
	defer r.Close()
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer c.Close()
	ctx := context.Background()
	var ages []time.Duration
	for i := range 12 {
		// Spread the SETs over the tick, where an overcharge would show.
		time.Sleep(time.Duration(i) * Tick / 12)
		sent := time.Now()
		if err := c.Set(ctx, "k", "v", ttl).Err(); err != nil {
			t.Fatal(err)
		}
		for {
			n, err := c.Exists(ctx, "k").Result()
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			if time.Since(sent) > 5*time.Second {
				t.Fatal("the key never expired")
			}
			time.Sleep(time.Millisecond)
		}
		ages = append(ages, time.Since(sent))
	}
	return ages
}

// A server from StartRedis expires a key once its TTL has passed on the
// wall clock, and never before, wherever in time the key was set.
func TestKeysExpireInRealTime(t *testing.T) {
	r, err := StartRedis("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 60 * time.Millisecond
	for i, age := range expiryAges(t, r, ttl) {
		if age < ttl {
			t.Errorf("key %d expired early, %v after its SET was sent (ttl %v)", i, age, ttl)
		}
	}
}

// TestLateTickDoesNotExpireKeysEarly: when the ageing goroutine runs late
// (a busy machine), a key set just before the late tick is not charged for
// the time before it existed. The ticks are delivered by hand: a key with a
// 60ms TTL is set, then a tick arrives that is 500ms after the previous one.
func TestLateTickDoesNotExpireKeysEarly(t *testing.T) {
	ticks := make(chan time.Time)
	r, err := startRecords("127.0.0.1:0", ticks)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer c.Close()
	ctx := context.Background()
	start := time.Now()
	if err := c.Set(ctx, "fresh", "v", 60*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	ticks <- start.Add(500 * time.Millisecond) // one tick, very late
	ticks <- start.Add(500 * time.Millisecond) // the previous one was applied
	ttl, err := c.PTTL(ctx, "fresh").Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl < 60*time.Millisecond-Tick {
		t.Fatalf("a late tick charged a fresh key %v: its TTL is %v, want at most one Tick (%v) less than 60ms", 60*time.Millisecond-ttl, ttl, Tick)
	}
}

// A server from StartRedisForRecords keeps the bound it documents: a key
// expires at most one Tick before its TTL.
func TestRecordsExpireWithinATick(t *testing.T) {
	r, err := StartRedisForRecords("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 60 * time.Millisecond
	for i, age := range expiryAges(t, r, ttl) {
		if age < ttl-Tick {
			t.Errorf("key %d expired %v after its SET was sent, more than a Tick (%v) before its ttl %v", i, age, Tick, ttl)
		}
	}
}
