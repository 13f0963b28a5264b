package store

import (
	"slices"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// TestSaleBatchSQL pins the batch a sale sends on MySQL (sale.go), as a
// workshop reads it, for both kinds of item: the orders first, then the
// guarded decrement, which writes the batch's mark into the row, the read
// of that mark, and the orders taken back unless the row carries it; and
// its arguments, in order.
func TestSaleBatchSQL(t *testing.T) {
	at := time.Date(2026, 11, 24, 5, 0, 0, 0, time.UTC)
	orders := []inventory.Order{
		{No: "n1", ItemID: 7, UserID: "a", Quantity: 1, Stage: "redis-atomic", Instance: "i1", CreatedAt: at, WrittenAt: at},
		{No: "n2", ItemID: 7, UserID: "b", Quantity: 2, Stage: "redis-atomic", Instance: "i1", CreatedAt: at, WrittenAt: at},
	}
	for _, c := range []struct {
		statements statements
		want       string
	}{
		{productStatements{}, "START TRANSACTION;\n" +
			"INSERT INTO orders (order_no, product_id, user_id, quantity, stage, instance, created_at, status, written_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?, ?, ?, ?);\n" +
			"UPDATE products SET stock = stock - ?, fence_token = fence_token + 1, last_sale = ? WHERE id = ? AND stock >= ?;\n" +
			"SET @seckill_sold = (SELECT last_sale = ? FROM products WHERE id = ?);\n" +
			"DELETE FROM orders WHERE @seckill_sold IS NOT TRUE AND order_no IN (?, ?);\n" +
			"COMMIT"},
		{couponStatements{}, "START TRANSACTION;\n" +
			"INSERT INTO coupon_grabs (grab_no, batch_id, user_id, quantity, stage, instance, created_at, status, written_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?, ?, ?, ?);\n" +
			"UPDATE coupon_batches SET remaining = remaining - ?, fence_token = fence_token + 1, last_sale = ? WHERE id = ? AND remaining >= ?;\n" +
			"SET @seckill_sold = (SELECT last_sale = ? FROM coupon_batches WHERE id = ?);\n" +
			"DELETE FROM coupon_grabs WHERE @seckill_sold IS NOT TRUE AND grab_no IN (?, ?);\n" +
			"COMMIT"},
	} {
		query, args := c.statements.sale().batch(orders, 3, "", "m1")
		if query != c.want {
			t.Errorf("%T batch:\n%s\nwant:\n%s", c.statements, query, c.want)
		}
		var got []any
		for i, a := range args {
			if a.Ordinal != i+1 {
				t.Errorf("%T argument %d has ordinal %d", c.statements, i, a.Ordinal)
			}
			got = append(got, a.Value)
		}
		want := []any{
			"n1", int64(7), "a", int64(1), "redis-atomic", "i1", at, "confirmed", at,
			"n2", int64(7), "b", int64(2), "redis-atomic", "i1", at, "confirmed", at,
			int64(3), "m1", int64(7), int64(3),
			"m1", int64(7),
			"n1", "n2",
		}
		if len(got) != len(want) {
			t.Fatalf("%T: %d arguments %v, want %d %v", c.statements, len(got), got, len(want), want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%T argument %d = %#v, want %#v", c.statements, i+1, got[i], want[i])
			}
		}
	}
}

// TestComputedWriteBatchSQL pins a lock holder's fenced write on MySQL:
// the sale batch, whose UPDATE sets the stock the holder computed, fenced
// by its token.
func TestComputedWriteBatchSQL(t *testing.T) {
	at := time.Date(2026, 11, 28, 5, 0, 0, 0, time.UTC)
	o := inventory.Order{No: "n1", ItemID: 7, UserID: "a", Quantity: 1, Stage: "redis-lock", Instance: "i1", CreatedAt: at, WrittenAt: at}
	row := []any{"n1", int64(7), "a", int64(1), "redis-lock", "i1", at, "confirmed", at}
	for _, c := range []struct {
		statements statements
		token      int64
		want       string
		args       []any // after the order's row
	}{
		{productStatements{}, 42, "START TRANSACTION;\n" +
			"INSERT INTO orders (order_no, product_id, user_id, quantity, stage, instance, created_at, status, written_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?);\n" +
			"UPDATE products SET stock = ?, last_sale = ? WHERE id = ? AND fence_token <= ?;\n" +
			"SET @seckill_sold = (SELECT last_sale = ? FROM products WHERE id = ?);\n" +
			"DELETE FROM orders WHERE @seckill_sold IS NOT TRUE AND order_no IN (?);\n" +
			"COMMIT", []any{int64(9), "m1", int64(7), int64(42), "m1", int64(7), "n1"}},
		{couponStatements{}, 43, "START TRANSACTION;\n" +
			"INSERT INTO coupon_grabs (grab_no, batch_id, user_id, quantity, stage, instance, created_at, status, written_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?);\n" +
			"UPDATE coupon_batches SET remaining = ?, last_sale = ? WHERE id = ? AND fence_token <= ?;\n" +
			"SET @seckill_sold = (SELECT last_sale = ? FROM coupon_batches WHERE id = ?);\n" +
			"DELETE FROM coupon_grabs WHERE @seckill_sold IS NOT TRUE AND grab_no IN (?);\n" +
			"COMMIT", []any{int64(9), "m1", int64(7), int64(43), "m1", int64(7), "n1"}},
	} {
		query, args := c.statements.sale().computedBatch(o, 9, c.token, "m1")
		if query != c.want {
			t.Errorf("%T batch:\n%s\nwant:\n%s", c.statements, query, c.want)
		}
		want := append(slices.Clone(row), c.args...)
		var got []any
		for i, a := range args {
			if a.Ordinal != i+1 {
				t.Errorf("%T argument %d has ordinal %d", c.statements, i, a.Ordinal)
			}
			got = append(got, a.Value)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%T arguments %v, want %v", c.statements, got, want)
		}
	}
}
