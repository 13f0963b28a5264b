package store_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// BenchmarkPurchase measures one buyer's database work on each engine: the
// db-atomic sale (Deduct), and the lock stages' read and computed write.
// FencedSection is the whole section of a lock stage with fencing (the
// claim of the row, the read and the computed write), under a guard that
// costs nothing. Each runs once per buyer; compare branches with benchstat,
// on a quiet machine.
func BenchmarkPurchase(b *testing.B) {
	for _, be := range testenv.Backends() {
		for _, k := range kinds {
			b.Run(be.Name+"/"+k.name, func(b *testing.B) {
				ctx := context.Background()
				l := k.ledger(be.Open(b))
				sales := []struct {
					name string
					sell func(o inventory.Order) error
				}{
					{"Deduct", func(o inventory.Order) error { return l.Deduct(ctx, o) }},
					{"ReadStock+WriteComputed", func(o inventory.Order) error {
						stock, err := l.ReadStock(ctx, o.ItemID)
						if err != nil {
							return err
						}
						return l.WriteComputed(ctx, o, stock-o.Quantity, 0)
					}},
				}
				// The lock stages' section as they run it under a lock with
				// fencing: claim the row, read, write the computed stock.
				section := inventory.NewGuarded(newTokenGuard(), l, k.name, inventory.SectionOptions{Fencing: true})
				sales = append(sales, struct {
					name string
					sell func(o inventory.Order) error
				}{"FencedSection", func(o inventory.Order) error { return section.Buy(ctx, o) }})
				for _, s := range sales {
					b.Run(s.name, func(b *testing.B) {
						if err := l.Reset(ctx, 1, b.N); err != nil {
							b.Fatal(err)
						}
						b.ReportAllocs()
						b.ResetTimer()
						for i := range b.N {
							user := strconv.Itoa(i)
							o := inventory.Order{No: "b" + user, ItemID: 1, UserID: user, Quantity: 1, Stage: "bench", CreatedAt: time.Now()}
							if err := s.sell(o); err != nil {
								b.Fatal(err)
							}
						}
					})
				}
			})
		}
	}
}
