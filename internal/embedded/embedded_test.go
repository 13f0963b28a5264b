package embedded

import (
	"context"
	"strconv"
	"sync"
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

// handClock is a clock the test moves by hand.
type handClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *handClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *handClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// handTicks starts a records server whose ticks and clock the test drives:
// tick(at, value) sets the clock to at, delivers a tick whose own time is
// value, and returns once it has been applied.
func handTicks(t *testing.T, start time.Time) (*Redis, *redis.Client, func(at, value time.Time)) {
	t.Helper()
	clock := &handClock{now: start}
	ticks := make(chan time.Time)
	r, err := startRecords("127.0.0.1:0", ticks, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return r, c, func(at, value time.Time) {
		clock.Set(at)
		ticks <- value
		ticks <- value // taken only once the previous one was applied; the clock has not moved
	}
}

// TestLateTickDoesNotExpireKeysEarly: when the ageing goroutine runs late
// (a busy machine), a key set just before the late tick is not charged for
// the time before it existed: a key with a 60ms TTL is set, then a tick is
// taken 500ms after the previous one.
func TestLateTickDoesNotExpireKeysEarly(t *testing.T) {
	start := time.Now()
	_, c, tick := handTicks(t, start)
	ctx := context.Background()
	if err := c.Set(ctx, "fresh", "v", 60*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	tick(start.Add(500*time.Millisecond), start.Add(500*time.Millisecond)) // one tick, very late
	ttl, err := c.PTTL(ctx, "fresh").Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl < 60*time.Millisecond-Tick {
		t.Fatalf("a late tick charged a fresh key %v: its TTL is %v, want at most one Tick (%v) less than 60ms", 60*time.Millisecond-ttl, ttl, Tick)
	}
}

// TestTicksThatWaitedInTheChannelChargeAKeyAtMostOneTick: the ticker sends
// a tick at 25ms while the ageing goroutine is busy, a key with a 60ms TTL
// is set at 49ms, and the goroutine takes the waiting tick at 50ms, the
// next (sent at 50ms) at once, and then one every 25ms. Ageing by the
// ticks' own times charged the key 25ms for each of the first two and so
// expired it 26ms after it was set, 34ms early; make stress saw 29ms. By
// the time the goroutine reads when it takes a tick, a key is never gone
// more than one Tick before its TTL.
func TestTicksThatWaitedInTheChannelChargeAKeyAtMostOneTick(t *testing.T) {
	start := time.Now()
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	_, c, tick := handTicks(t, start)
	ctx := context.Background()
	const ttl = 60 * time.Millisecond
	set := at(49)
	if err := c.Set(ctx, "k", "v", ttl).Err(); err != nil {
		t.Fatal(err)
	}
	// (taken at, sent at): the tick of 25ms waited, the one of 50ms is
	// taken at once after it, then the ticker and the goroutine agree.
	steps := [][2]int{{50, 25}, {51, 50}, {75, 75}, {100, 100}, {125, 125}, {150, 150}}
	for _, st := range steps {
		tick(at(st[0]), at(st[1]))
		n, err := c.Exists(ctx, "k").Result()
		if err != nil {
			t.Fatal(err)
		}
		age := at(st[0]).Sub(set)
		if n == 0 && age < ttl-Tick {
			t.Fatalf("the key expired %v after it was set, more than a Tick (%v) before its TTL %v", age, Tick, ttl)
		}
		if n == 1 && age >= ttl+Tick {
			t.Fatalf("the key still lives %v after it was set, with a TTL of %v", age, ttl)
		}
	}
	if n, _ := c.Exists(ctx, "k").Result(); n != 0 {
		t.Fatal("the key never expired")
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
