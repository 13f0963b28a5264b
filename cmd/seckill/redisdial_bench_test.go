//go:build unix

package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
	"github.com/seckill-lab/seckill/loadtest/resp"
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

// BenchmarkRedisUnixSocket measures a PING's CPU over a Unix socket
// against over loopback TCP, on one redis-server listening on both: 64
// goroutines through the app's client options, the two clients
// interleaved in slices of 2,000 PINGs. cpu-ns/op is this process's CPU
// plus the server's (INFO CPU) per PING; unix/tcp is their ratio.
func BenchmarkRedisUnixSocket(b *testing.B) {
	port := testkit.FreePorts(b, 1)[0]
	sock := testenv.StartRedisUnix(b, "--port", strconv.Itoa(port), "--bind", "127.0.0.1")
	tcpAddr := "127.0.0.1:" + strconv.Itoa(port)
	ctx := context.Background()
	server := func() time.Duration {
		s, err := resp.CPU(ctx, "unix:"+sock, "", 5*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		return time.Duration(s * 1e9)
	}
	var cpu [2]time.Duration
	clients := make([]*redis.Client, 2)
	for i, addr := range []string{sock, tcpAddr} {
		o := clientOptions(addr)
		o.PoolSize = 64
		clients[i] = redis.NewClient(o)
		b.Cleanup(func() { _ = clients[i].Close() })
	}
	b.ResetTimer()
	for done := 0; done < b.N; done += poolCheckSlice {
		n := min(poolCheckSlice, b.N-done)
		for i, c := range clients {
			before := server()
			cpu[i] += testkit.ParallelCPU(b, 64, n, func() error { return c.Ping(ctx).Err() })
			cpu[i] += server() - before
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cpu[0])/float64(b.N), "unix-cpu-ns/op")
	b.ReportMetric(float64(cpu[1])/float64(b.N), "tcp-cpu-ns/op")
	b.ReportMetric(float64(cpu[0])/float64(cpu[1]), "unix/tcp")
}
