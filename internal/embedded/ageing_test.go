package embedded

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/testkit"
)

// allocatedBy is how many bytes the process allocated while f ran.
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A command on a StartRedis server does not visit the keys that have no
// TTL: an item's stock copy or stream must not make every other command
// dearer. Visiting them (miniredis's ClockTTL lists and sorts every key on
// every command) allocates at least a string header per key per command,
// 16 bytes; the test allows a quarter of that beside 20,000 keys, and
// compares with the same commands on an empty server.
func TestACommandDoesNotVisitTheKeysWithoutATTL(t *testing.T) {
	const keys, commands = 20_000, 20
	perCommand := func(n int) uint64 {
		r, err := StartRedis("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		c := redis.NewClient(&redis.Options{Addr: r.Addr(), ReadTimeout: time.Minute})
		defer c.Close()
		ctx := context.Background()
		if n > 0 {
			kv := make([]any, 0, 2*n)
			for i := range n {
				kv = append(kv, "seckill:{product:"+strconv.Itoa(i)+"}:stock", "100")
			}
			if err := c.MSet(ctx, kv...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Set(ctx, "lock", "token", time.Minute).Err(); err != nil {
			t.Fatal(err) // one key with a TTL, which is aged
		}
		return allocatedBy(func() {
			for range commands {
				if err := c.Get(ctx, "seckill:{product:1}:stock").Err(); err != nil && err != redis.Nil {
					t.Fatal(err)
				}
			}
		}) / commands
	}
	empty, full := perCommand(0), perCommand(keys)
	if full > empty+keys*4 {
		t.Fatalf("a GET beside %d keys without a TTL allocated %d bytes, %d on an empty server: the ageing visits every key", keys, full, empty)
	}
}

// A lock's watchdog refreshes its key's TTL before it runs out: the key
// then lives for the refreshed TTL from the refresh, and runs out after it.
func TestARefreshedKeyLivesFromItsRefresh(t *testing.T) {
	r, err := StartRedis("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer c.Close()
	ctx := context.Background()
	const ttl = 80 * time.Millisecond
	if err := c.Set(ctx, "lock", "token", ttl).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl / 2)
	refreshed := time.Now()
	if ok, err := c.PExpire(ctx, "lock", ttl).Result(); err != nil || !ok {
		t.Fatalf("PEXPIRE: %v %v", ok, err)
	}
	for {
		n, err := c.Exists(ctx, "lock").Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Since(refreshed) > 5*time.Second {
			t.Fatal("the refreshed key never ran out")
		}
		time.Sleep(time.Millisecond)
	}
	if lived := time.Since(refreshed); lived < ttl {
		t.Fatalf("the key ran out %v after its refresh, before its TTL of %v", lived, ttl)
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("DBSIZE after the key ran out: %d %v, want 0 (deleted, not only aged)", n, err)
	}
}

// PTTL reads a TTL that runs down with the wall clock between commands.
func TestTTLsRunDownBetweenCommands(t *testing.T) {
	r, err := StartRedis("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "k", "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	set := time.Now()
	time.Sleep(50 * time.Millisecond)
	left, err := c.PTTL(ctx, "k").Result()
	if err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(set); left > time.Minute-50*time.Millisecond || left < time.Minute-waited-time.Second {
		t.Fatalf("PTTL %v after %v of a minute's TTL", left, waited)
	}
}

// Clients released together, each setting a key with a TTL while the
// others' commands age the server, see none of their keys run out before
// its TTL has passed from the moment its SET was sent: an ageing that
// runs between another command's arrival and its SET must not charge the
// new key for that gap.
func TestConcurrentClientsKeysNeverRunOutEarly(t *testing.T) {
	r, err := StartRedis("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	const clients, ttl = 16, 40 * time.Millisecond
	barrier := testkit.NewBarrier(clients, 10*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := redis.NewClient(&redis.Options{Addr: r.Addr()})
			defer c.Close()
			ctx := context.Background()
			key := "lock:" + strconv.Itoa(i)
			if err := c.Ping(ctx).Err(); err != nil { // connected before the barrier
				errs <- err
				return
			}
			barrier.Wait(ctx)
			sent := time.Now()
			if err := c.Set(ctx, key, "token", ttl).Err(); err != nil {
				errs <- err
				return
			}
			for {
				n, err := c.Exists(ctx, key).Result()
				if err != nil {
					errs <- err
					return
				}
				if n == 0 {
					break
				}
				time.Sleep(time.Millisecond)
			}
			if lived := time.Since(sent); lived < ttl {
				errs <- fmt.Errorf("%s ran out %v after its SET was sent, before its TTL of %v", key, lived, ttl)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
