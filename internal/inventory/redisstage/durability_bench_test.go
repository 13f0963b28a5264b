package redisstage_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// BenchmarkStreamDurability measures what each durability level costs a
// redis-stream accept: buys of one unit each by distinct buyers, from
// 32 goroutines per CPU, against a Redis server of the benchmark's own (a
// primary and a replica for replica, appendonly with appendfsync always
// for fsync, on this machine's disk). Compare the levels' ns/op from one
// run: their ratios are the answer, not the absolute figures.
//
//	go test -run '^$' -bench BenchmarkStreamDurability -benchtime 3s ./internal/inventory/redisstage/
func BenchmarkStreamDurability(b *testing.B) {
	for _, tc := range []struct {
		level redisstage.Durability
		start func(b *testing.B) *testenv.RedisProcess
	}{
		{redisstage.DurabilityNone, func(b *testing.B) *testenv.RedisProcess { return testenv.StartRedis(b) }},
		{redisstage.DurabilityFsync, func(b *testing.B) *testenv.RedisProcess {
			return testenv.StartRedis(b, "--appendonly", "yes", "--appendfsync", "always")
		}},
		{redisstage.DurabilityReplica, func(b *testing.B) *testenv.RedisProcess { p, _ := testenv.StartReplicaPair(b); return p }},
	} {
		b.Run(string(tc.level), func(b *testing.B) {
			_, in := durableEnvTB(b, tc.start(b), tc.level)
			if err := in.Stream.CheckDurability(context.Background()); err != nil {
				b.Fatal(err)
			}
			var users atomic.Int64
			// A sale's buyers arrive together: many in flight at once,
			// which lets Redis fsync (and replicate) the writes of one
			// event-loop turn together.
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					u := fmt.Sprintf("u%d", users.Add(1))
					if _, err := in.Service.Buy(context.Background(), inventory.StageRedisStream, inventory.Request{ItemID: 1, UserID: u, Quantity: 1}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
