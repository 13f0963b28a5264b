package main

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	// The MySQL driver for the direct check; gorm stays in internal/store.
	_ "github.com/go-sql-driver/mysql"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/loadtest/results"
)

// fillConfirmation copies what became of a queued stage's accepted orders
// into r.
func fillConfirmation(r *results.Row, c confirmation) {
	r.Accepted, r.Confirmed, r.FailedOrders = c.accepted, c.confirmed, c.failed
	r.Unconfirmed = c.pending + c.missing
	r.ConfirmP50ms, r.ConfirmP99ms = percentileMS(c.toConfirm, 0.50), percentileMS(c.toConfirm, 0.99)
	r.PeakLag = c.peakLag
}

// fillRow copies the attack's counts and the audit into r.
func fillRow(r *results.Row, res attackResult, a api.Audit) {
	t := res.tally
	r.Requests = t.requests
	r.Planned = int(t.planned)
	r.Created = t.outcomes[outCreated]
	r.SoldOut = t.outcomes[outSoldOut]
	r.Conflicts = t.outcomes[outConflict]
	r.TooMany = t.outcomes[outTooMany]
	r.Overloaded = t.outcomes[outOverloaded]
	r.PostSale503 = t.postSaleOverloaded()
	r.RefusedWithStock = t.refusedWithStock()
	r.RefusedWithStockNet = t.refusedWithStockNet(a.GivenBack)
	for _, g := range a.GivenBack {
		r.GivenBack += g.Units
	}
	r.Other4xx = t.outcomes[outOther4xx]
	r.ServerErrors = t.outcomes[outServerError]
	r.Statuses = t.statuses
	r.TransportErrors = t.errors
	r.Timeouts = t.outcomes[outTimeout]
	r.NetErrors = t.outcomes[outNetError]
	r.Replayed = t.replayed
	r.BuyersWithOrder = len(t.buyers)
	r.Problems = t.problems
	r.DurationMS = ms(t.elapsed())
	if s := t.elapsed().Seconds(); s > 0 {
		r.Throughput = float64(t.served()) / s
	}
	r.P50ms = ms(res.metrics.Latencies.P50)
	r.P95ms = ms(res.metrics.Latencies.P95)
	r.P99ms = ms(res.metrics.Latencies.P99)
	r.P90ms = ms(res.metrics.Latencies.P90)
	r.P999ms = ms(res.metrics.Latencies.Quantile(0.999))
	r.MaxMs = ms(res.metrics.Latencies.Max)

	r.InitialStock = a.InitialStock
	r.Sold = a.Sold
	r.FinalStock = a.Stock
	r.Oversold = a.Oversold
	r.Conserved = a.Conserved
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// expectsOversell says whether stage should oversell in this run. An
// explicit --expect-oversell list decides alone. Otherwise: unlocked races
// whenever two buyers overlap; local-mutex only when they reach different
// instances, each with its own mutex; every other stage must be safe. No
// stage can oversell a crowd smaller than the stock.
func expectsOversell(explicit map[string]bool, stage string, instances, workers, crowd, stock int) bool {
	if explicit != nil {
		return explicit[stage]
	}
	if workers < 2 || crowd <= stock {
		return false
	}
	return inventory.Oversells(stage, instances)
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func mysqlEarly(t *results.T0) string {
	if t.SoldEarlyMySQL == nil {
		return ""
	}
	return fmt.Sprintf(", %d in MySQL", *t.SoldEarlyMySQL)
}

// openMySQL opens the database named by SECKILL_MYSQL_DSN for the direct
// check.
func openMySQL(ctx context.Context, dsn string) (*sql.DB, error) {
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

// readT0MySQL reads, for the T-0 row of product id, the orders MySQL holds
// with created_at before the opening and the last order's created_at:
// the database's own record, which then replaces the answers' for the
// time to the last unit sold. created_at and opens_at are both stored in
// UTC (the service writes UTC instants).
func readT0MySQL(ctx context.Context, db *sql.DB, t *results.T0, sc scenario, id int64) error {
	table, key := "orders", "product_id"
	if sc.coupon {
		table, key = "coupon_grabs", "batch_id"
	}
	opens := t.OpensAt.UTC().Format("2006-01-02 15:04:05.000000")
	var early int
	var last sql.NullInt64 // µs from opens_at to the last order
	q := fmt.Sprintf("SELECT COUNT(CASE WHEN created_at < ? THEN 1 END), TIMESTAMPDIFF(MICROSECOND, ?, MAX(created_at)) FROM %s WHERE %s = ?", table, key)
	if err := db.QueryRowContext(ctx, q, opens, opens, id).Scan(&early, &last); err != nil {
		return fmt.Errorf("reading %s %d's order times in MySQL: %w", sc.kind(), id, err)
	}
	t.SoldEarlyMySQL = &early
	if last.Valid {
		d := float64(last.Int64) / 1000
		t.ToLastOrderMS, t.LastOrderBy = &d, "mysql"
	}
	return nil
}

// countInMySQL counts the item's orders and reads its stock straight from
// the tables, counts the orders written by instances outside own, and
// those of written (order numbers answered 201) that are gone.
func countInMySQL(ctx context.Context, db *sql.DB, sc scenario, id int64, own map[string]bool, written []string) (*results.DBCount, error) {
	// Live orders only: a cancelled order gave its units back, a failed
	// one never took any (sql/mysql/003_order_lifecycle.sql).
	ordersQ := "SELECT COUNT(*), COALESCE(SUM(quantity),0) FROM orders WHERE product_id=? AND status IN ('confirmed','paid')"
	stockQ := "SELECT initial_stock, stock FROM products WHERE id=?"
	if sc.coupon {
		ordersQ = "SELECT COUNT(*), COALESCE(SUM(quantity),0) FROM coupon_grabs WHERE batch_id=? AND status = 'confirmed'"
		stockQ = "SELECT total, remaining FROM coupon_batches WHERE id=?"
	}
	var c results.DBCount
	if err := db.QueryRowContext(ctx, ordersQ, id).Scan(&c.Orders, &c.Sold); err != nil {
		return nil, fmt.Errorf("counting %s %d in MySQL: %w", sc.kind(), id, err)
	}
	if err := db.QueryRowContext(ctx, stockQ, id).Scan(&c.InitialStock, &c.Stock); err != nil {
		return nil, fmt.Errorf("reading %s %d in MySQL: %w", sc.kind(), id, err)
	}
	foreign, err := foreignOrders(ctx, db, sc, id, own)
	if err != nil {
		return nil, err
	}
	c.Foreign = foreign
	if c.Gone, err = goneOrders(ctx, db, sc, id, written); err != nil {
		return nil, err
	}
	return &c, nil
}

// goneOrders counts the order numbers of written that MySQL does not hold
// for the item, in any status.
func goneOrders(ctx context.Context, db *sql.DB, sc scenario, id int64, written []string) (int, error) {
	table, no, key := "orders", "order_no", "product_id"
	if sc.coupon {
		table, no, key = "coupon_grabs", "grab_no", "batch_id"
	}
	gone := 0
	for chunk := range slices.Chunk(written, 500) {
		q := fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE %s = ? AND %s IN (?%s)", table, key, no, strings.Repeat(", ?", len(chunk)-1))
		args := []any{id}
		for _, n := range chunk {
			args = append(args, n)
		}
		var held int
		if err := db.QueryRowContext(ctx, q, args...).Scan(&held); err != nil {
			return 0, fmt.Errorf("looking for %s %d's written orders in MySQL: %w", sc.kind(), id, err)
		}
		gone += len(chunk) - held
	}
	return gone, nil
}

// foreignOrders counts the item's orders by writing instance, for the
// instances not in own; nil when there are none.
func foreignOrders(ctx context.Context, db *sql.DB, sc scenario, id int64, own map[string]bool) (map[string]int, error) {
	q := "SELECT instance, COUNT(*) FROM orders WHERE product_id=? GROUP BY instance"
	if sc.coupon {
		q = "SELECT instance, COUNT(*) FROM coupon_grabs WHERE batch_id=? GROUP BY instance"
	}
	rows, err := db.QueryContext(ctx, q, id)
	if err != nil {
		return nil, fmt.Errorf("counting %s %d's orders by instance in MySQL: %w", sc.kind(), id, err)
	}
	defer rows.Close()
	var foreign map[string]int
	for rows.Next() {
		var in string
		var n int
		if err := rows.Scan(&in, &n); err != nil {
			return nil, fmt.Errorf("counting %s %d's orders by instance in MySQL: %w", sc.kind(), id, err)
		}
		if !own[in] {
			if foreign == nil {
				foreign = map[string]int{}
			}
			foreign[in] = n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("counting %s %d's orders by instance in MySQL: %w", sc.kind(), id, err)
	}
	return foreign, nil
}
