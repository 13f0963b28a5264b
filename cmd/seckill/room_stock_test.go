package main

import (
	"context"
	"testing"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestRoomStockIsTheLowerCopy: the room counts the units left as the
// lower of the database's stock and the Redis copy's, so that whichever
// a stage sold the last unit from says "sold out" at once; without a copy,
// the database's.
func TestRoomStockIsTheLowerCopy(t *testing.T) {
	db := testenv.SQLite(t)
	rdb := testenv.Redis(t)
	ns := testenv.Name("roomstock")
	copies := redisstage.NewRedisAtomic(rdb, db.Products(), ns, nil)
	products := inventory.NewService(db.Products(), map[string]inventory.Stage{"redis-atomic": copies}, "t", "O")
	ctx := context.Background()
	if err := products.Reset(ctx, 1, 5); err != nil {
		t.Fatal(err)
	}
	stock := roomStock(products, copies)
	key := "seckill:{" + ns + ":1}:stock"
	t.Cleanup(func() { _ = rdb.Del(ctx, key).Err() })
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		copy string // "" for none
		want int
	}{
		{"", 5}, {"0", 0}, {"3", 3}, {"9", 5},
	} {
		if c.copy != "" {
			if err := rdb.Set(ctx, key, c.copy, 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := stock(ctx, 1); err != nil || n != c.want {
			t.Errorf("database 5, copy %q: %d, %v; want %d", c.copy, n, err, c.want)
		}
	}
}
