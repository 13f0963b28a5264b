package inventory_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/orderwriter"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage/streamtest"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestLookalikeBuyersAreDifferentBuyers: under every stage and on both SQL
// engines, buyers whose ids differ only in case, accent or a trailing space
// each buy a unit,
// and a true repeat is refused. Redis tells them apart, so MySQL must too:
// with a collation that does not, redis-atomic gave "ALICE" a unit in Redis
// and MySQL then refused her as alice's repeat, redis-stream accepted her
// order and wrote it failed, and the other stages refused her outright.
func TestLookalikeBuyersAreDifferentBuyers(t *testing.T) {
	buyers := []string{"alice", "ALICE", "Alice", "alicé", "alice "}
	for _, backend := range testenv.Backends() {
		t.Run(backend.Name, func(t *testing.T) {
			db := backend.Open(t)
			var nextID atomic.Int64
			nextID.Store(2000)
			for _, sc := range stageCases {
				t.Run(sc.stage, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					id := nextID.Add(1)
					if err := db.Exec(ctx, "INSERT INTO products (id, name, initial_stock, stock) VALUES (?, ?, 10, 10)", id, "lookalikes-"+sc.stage); err != nil {
						t.Fatal(err)
					}
					st := sc.build(newRaceEnv(t), db.Products(), inventory.SectionOptions{})
					q, queued := st.(*redisstage.RedisStream)
					if queued {
						streamtest.StartWriter(t, ctx, q, db.Products(), orderwriter.Options{})
					}
					svc := inventory.NewService(db.Products(), map[string]inventory.Stage{sc.stage: st}, "i0", "O")
					for _, u := range buyers {
						if _, err := svc.Buy(ctx, sc.stage, inventory.Request{ItemID: id, UserID: u, Quantity: 1}); err != nil {
							t.Fatalf("buy by %q after %q: %v", u, buyers[0], err)
						}
					}
					if queued {
						streamtest.WaitDrained(t, ctx, q, id)
					}
					if _, err := svc.Buy(ctx, sc.stage, inventory.Request{ItemID: id, UserID: "ALICE", Quantity: 1}); !errors.Is(err, inventory.ErrAlreadyPurchased) {
						t.Fatalf("a second buy by ALICE: %v, want ErrAlreadyPurchased", err)
					}
					a, err := db.Products().Audit(ctx, id)
					if err != nil {
						t.Fatal(err)
					}
					if a.Orders != len(buyers) || a.Sold != len(buyers) || a.Failed != 0 || !a.Conserved() {
						t.Fatalf("audit %+v; want %d orders of one unit, none failed, conserved", a, len(buyers))
					}
				})
			}
		})
	}
}
