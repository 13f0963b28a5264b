package redisstage_test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// noWrites is a store whose sales write nothing: the benchmark below
// measures the Redis part of a sale alone.
type noWrites struct{ l *store.Ledger }

func (s noWrites) Deduct(context.Context, inventory.Order) error      { return nil }
func (s noWrites) List(ctx context.Context) ([]inventory.Item, error) { return s.l.List(ctx) }
func (s noWrites) Get(ctx context.Context, id int64) (inventory.Item, error) {
	return s.l.Get(ctx, id)
}

// countedConn counts the writes and reads on a connection.
type countedConn struct {
	net.Conn
	writes, reads *atomic.Int64
}

func (c countedConn) Write(p []byte) (int, error) { c.writes.Add(1); return c.Conn.Write(p) }
func (c countedConn) Read(p []byte) (int, error)  { c.reads.Add(1); return c.Conn.Read(p) }

// BenchmarkReserveBatch: redis-atomic sales of one item by few and by many
// buyers at once (one and 64 a core; every one gets a unit, the database
// write skipped), with the reservation scripts sent alone (flying=0) and
// gathered behind one or two in flight (reserve_batch.go), against a
// redis-server of the benchmark's own. It reports, per sale, the CPU of
// this process (client-µs), of Redis (redis-µs, from INFO cpu), their sum,
// and the writes and reads on the client's connections (syscalls). Run
// with -count of at least 5, and compare the variants' medians: they are
// measured in the same run.
func BenchmarkReserveBatch(b *testing.B) {
	srv := testenv.StartRedis(b)
	db := testenv.SQLite(b)
	for _, c := range []struct {
		perCore int
		flying  int // 0: not batched
	}{{1, 0}, {1, 1}, {1, 2}, {64, 0}, {64, 1}, {64, 2}} {
		b.Run(fmt.Sprintf("buyers=%d/flying=%d", c.perCore*runtime.GOMAXPROCS(0), c.flying), func(b *testing.B) {
			var writes, reads atomic.Int64
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 256,
				Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
					c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
					return countedConn{Conn: c, writes: &writes, reads: &reads}, err
				}})
			defer rdb.Close()
			ctx := context.Background()
			ns := testenv.Name("rb-")
			ra := redisstage.NewRedisAtomic(rdb, noWrites{db.Products()}, ns, nil)
			ra.BatchReservesForTest(c.flying)
			if err := db.Products().Reset(ctx, 1, b.N+1); err != nil {
				b.Fatal(err)
			}
			if err := ra.Reset(ctx, 1, 0); err != nil {
				b.Fatal(err)
			}
			if err := ra.Buy(ctx, inventory.Order{No: ns + "-warm", ItemID: 1, UserID: "warm", Quantity: 1}); err != nil {
				b.Fatal(err)
			}
			var seq atomic.Int64
			redisBefore := redisCPU(b, rdb)
			writes.Store(0)
			reads.Store(0)
			before := selfCPU()
			b.SetParallelism(c.perCore)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n := seq.Add(1)
					o := inventory.Order{No: ns + "-" + strconv.FormatInt(n, 10), ItemID: 1, UserID: "u" + strconv.FormatInt(n, 10), Quantity: 1}
					if err := ra.Buy(ctx, o); err != nil {
						b.Error(err)
						return
					}
				}
			})
			if err := ra.WaitConfirms(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			client := selfCPU() - before
			w, r := writes.Load(), reads.Load()
			server := redisCPU(b, rdb) - redisBefore
			perSale := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
			b.ReportMetric(perSale(client), "client-µs/sale")
			b.ReportMetric(perSale(server), "redis-µs/sale")
			b.ReportMetric(perSale(client+server), "cpu-µs/sale")
			b.ReportMetric(float64(w)/float64(b.N), "writes/sale")
			b.ReportMetric(float64(r)/float64(b.N), "reads/sale")
			_ = rdb.Del(ctx, "seckill:{"+ns+":1}:stock", "seckill:{"+ns+":1}:buyers", "seckill:{"+ns+":1}:pending").Err()
		})
	}
}

// selfCPU is the CPU this process used so far, user and system.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is the CPU the Redis server used so far (INFO cpu), main
// thread and children.
func redisCPU(b *testing.B, rdb *redis.Client) time.Duration {
	b.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			sum += f
		}
	}
	return time.Duration(sum * float64(time.Second))
}
