package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/store"
)

// idleConnectionIDs leaves n connections idle in db's pool, each taken at
// once so that each is its own, and returns their MySQL connection ids.
func idleConnectionIDs(t *testing.T, db *sql.DB, n int) []int64 {
	t.Helper()
	ctx := context.Background()
	ids := make([]int64, n)
	held := make([]*sql.Conn, n)
	for i := range held {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held[i] = c
		if err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range held {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if idle := db.Stats().Idle; idle != n {
		t.Fatalf("%d idle connections, want %d", idle, n)
	}
	return ids
}

// TestKilledConnectionCostsOneSale: the store does not ask the driver to
// check a pooled connection before each use (checkConnLiveness=false,
// store.go), so after MariaDB or MySQL killed the pool's idle connections
// (KILL, a restart, a proxy's idle timeout), each fails the next sale
// that takes it, once, and is dropped. That sale's error tells the truth:
// inventory.ErrUnavailable (nothing was written) or
// inventory.ErrOutcomeUnknown, and the item's audit counts exactly the
// sales that succeeded.
func TestKilledConnectionCostsOneSale(t *testing.T) {
	const pool = 3
	db := openPool(t, store.Pool{MaxConns: pool})
	sqlDB, err := store.Gorm(db).DB()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := db.Products().Reset(ctx, 1, 100); err != nil {
		t.Fatal(err)
	}
	admin := openPool(t, store.Pool{MaxConns: 1}) // a pool of its own, on the same server
	for _, id := range idleConnectionIDs(t, sqlDB, pool) {
		if err := admin.Exec(ctx, fmt.Sprintf("KILL %d", id)); err != nil {
			t.Fatal(err)
		}
	}
	sold, failed := 0, 0
	for i, ok := 0, 0; ok < 2*pool; i++ {
		err := db.Products().Deduct(ctx, order(fmt.Sprintf("killed-%d", i), fmt.Sprintf("buyer-%d", i), 1))
		if err == nil {
			sold++
			ok++
			continue
		}
		if !errors.Is(err, inventory.ErrUnavailable) && !errors.Is(err, inventory.ErrOutcomeUnknown) {
			t.Fatalf("sale %d on a killed connection: %v; want unavailable or outcome unknown", i, err)
		}
		if failed++; failed > pool {
			t.Fatalf("%d sales failed after %d pooled connections were killed; the last: %v", failed, pool, err)
		}
	}
	if failed != pool {
		t.Fatalf("%d sales failed after %d pooled connections were killed, want one each: a check of each connection before use, which the store turns off, hid them", failed, pool)
	}
	a, err := db.Products().Audit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if a.Orders != sold {
		t.Fatalf("the audit counts %d orders; %d sales succeeded", a.Orders, sold)
	}
}
