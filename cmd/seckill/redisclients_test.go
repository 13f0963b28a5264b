package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

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
			o := universalOptions([]string{addr}, "")
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
