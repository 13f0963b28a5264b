//go:build unix

package main

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// BenchmarkRedisPoolCheck measures what go-redis's check of every pooled
// connection (a recv with MSG_PEEK on each Get) costs this process: the
// same commands from 64 goroutines through a client that checks (go-redis's
// own dialer) and one that cannot (unpeekedDial), interleaved in slices of
// 2,000 commands so that both see the same machine. peek-cpu-ns/op and
// unpeeked-cpu-ns/op are this process's CPU (user and system, getrusage)
// per command; peek/unpeeked is their ratio. Redis's side is the same for
// both.
func BenchmarkRedisPoolCheck(b *testing.B) {
	addr := testenv.RedisAddr(b)
	small := redis.NewScript(`return 1`)
	for _, cmd := range []struct {
		name string
		run  func(ctx context.Context, c redis.Scripter) error
	}{
		{"ping", func(ctx context.Context, c redis.Scripter) error { return c.(*redis.Client).Ping(ctx).Err() }},
		{"evalsha", func(ctx context.Context, c redis.Scripter) error { return small.EvalSha(ctx, c, nil).Err() }},
	} {
		b.Run(cmd.name, func(b *testing.B) {
			ctx := context.Background()
			client := func(dial func(*redis.Options)) *redis.Client {
				o := clientOptions(addr)
				o.PoolSize = 64
				dial(o)
				c := redis.NewClient(o)
				b.Cleanup(func() { _ = c.Close() })
				if err := small.Load(ctx, c).Err(); err != nil {
					b.Fatal(err)
				}
				return c
			}
			peek := client(func(o *redis.Options) { o.Dialer = nil })
			unpeeked := client(func(o *redis.Options) { o.Dialer = unpeekedDial })
			var cpu [2]time.Duration
			b.ResetTimer()
			for done := 0; done < b.N; done += poolCheckSlice {
				n := min(poolCheckSlice, b.N-done)
				for i, c := range []*redis.Client{peek, unpeeked} {
					cpu[i] += testkit.ParallelCPU(b, 64, n, func() error { return cmd.run(ctx, c) })
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(cpu[0])/float64(b.N), "peek-cpu-ns/op")
			b.ReportMetric(float64(cpu[1])/float64(b.N), "unpeeked-cpu-ns/op")
			b.ReportMetric(float64(cpu[0])/float64(cpu[1]), "peek/unpeeked")
		})
	}
}

// poolCheckSlice is how many commands one client sends before the other
// gets its turn in BenchmarkRedisPoolCheck.
const poolCheckSlice = 2000
