package redisstage_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// oneBySale is a Ledger without DeductAll: redis-atomic over it writes
// every sale in a transaction of its own, as it did before group commit.
type oneBySale struct{ l *store.Ledger }

func (s oneBySale) Deduct(ctx context.Context, o inventory.Order) error { return s.l.Deduct(ctx, o) }
func (s oneBySale) List(ctx context.Context) ([]inventory.Item, error)  { return s.l.List(ctx) }
func (s oneBySale) Get(ctx context.Context, id int64) (inventory.Item, error) {
	return s.l.Get(ctx, id)
}
func (s oneBySale) Buyers(ctx context.Context, id int64) ([]string, error) {
	return s.l.Buyers(ctx, id)
}

// BenchmarkRedisAtomicSales: redis-atomic sales of one hot product, 16
// buyers at once per core, every one of them getting a unit (stock b.N),
// with group commit and with one transaction per sale, in the same run.
// Compare the two sub-benchmarks' ns/op: the ratio is what grouping buys
// on this machine's database.
func BenchmarkRedisAtomicSales(b *testing.B) {
	for _, be := range testenv.Backends() {
		b.Run(be.Name, func(b *testing.B) {
			db := be.Open(b)
			rdb := testenv.Redis(b)
			for _, v := range []struct {
				name  string
				stage func(l *store.Ledger, ns string) *redisstage.RedisAtomic
			}{
				{"grouped", func(l *store.Ledger, ns string) *redisstage.RedisAtomic {
					return redisstage.NewRedisAtomic(rdb, l, ns, nil)
				}},
				{"one-per-sale", func(l *store.Ledger, ns string) *redisstage.RedisAtomic {
					return redisstage.NewRedisAtomic(rdb, oneBySale{l}, ns, nil)
				}},
			} {
				b.Run(v.name, func(b *testing.B) {
					ctx := context.Background()
					ns := testenv.Name("bench-")
					ra := v.stage(db.Products(), ns)
					if err := db.Products().Reset(ctx, 1, b.N); err != nil {
						b.Fatal(err)
					}
					if err := ra.Reset(ctx, 1, b.N); err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() {
						keys, _ := rdb.Keys(context.Background(), "seckill:{"+ns+":*").Result()
						if len(keys) > 0 {
							_ = rdb.Del(context.Background(), keys...).Err()
						}
					})
					var n atomic.Int64
					b.SetParallelism(16)
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							i := n.Add(1)
							user := fmt.Sprintf("%s-%d", ns, i)
							o := inventory.Order{No: user, ItemID: 1, UserID: user, Quantity: 1, Stage: inventory.StageRedisAtomic,
								CreatedAt: time.Now(), Status: inventory.StatusConfirmed}
							if err := ra.Buy(ctx, o); err != nil {
								b.Error(err)
								return
							}
						}
					})
				})
			}
		})
	}
}
