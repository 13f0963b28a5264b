package lock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

func TestMain(m *testing.M) {
	// The tests wait (for leases and waiting records to run out, on paused
	// and killed servers and child processes) far more than they compute,
	// and each has its own keys: with go test's default, on a 2-core
	// machine, the package took 55 s of the short tier, its waits queued
	// two by two. The flash crowds, which bring their own load, run alone.
	testkit.ParallelAtLeast(8)
	// go-redis dials a killed server from goroutines of its pool (tryDial
	// polls for the pool's closing once a second; queuedNewConn may still be
	// handing back its turn when the test ends); they are not ours.
	redis.SetLogger(quietDials{})
	goleak.VerifyTestMain(m, ignoreEmbeddedRedis, ignoreEmbeddedReader,
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).queuedNewConn.func2"))
}

// quietDials drops go-redis's log line for each failed dial, which the
// tests that kill servers would print by the thousand, and keeps the rest.
type quietDials struct{}

func (quietDials) Printf(_ context.Context, format string, v ...any) {
	if line := fmt.Sprintf(format, v...); !strings.Contains(line, "failed to dial") {
		fmt.Fprintln(os.Stderr, "redis:", line)
	}
}

// ignoreEmbeddedRedis leaves out the goroutines of the in-process Redis
// that testenv starts when no other is at hand: they serve connections,
// and are not the lock's.
var ignoreEmbeddedRedis = goleak.IgnoreAnyFunction("github.com/alicebob/miniredis/v2/server.(*Server).servePeer")

// ignoreEmbeddedReader is the reader each of those connections starts.
var ignoreEmbeddedReader = goleak.IgnoreAnyFunction("github.com/alicebob/miniredis/v2/server.(*Server).servePeer.func2")

// examplePrefix is the key prefix of this process's examples; they run one
// at a time, and each deletes its keys.
var examplePrefix = "example-" + randHex(4) + ":"

// exampleRedis returns a client for an example: database db of the test
// Redis, or, when there is none (and CI is not "true"), a Redis in this
// process, so that the examples run everywhere; the examples' key prefix;
// and a cleanup that deletes the example's keys and closes the client.
func exampleRedis(db int) (*redis.Client, string, func()) {
	addr := os.Getenv("SECKILL_TEST_REDIS_ADDR")
	var stop func()
	if addr == "" && os.Getenv("CI") != "true" {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true)
		if err := m.Start(); err != nil {
			panic(err)
		}
		addr, stop = m.Addr(), m.Close
	}
	rdb := redis.NewClient(lock.ClientOptions(&redis.Options{Addr: addr, DB: db}))
	return rdb, examplePrefix, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if keys, err := scanKeys(ctx, rdb, examplePrefix); err == nil && len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
		_ = rdb.Close()
		if stop != nil {
			stop()
		}
	}
}

// testRedis returns a client for SECKILL_TEST_REDIS_ADDR.
func testRedis(t testing.TB) *redis.Client {
	t.Helper()
	// SECKILL_TEST_REDIS_ADDR, else a container where Docker answers, else
	// (outside CI) an embedded Redis: see internal/testenv.
	addr := testenv.RedisAddr(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		testenv.Unavailable(t, "Redis at %s is unreachable: %v", addr, err)
	}
	t.Cleanup(func() {
		if err := rdb.Close(); err != nil {
			t.Errorf("close redis client: %v", err)
		}
	})
	return rdb
}

// sameRedis is the environment of a child test process that must use
// rdb's server: without it a child whose parent fell back to a container
// or an embedded Redis would start a Redis of its own, and the two
// processes would never contend.
func sameRedis(rdb *redis.Client) []string {
	return append(os.Environ(), "SECKILL_TEST_REDIS_ADDR="+rdb.Options().Addr)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// testPrefix returns a key prefix of this test's own and deletes every key
// under it when the test ends.
func testPrefix(t testing.TB, rdbs ...redis.UniversalClient) string {
	t.Helper()
	prefix := "locktest:" + randHex(6) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, rdb := range rdbs {
			keys, err := scanKeys(ctx, rdb, prefix)
			if err != nil {
				continue // the server may have been killed by the test
			}
			for _, k := range keys {
				rdb.Del(ctx, k)
			}
		}
	})
	return prefix
}

func scanKeys(ctx context.Context, rdb redis.UniversalClient, prefix string) ([]string, error) {
	var keys []string
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for it.Next(ctx) {
			keys = append(keys, it.Val())
		}
		return it.Err()
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		var mu = make(chan struct{}, 1)
		return keys, cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			mu <- struct{}{}
			defer func() { <-mu }()
			return scan(ctx, c)
		})
	}
	return keys, scan(ctx, rdb.(*redis.Client))
}

// lockKey is the Redis key of a lock, as the package names it.
func lockKey(prefix, key string) string { return prefix + "{" + key + "}" }

// fenceKey is the Redis key of a lock's fence record (its last token).
func fenceKey(prefix, key string) string { return lockKey(prefix, key) + ":fence" }

// isHeld reads the lock's record: "owner|token|holds" while held, and
// absent once released ("|token|0" in versions before the fence record).
func isHeld(t testing.TB, rdb redis.UniversalClient, prefix, key string) bool {
	t.Helper()
	v, err := rdb.Get(context.Background(), lockKey(prefix, key)).Result()
	if err == redis.Nil {
		return false
	}
	if err != nil {
		t.Fatalf("read lock %q: %v", key, err)
	}
	return !strings.HasPrefix(v, "|")
}

// redlockClient returns a client of the redis-server at addr, set up as a
// RedLock instance's (lock.InstanceOptions) with the lock tests' timeouts,
// closed when the test ends; tune adjusts its options.
// patientClient tunes a redlockClient to dial, read and write for seconds:
// for tests whose timeouts only bound a hang, where a starved machine
// must not turn a refusal or an answer into a timeout.
func patientClient(o *redis.Options) {
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 5*time.Second, 5*time.Second, 5*time.Second
}

func redlockClient(t testing.TB, addr string, tune ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{
		Addr:         addr,
		DialTimeout:  200 * time.Millisecond,
		ReadTimeout:  500 * time.Millisecond,
		WriteTimeout: 500 * time.Millisecond,
	}
	for _, f := range tune {
		f(o)
	}
	rdb := redis.NewClient(lock.InstanceOptions(o))
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// crowd releases n goroutines at once on key, goroutine g through
// lockers[g%len(lockers)]: each obtains the lock with ttl, waiting up to
// wait, notes whether another was inside with it, and releases it. It
// returns how many obtained the lock, how many found another inside, and
// the errors of the obtains that failed.
func crowd(t *testing.T, n int, key string, ttl, wait time.Duration, lockers ...lock.Locker) (got, overlaps int, failures []string) {
	t.Helper()
	start := make(chan struct{})
	var inside, gotN, overlapsN atomic.Int32
	var wg sync.WaitGroup
	var mu sync.Mutex
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			l, err := lockers[g%len(lockers)].Obtain(context.Background(), key, ttl, lock.ObtainOptions{Wait: wait})
			if err != nil {
				mu.Lock()
				failures = append(failures, err.Error())
				mu.Unlock()
				return
			}
			if inside.Add(1) != 1 {
				overlapsN.Add(1)
			}
			inside.Add(-1)
			gotN.Add(1)
			if err := l.Release(context.Background()); err != nil {
				t.Errorf("release: %v", err)
			}
		}()
	}
	close(start)
	wg.Wait()
	return int(gotN.Load()), int(overlapsN.Load()), failures
}

// replyHook is a redis.Hook that calls itself with every command once its
// reply is in, on the client it is added to.
type replyHook func(cmd redis.Cmder, err error)

func (h replyHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h replyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h replyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h(cmd, err)
		return err
	}
}
