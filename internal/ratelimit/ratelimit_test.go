package ratelimit_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/embedded"
	"github.com/seckill-lab/seckill/internal/ratelimit"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// An interval no test outlives: what a test sees of the sustained rate is
// only what it forces by moving a key's state (see elapse).
const hour = time.Hour

// fleet returns n limiters, each on its own client of the Redis at addr,
// as n instances would have, sharing one prefix, which it returns too.
func fleet(t *testing.T, addr string, n, burst int) ([]*ratelimit.Limiter, string) {
	t.Helper()
	prefix := testenv.Name("rl") + ":"
	var out []*ratelimit.Limiter
	for range n {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		l, err := ratelimit.New(c, ratelimit.Options{Interval: hour, Burst: burst, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out, prefix
}

// burstAt fires n requests of key at once (a barrier releases them)
// spread over the limiters, and returns how many were allowed and the
// refusals.
func burstAt(t *testing.T, ls []*ratelimit.Limiter, key string, n int) (allowed int, refused []*ratelimit.Limited) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			err := ls[i%len(ls)].Allow(context.Background(), key)
			mu.Lock()
			defer mu.Unlock()
			var lim *ratelimit.Limited
			switch {
			case err == nil:
				allowed++
			case errors.As(err, &lim) && errors.Is(err, ratelimit.ErrLimited):
				refused = append(refused, lim)
			default:
				t.Errorf("Allow: %v", err)
			}
		}()
	}
	close(start)
	wg.Wait()
	return allowed, refused
}

// TestBurstIsSharedAcrossTheFleet: 60 requests of one account at once,
// through three instances, get exactly the burst of 5 between them; each
// refusal says when to come back, within one interval per request ahead.
func TestBurstIsSharedAcrossTheFleet(t *testing.T) {
	ls, _ := fleet(t, testenv.RedisAddr(t), 3, 5)
	allowed, refused := burstAt(t, ls, "acct:scalper", 60)
	if allowed != 5 || len(refused) != 55 {
		t.Fatalf("allowed %d, refused %d; want the burst, 5, and 55 refused", allowed, len(refused))
	}
	for _, r := range refused {
		if r.Wait <= 0 || r.Wait > hour || r.Key != "acct:scalper" {
			t.Fatalf("refusal %+v: want a wait in (0, one interval] for acct:scalper", r)
		}
	}
	if allowed, _ := burstAt(t, ls, "acct:someone-else", 3); allowed != 3 {
		t.Errorf("another account got %d of 3; keys must not share a limit", allowed)
	}
}

// TestRefusalsDoNotPushTheLimitBack: a refused request costs its key
// nothing. After the burst and 20 refusals, one interval of the key's
// time passing (forced by moving its state back) lets exactly one more
// request through, as if the refusals had never been sent.
func TestRefusalsDoNotPushTheLimitBack(t *testing.T) {
	addr := testenv.RedisAddr(t)
	ls, prefix := fleet(t, addr, 1, 2)
	if allowed, refused := burstAt(t, ls, "acct:a", 22); allowed != 2 || len(refused) != 20 {
		t.Fatalf("allowed %d, refused %d; want 2 and 20", allowed, len(refused))
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	elapse(t, c, prefix+"acct:a", hour)
	if allowed, _ := burstAt(t, ls, "acct:a", 5); allowed != 1 {
		t.Errorf("after one interval, %d of 5 were allowed; want exactly 1", allowed)
	}
}

// elapse moves the state stored at key back by d, as if d had passed on
// the Redis clock.
func elapse(t *testing.T, c *redis.Client, key string, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	v, err := c.Get(ctx, key).Int64()
	if err != nil {
		t.Fatalf("no state at %s: %v", key, err)
	}
	if err := c.Set(ctx, key, strconv.FormatInt(v-d.Microseconds(), 10), 3*hour).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestEmbeddedRedisRunsTheScript: the demo's in-process Redis runs the
// limiter too (its scripts can read TIME).
func TestEmbeddedRedisRunsTheScript(t *testing.T) {
	r, err := embedded.StartRedis("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ls, _ := fleet(t, r.Addr(), 2, 3)
	if allowed, refused := burstAt(t, ls, "acct:demo", 10); allowed != 3 || len(refused) != 7 {
		t.Fatalf("allowed %d, refused %d on the embedded Redis; want 3 and 7", allowed, len(refused))
	}
}

func TestNewRefusesNonsense(t *testing.T) {
	for _, o := range []ratelimit.Options{{Interval: 0, Burst: 1}, {Interval: time.Second, Burst: 0}, {Interval: time.Nanosecond, Burst: 3}} {
		if _, err := ratelimit.New(nil, o); err == nil {
			t.Errorf("New(%+v) accepted it", o)
		}
	}
}
