package lock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// The heavy tests run with SECKILL_LOCK_HEAVY=1 (make test-lock-heavy).

func heavy(t *testing.T) {
	t.Helper()
	if os.Getenv("SECKILL_LOCK_HEAVY") != "1" && os.Getenv(childEnv) == "" {
		t.Skip("heavy test: set SECKILL_LOCK_HEAVY=1 (make test-lock-heavy)")
	}
}

const (
	childEnv       = "SECKILL_LOCK_CHILD" // "prefix sections goroutines"
	heavyProcs     = 4
	heavyGoroutine = 16
	heavySections  = 20000
)

// enterScript and leaveScript bracket a critical section on a shared record
// that every process writes, the way a fenced store would: entering while
// someone else is inside is an overlap; a token not above the last one is
// stale.
var (
	enterScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'busy') == '1' then
  redis.call('HINCRBY', KEYS[1], 'overlaps', 1)
end
redis.call('HSET', KEYS[1], 'busy', '1')
local last = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
if tonumber(ARGV[1]) <= last then
  redis.call('HINCRBY', KEYS[1], 'stale', 1)
end
redis.call('HSET', KEYS[1], 'token', ARGV[1])
redis.call('PEXPIRE', KEYS[1], 600000)
return 1`)
	leaveScript = redis.NewScript(`
redis.call('HSET', KEYS[1], 'busy', '0')
return redis.call('HINCRBY', KEYS[1], 'sections', 1)`)
)

// Mutual exclusion across processes: 4 processes (this test binary,
// re-executed) x 16 goroutines run 20,000 critical sections on one key.
func TestHeavyMutualExclusion(t *testing.T) {
	heavy(t)
	rdb := testRedis(t)
	if spec := os.Getenv(childEnv); spec != "" {
		runChild(t, rdb, spec)
		return
	}
	prefix := testPrefix(t, rdb)
	per := heavySections / heavyProcs
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, heavyProcs)
	for range heavyProcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^TestHeavyMutualExclusion$", "-test.count=1")
			cmd.Env = append(sameRedis(rdb), fmt.Sprintf("%s=%s %d %d", childEnv, prefix, per, heavyGoroutine))
			if out, err := cmd.CombinedOutput(); err != nil {
				errs <- fmt.Errorf("child: %v\n%s", err, out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	res := rdb.HGetAll(context.Background(), prefix+"guard").Val()
	for _, f := range []string{"sections", "overlaps", "stale"} {
		if res[f] == "" {
			res[f] = "0"
		}
	}
	t.Logf("%d processes x %d goroutines: %s sections in %v, %s overlaps, %s stale tokens",
		heavyProcs, heavyGoroutine, res["sections"], time.Since(start).Round(time.Millisecond), res["overlaps"], res["stale"])
	if res["sections"] != strconv.Itoa(heavySections) {
		t.Errorf("sections = %q, want %d", res["sections"], heavySections)
	}
	if n := res["overlaps"]; n != "0" {
		t.Errorf("%s overlapping critical sections", n)
	}
	if n := res["stale"]; n != "0" {
		t.Errorf("%s tokens not above their predecessor", n)
	}
}

func runChild(t *testing.T, rdb *redis.Client, spec string) {
	var prefix string
	var sections, goroutines int
	if _, err := fmt.Sscanf(spec, "%s %d %d", &prefix, &sections, &goroutines); err != nil {
		t.Fatalf("bad %s %q: %v", childEnv, spec, err)
	}
	c := mustNew(t, rdb, lock.Options{Prefix: prefix})
	defer func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}()
	guard := []string{prefix + "guard"}
	ctx := context.Background()
	var tickets atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tickets.Add(1) <= int64(sections) {
				l, err := c.Obtain(ctx, "hot", time.Second, lock.ObtainOptions{Wait: time.Minute})
				if err != nil {
					t.Errorf("obtain: %v", err)
					return
				}
				if err := enterScript.Run(ctx, rdb, guard, l.Token()).Err(); err != nil {
					t.Errorf("enter: %v", err)
				}
				if err := leaveScript.Run(ctx, rdb, guard).Err(); err != nil {
					t.Errorf("leave: %v", err)
				}
				if err := l.Release(ctx); err != nil {
					t.Errorf("release: %v", err)
				}
			}
		}()
	}
	wg.Wait()
}

// Every script runs on a 3-master Redis Cluster without CROSSSLOT errors.
func TestHeavyCluster(t *testing.T) {
	heavy(t)
	addrs := testenv.StartRedisCluster(t)
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRedirects: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	testkit.Eventually(t, "the cluster client to see 3 masters", 30*time.Second, func() bool {
		return len(rdb.ClusterSlots(ctx).Val()) == 3
	})
	prefix := testPrefix(t, rdb)
	c, _ := newClient(t, rdb, lock.Options{Prefix: prefix})

	check := func(what string, err error) {
		t.Helper()
		if err != nil { // a CROSSSLOT error would land here
			t.Fatalf("%s: %v", what, err)
		}
	}
	slots := map[int64]bool{}
	for i := range 30 {
		key := fmt.Sprintf("sku-%d", i)
		slots[rdb.ClusterKeySlot(ctx, lockKey(prefix, key)).Val()] = true
		a, err := c.Obtain(ctx, key, time.Second, lock.ObtainOptions{Owner: "o"})
		check("obtain", err)
		b, err := c.Obtain(ctx, key, time.Second, lock.ObtainOptions{Owner: "o"})
		check("re-enter", err)
		check("refresh", a.Refresh(ctx, 2*time.Second))
		check("release inner", b.Release(ctx))
		check("release outer", a.Release(ctx))
	}
	if len(slots) < 10 {
		t.Fatalf("keys landed in only %d slots", len(slots))
	}

	// The watchdog renews on the cluster for three TTLs. Each renewal has
	// TTL/3 to answer: at 150ms a busy machine lost the lease (CI beside CPU
	// hogs), which the lease rightly reported.
	const ttl = 2 * time.Second
	w, err := c.Obtain(ctx, "watched", ttl, lock.ObtainOptions{})
	check("obtain watched", err)
	select {
	case <-time.After(3 * ttl):
	case <-w.Done():
		t.Fatalf("lease lost on the cluster: %v", w.Err())
	}
	check("release watched", w.Release(ctx))

	// Waiting and handoff through pub/sub on the cluster.
	holder, err := c.Obtain(ctx, "hot", time.Minute, lock.ObtainOptions{})
	check("obtain hot", err)
	got := make(chan error)
	go func() {
		l, err := c.Obtain(ctx, "hot", time.Second, lock.ObtainOptions{Wait: 30 * time.Second})
		if err == nil {
			if l.Token() <= holder.Token() {
				err = errors.New("token did not increase")
			}
			if rerr := l.Release(ctx); err == nil {
				err = rerr
			}
		}
		got <- err
	}()
	// A renewal cycle under the watchdog, then the handoff.
	testkit.Eventually(t, "the waiter to subscribe", 5*time.Second, func() bool {
		n := 0
		for _, a := range addrs {
			node := redis.NewClient(&redis.Options{Addr: a})
			n += len(node.PubSubChannels(ctx, "*{hot}:wake").Val())
			_ = node.Close()
		}
		return n > 0
	})
	check("release hot", holder.Release(ctx))
	check("waiter", <-got)
}
