package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestCheckSafety: a server that would let a CHECK violation or an
// out-of-range value pass silently is refused with a message saying what to
// set. The DSN's session variables stand in for a misconfigured server.
func TestCheckSafety(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	ctx := context.Background()
	open := func(params string) *store.DB {
		t.Helper()
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		db, err := store.OpenMySQL(ctx, dsn+sep+params, store.Pool{})
		if err != nil {
			t.Fatalf("open with %s: %v", params, err)
		}
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	if err := open("sql_mode=%27STRICT_TRANS_TABLES%27").CheckSafety(ctx); err != nil {
		t.Fatalf("a strict server must pass: %v", err)
	}
	err := open("sql_mode=%27%27").CheckSafety(ctx)
	if !errors.Is(err, store.ErrUnsafeServer) || !strings.Contains(err.Error(), "STRICT_TRANS_TABLES") {
		t.Fatalf("a non-strict sql_mode must be refused naming STRICT_TRANS_TABLES: %v", err)
	}
	var version string
	if err := open("").Raw(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.ToLower(version), "mariadb") {
		err := open("check_constraint_checks=0").CheckSafety(ctx)
		if !errors.Is(err, store.ErrUnsafeServer) || !strings.Contains(err.Error(), "check_constraint_checks") {
			t.Fatalf("MariaDB with check_constraint_checks off must be refused: %v", err)
		}
	}
}

// TestStockConstraintIsTheLastLine writes a negative stock straight past
// the stages and checks that both engines refuse it as sold out.
func TestStockConstraintIsTheLastLine(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			db := b.Open(t)
			err := db.Exec(context.Background(), "UPDATE products SET stock = stock - 1000 WHERE id = 1")
			if !errors.Is(err, inventory.ErrSoldOut) {
				t.Fatalf("want the CHECK violation as ErrSoldOut, got %v", err)
			}
			err = db.Exec(context.Background(), "INSERT INTO orders (order_no, product_id, user_id, quantity, stage) VALUES ('x1', 1, 'u', 1, 's'), ('x2', 1, 'u', 1, 's')")
			if !errors.Is(err, inventory.ErrAlreadyPurchased) {
				t.Fatalf("want the one-order-per-user key as ErrAlreadyPurchased, got %v", err)
			}
		})
	}
}
