package verdict

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	// The MySQL driver for the direct check; gorm stays in internal/store.
	_ "github.com/go-sql-driver/mysql"

	"github.com/seckill-lab/seckill/loadtest/results"
)

// Item is what the MySQL check counts: a product, or a coupon batch.
type Item struct {
	Coupon bool
	ID     int64
}

// kind is the path segment of the item's routes.
func (it Item) kind() string {
	if it.Coupon {
		return "coupons"
	}
	return "products"
}

// OpenMySQL opens the database named by SECKILL_MYSQL_DSN for the direct
// check.
func OpenMySQL(ctx context.Context, dsn string) (*sql.DB, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, fmt.Errorf("SECKILL_MYSQL_DSN: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		if cerr := db.Close(); cerr != nil {
			err = fmt.Errorf("%w (closing: %v)", err, cerr)
		}
		return nil, fmt.Errorf("SECKILL_MYSQL_DSN: %w", err)
	}
	return db, nil
}

// ReadT0MySQL reads, for the T-0 row of product id, the orders MySQL holds
// with created_at before the opening and the last order's created_at:
// the database's own record, which then replaces the answers' for the
// time to the last unit sold. created_at and opens_at are both stored in
// UTC (the service writes UTC instants).
func ReadT0MySQL(ctx context.Context, db *sql.DB, t *results.T0, it Item) error {
	table, key := "orders", "product_id"
	if it.Coupon {
		table, key = "coupon_grabs", "batch_id"
	}
	opens := t.OpensAt.UTC().Format("2006-01-02 15:04:05.000000")
	var early int
	var last sql.NullInt64 // µs from opens_at to the last order
	q := fmt.Sprintf("SELECT COUNT(CASE WHEN created_at < ? THEN 1 END), TIMESTAMPDIFF(MICROSECOND, ?, MAX(created_at)) FROM %s WHERE %s = ?", table, key)
	if err := db.QueryRowContext(ctx, q, opens, opens, it.ID).Scan(&early, &last); err != nil {
		return fmt.Errorf("reading %s %d's order times in MySQL: %w", it.kind(), it.ID, err)
	}
	t.SoldEarlyMySQL = &early
	if last.Valid {
		d := float64(last.Int64) / 1000
		t.ToLastOrderMS, t.LastOrderBy = &d, "mysql"
	}
	return nil
}

// CountInMySQL counts the item's orders and reads its stock straight from
// the tables, counts the orders written by instances outside own, and
// those of written (order numbers answered 201) that are gone.
func CountInMySQL(ctx context.Context, db *sql.DB, it Item, own map[string]bool, written []string) (*results.DBCount, error) {
	// Live orders only: a cancelled order gave its units back, a failed
	// one never took any (sql/mysql/003_order_lifecycle.sql).
	ordersQ := "SELECT COUNT(*), COALESCE(SUM(quantity),0) FROM orders WHERE product_id=? AND status IN ('confirmed','paid')"
	stockQ := "SELECT initial_stock, stock FROM products WHERE id=?"
	if it.Coupon {
		ordersQ = "SELECT COUNT(*), COALESCE(SUM(quantity),0) FROM coupon_grabs WHERE batch_id=? AND status = 'confirmed'"
		stockQ = "SELECT total, remaining FROM coupon_batches WHERE id=?"
	}
	var c results.DBCount
	if err := db.QueryRowContext(ctx, ordersQ, it.ID).Scan(&c.Orders, &c.Sold); err != nil {
		return nil, fmt.Errorf("counting %s %d in MySQL: %w", it.kind(), it.ID, err)
	}
	if err := db.QueryRowContext(ctx, stockQ, it.ID).Scan(&c.InitialStock, &c.Stock); err != nil {
		return nil, fmt.Errorf("reading %s %d in MySQL: %w", it.kind(), it.ID, err)
	}
	foreign, err := foreignOrders(ctx, db, it, own)
	if err != nil {
		return nil, err
	}
	c.Foreign = foreign
	if c.Gone, err = goneOrders(ctx, db, it, written); err != nil {
		return nil, err
	}
	return &c, nil
}

// goneOrders counts the order numbers of written that MySQL does not hold
// for the item, in any status.
func goneOrders(ctx context.Context, db *sql.DB, it Item, written []string) (int, error) {
	table, no, key := "orders", "order_no", "product_id"
	if it.Coupon {
		table, no, key = "coupon_grabs", "grab_no", "batch_id"
	}
	gone := 0
	for chunk := range slices.Chunk(written, 500) {
		q := fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE %s = ? AND %s IN (?%s)", table, key, no, strings.Repeat(", ?", len(chunk)-1))
		args := []any{it.ID}
		for _, n := range chunk {
			args = append(args, n)
		}
		var held int
		if err := db.QueryRowContext(ctx, q, args...).Scan(&held); err != nil {
			return 0, fmt.Errorf("looking for %s %d's written orders in MySQL: %w", it.kind(), it.ID, err)
		}
		gone += len(chunk) - held
	}
	return gone, nil
}

// foreignOrders counts the item's orders by writing instance, for the
// instances not in own; nil when there are none.
func foreignOrders(ctx context.Context, db *sql.DB, it Item, own map[string]bool) (map[string]int, error) {
	q := "SELECT instance, COUNT(*) FROM orders WHERE product_id=? GROUP BY instance"
	if it.Coupon {
		q = "SELECT instance, COUNT(*) FROM coupon_grabs WHERE batch_id=? GROUP BY instance"
	}
	rows, err := db.QueryContext(ctx, q, it.ID)
	if err != nil {
		return nil, fmt.Errorf("counting %s %d's orders by instance in MySQL: %w", it.kind(), it.ID, err)
	}
	defer rows.Close()
	var foreign map[string]int
	for rows.Next() {
		var in string
		var n int
		if err := rows.Scan(&in, &n); err != nil {
			return nil, fmt.Errorf("counting %s %d's orders by instance in MySQL: %w", it.kind(), it.ID, err)
		}
		if !own[in] {
			if foreign == nil {
				foreign = map[string]int{}
			}
			foreign[in] = n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("counting %s %d's orders by instance in MySQL: %w", it.kind(), it.ID, err)
	}
	return foreign, nil
}
