package embedded

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/testkit"
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

// spin is Lua that keeps the server busy for far longer than a millisecond
// (half a million loop turns), without a call that could read the clock.
const spin = `local i = 0 while i < 500000 do i = i + 1 end `

// TestTimeStandsStillInACommand: a key that a script set, or read, with a
// 1ms TTL is still there, with the same TTL, at the script's last call,
// however long the script ran; so in a MULTI block. Redis 7 freezes the
// clock for a command. The lock's scripts rely on it: before the server
// did, obtain.lua read a held lock, found it expired one call later, and
// granted it to a second owner.
func TestTimeStandsStillInACommand(t *testing.T) {
	r, err := StartRedis("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer c.Close()
	ctx := context.Background()

	got, err := c.Eval(ctx, `redis.call('SET', KEYS[1], 'v', 'PX', 1) `+spin+
		`return {redis.call('EXISTS', KEYS[1]), redis.call('PTTL', KEYS[1])}`, []string{"script"}).Int64Slice()
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != 1 || got[1] != 1 {
		t.Errorf("script: EXISTS, PTTL after a long run = %v; want [1 1]: the key aged inside one script", got)
	}

	var pttl *redis.DurationCmd
	if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "multi", "v", time.Millisecond)
		p.Eval(ctx, spin+`return 1`, nil)
		pttl = p.PTTL(ctx, "multi")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if pttl.Val() != time.Millisecond {
		t.Errorf("MULTI: PTTL after a long run = %v; want 1ms: the key aged inside one transaction", pttl.Val())
	}

	// Between commands the clock runs: the key is gone once its TTL passed.
	if !testkit.Poll(5*time.Second, func() bool { n, err := c.Exists(ctx, "script").Result(); return err == nil && n == 0 }) {
		t.Error("the key set by the script never expired: the clock stopped for good")
	}
}

// A script on a server from StartRedis reads the clock with TIME (the
// Redis stages check the sale window so): the process's own clock, as of
// the start of the script's command, never earlier than the command was
// sent nor later than its answer came.
func TestScriptsReadTheProcessClock(t *testing.T) {
	r, err := StartRedis("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer c.Close()
	clock := redis.NewScript(`local t = redis.call('TIME') return {t[1], t[2]}`)
	for range 3 {
		sent := time.Now()
		v, err := clock.Run(context.Background(), c, nil).StringSlice()
		answered := time.Now()
		if err != nil || len(v) != 2 {
			t.Fatalf("TIME in a script: %v, %v", v, err)
		}
		sec, err1 := strconv.ParseInt(v[0], 10, 64)
		usec, err2 := strconv.ParseInt(v[1], 10, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("TIME in a script said %v", v)
		}
		at := time.Unix(sec, usec*1000)
		if at.Before(sent.Truncate(time.Microsecond)) || at.After(answered) {
			t.Fatalf("TIME in a script said %v; the command was sent at %v and answered at %v", at, sent, answered)
		}
	}
}
