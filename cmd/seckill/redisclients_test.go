package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/config"
	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// counting stands for the app's scripts (reserve.lua, enqueue.lua,
// begin.lua): none of them may run twice for one call.
var counting = redis.NewScript(`return redis.call('INCR', KEYS[1])`)

// A script whose reply is lost after Redis ran it must not be sent again
// by the app's clients: a second reserve.lua would tell the buyer "already
// bought" about their own unit, a second begin.lua "in progress" about
// their own request. The call must fail, and the script have run once.
func TestAppRedisClientsNeverRunAScriptTwice(t *testing.T) {
	t.Parallel()
	addr := testenv.RedisAddr(t)
	for _, tc := range []struct {
		name string
		dial func(d *testkit.NetFaults) redis.UniversalClient
	}{
		{"serve", func(d *testkit.NetFaults) redis.UniversalClient {
			o := universalOptions(config.Config{RedisAddrs: []string{addr}})
			o.Dialer = d.Dial
			return redis.NewUniversalClient(o)
		}},
		{"serve-sentinel", func(d *testkit.NetFaults) redis.UniversalClient {
			g := testenv.StartSentinelGroup(t)
			o := universalOptions(sentinelConfig(t, g))
			o.Dialer = d.Dial
			return redis.NewUniversalClient(o)
		}},
		{"demo", func(d *testkit.NetFaults) redis.UniversalClient {
			o := clientOptions(addr)
			o.Dialer = d.Dial
			return redis.NewClient(o)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := &testkit.NetFaults{}
			rdb := tc.dial(d)
			t.Cleanup(func() { _ = rdb.Close() })
			ctx := context.Background()
			key := testenv.Name("seckill:retry-probe")
			t.Cleanup(func() { _ = rdb.Del(context.Background(), key).Err() })
			if err := counting.Load(ctx, rdb).Err(); err != nil { // so that the call is one EVALSHA
				t.Fatal(err)
			}
			sha, k := []byte(counting.Hash()), []byte(key)
			d.Drop(1, func(req []byte) bool { return bytes.Contains(req, sha) && bytes.Contains(req, k) })
			err := counting.Run(ctx, rdb, []string{key}).Err()
			if d.Dropped() != 1 {
				t.Fatalf("%d replies dropped, want 1", d.Dropped())
			}
			runs, gerr := rdb.Get(ctx, key).Int()
			if gerr != nil {
				t.Fatal(gerr)
			}
			if runs != 1 {
				t.Fatalf("one call ran the script %d times (the client sent it again after losing the reply); the call returned %v", runs, err)
			}
			if err == nil {
				t.Fatal("the call reported success without a reply")
			}
		})
	}
}

// sentinelConfig is the configuration of an app that finds its Redis
// through g's Sentinels, as SECKILL_REDIS_SENTINELS and
// SECKILL_REDIS_MASTER set it.
func sentinelConfig(t *testing.T, g *testenv.SentinelGroup) config.Config {
	t.Helper()
	cfg, err := config.Load(func(k string) string {
		return map[string]string{"SECKILL_REDIS_SENTINELS": strings.Join(g.SentinelAddrs(), ","), "SECKILL_REDIS_MASTER": g.Master}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.UsesRedis() {
		t.Fatal("a Sentinel group must count as a Redis")
	}
	return cfg
}

// With SECKILL_REDIS_SENTINELS the app's client is go-redis's failover
// client: internal/lock accepts it (its retries are off), it writes to the
// primary, and once the Sentinels promote the replica after the primary
// died, the same client writes to the new primary. The calls made while
// the primary is gone fail; none is sent twice.
func TestAppRedisClientFollowsASentinelFailover(t *testing.T) {
	skipShort(t)
	t.Parallel()
	g := testenv.StartSentinelGroup(t)
	rdb := redis.NewUniversalClient(universalOptions(sentinelConfig(t, g)))
	t.Cleanup(func() { _ = rdb.Close() })
	lk, err := lock.New(rdb, lock.Options{})
	if err != nil {
		t.Fatalf("internal/lock refuses the app's Sentinel client: %v", err)
	}
	t.Cleanup(func() { _ = lk.Close() })
	ctx := context.Background()
	if err := rdb.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := g.Primary.Client().Get(ctx, "before").Result(); err != nil || v != "1" {
		t.Fatalf("the write did not reach the primary: %q, %v", v, err)
	}
	testkit.Eventually(t, "the replica has the first write", 10*time.Second, func() bool {
		v, _ := g.Replica.Client().Get(ctx, "before").Result()
		return v == "1"
	})
	g.Primary.Kill()
	promoted := g.WaitFailover()
	testkit.Eventually(t, "the app's client writes again", 30*time.Second, func() bool {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return rdb.Set(cctx, "after", "2", 0).Err() == nil
	})
	// Read back on a client of go-redis's default timeouts: the 200 ms
	// dial of Client(), made for RedLock's instances, timed out beside the
	// package's other parallel tests under -race.
	check := redis.NewClient(&redis.Options{Addr: g.Replica.Addr})
	t.Cleanup(func() { _ = check.Close() })
	if v, err := check.Get(ctx, "after").Result(); err != nil || v != "2" {
		t.Fatalf("the write after the failover did not reach the promoted replica %s: %q, %v", promoted, v, err)
	}
	l, err := lk.Obtain(ctx, "failover", time.Second, lock.ObtainOptions{Fixed: true})
	if err != nil {
		t.Fatalf("no lock on the new primary: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// At SECKILL_STREAM_DURABILITY=fsync serve refuses to start on a Redis
// that answers writes before they are on disk, and says what to set; on
// one with appendfsync always it starts.
func TestServeAtFsyncNeedsAppendfsyncAlways(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDSN(t)
	for _, tc := range []struct {
		name string
		args []string
		ok   bool
	}{
		{"no aof", nil, false},
		{"aof always", []string{"--appendonly", "yes", "--appendfsync", "always"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testenv.StartRedis(t, tc.args...)
			env := map[string]string{"SECKILL_MYSQL_DSN": dsn, "SECKILL_REDIS_ADDR": p.Addr, "SECKILL_ADDR": "127.0.0.1:0",
				"SECKILL_STAGE": "redis-stream", "SECKILL_STREAM_DURABILITY": "fsync", "SECKILL_LOG_LEVEL": "error"}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			stdout := &testkit.SyncBuffer{}
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, []string{"serve"}, func(k string) string { return env[k] }, stdout, io.Discard)
			}()
			// Wait until serve either exits or serves.
			var exited bool
			var err error
			if !testkit.Poll(30*time.Second, func() bool {
				select {
				case err = <-done:
					exited = true
					return true
				default:
				}
				return strings.Contains(stdout.String(), "serving on")
			}) {
				t.Fatal("serve neither started nor exited within 30s")
			}
			if !exited {
				cancel()
				err = <-done
				if !tc.ok {
					t.Fatalf("serve started at fsync on a Redis without appendfsync always (stopped: %v)", err)
				}
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if tc.ok {
				t.Fatalf("serve at fsync on appendfsync always did not start: %v", err)
			}
			if err == nil || !strings.Contains(err.Error(), "SECKILL_STREAM_DURABILITY=fsync") || !strings.Contains(err.Error(), "appendfsync always") {
				t.Fatalf("want a refusal naming SECKILL_STREAM_DURABILITY=fsync and appendfsync always, got %v", err)
			}
		})
	}
}
