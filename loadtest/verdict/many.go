package verdict

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/seckill-lab/seckill/loadtest/results"
)

// The many scenario's rules. Its row sums its products, and a sum hides
// the products: a hot one oversold by 2 and a cold one short by 2 add up
// to an exact sale, and the tail's unsold stock beside the hot items'
// sold-out answers looks like liveness lost. So its safe stages are
// judged per product, and the liveness, capped and refused-with-stock
// rules, which read the sums, leave its rows to these.
const (
	RuleExactPerProduct   = "exact-per-product"   // many: a product sold other than min(its stock, its buyers), oversold, lost units, or MySQL disagrees
	RuleRefusedPerProduct = "refused-per-product" // many: a buyer was told sold out while that product's stock remained
	RuleManyVsBuy         = "many-vs-buy"         // many: answered/s below ManyMinShare of the buy row of the same stage in the same run
)

// ManyMinShare is the least answered/s the many row must keep, as a share
// of the single-product buy row's on the same stage in the same run: many
// items on sale at once should cost little more per answer than one.
const ManyMinShare = 0.8

// exactPerProduct: each product sells one unit to each of its buyers, or
// its whole stock when they are more, with nothing oversold and every
// unit accounted for, in the audit and in MySQL.
func exactPerProduct(r *results.Row) []string {
	if r.Many == nil {
		return nil
	}
	var bad []string
	for _, it := range r.Many.Items {
		if why := it.Inexact(); why != "" {
			bad = append(bad, why)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return because("%d of %d products did not sell exactly min(stock, their buyers): %s", len(bad), len(r.Many.Items), firstFew(bad))
}

// refusedPerProduct: a sold-out answer for a product received before its
// own last order was created refused a buyer while a unit of it remained.
func refusedPerProduct(r *results.Row) []string {
	if r.Many == nil {
		return nil
	}
	var bad []string
	total := 0
	for _, it := range r.Many.Items {
		if it.RefusedWithStock > 0 {
			bad = append(bad, fmt.Sprintf("#%d %d", it.ID, it.RefusedWithStock))
			total += it.RefusedWithStock
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return because("%d sold-out answers were received before their product's last order was created, on %d products (%s): buyers refused while that product's stock remained",
		total, len(bad), firstFew(bad))
}

// manyVsBuy: many sales at once keep at least ManyMinShare of the
// single-product burst's answered/s. Without a buy row in the run there
// is nothing to compare with: the rule is skipped, and safeNotes says so.
func manyVsBuy(r *results.Row) []string {
	if r.Many == nil || r.Many.BuyThroughput == nil {
		return nil
	}
	buy := *r.Many.BuyThroughput
	if r.Throughput >= ManyMinShare*buy {
		return nil
	}
	return because("answered %.0f/s, below %.1f× the buy row's %.0f/s on %s in this run (%.2f×)", r.Throughput, ManyMinShare, buy, r.Stage, r.Throughput/max(buy, 1e-9))
}

// manyBuyNote says what became of a safe many row's many-vs-buy rule.
func manyBuyNote(r *results.Row) []string {
	m := r.Many
	switch {
	case m == nil:
		return nil
	case m.BuyThroughput == nil:
		return []string{fmt.Sprintf("%s skipped: no buy row of %s at %d in flight in this run to compare with (run --scenarios buy,many)", RuleManyVsBuy, r.Stage, r.Workers)}
	case *m.BuyThroughput > 0 && r.Throughput >= ManyMinShare**m.BuyThroughput: // below, the rule says it
		return []string{fmt.Sprintf("answered/s %.2f× the buy row's (%.0f/s)", r.Throughput / *m.BuyThroughput, *m.BuyThroughput)}
	}
	return nil
}

// CompareWithBuy gives every many row of one round the answered/s of the
// buy row of the same stage and in-flight level, when one ran and was
// not skipped, and judges it again (Judge), so that its many-vs-buy rule
// reads it.
func CompareWithBuy(rows []results.Row) {
	for i := range rows {
		r := &rows[i]
		if r.Many == nil || slices.Contains(r.Broken, RuleLabError) {
			continue
		}
		r.Many.BuyThroughput = nil
		for _, b := range rows {
			if b.Scenario == "buy" && b.Stage == r.Stage && b.Workers == r.Workers && b.Round == r.Round && b.Verdict != results.Skipped && b.Requests > 0 {
				tp := b.Throughput
				r.Many.BuyThroughput = &tp
			}
		}
		Judge(r)
	}
}

// firstFew lists the first five of what, and how many more.
func firstFew(what []string) string {
	const few = 5
	if len(what) <= few {
		return strings.Join(what, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(what[:few], ", "), len(what)-few)
}

// CountManyInMySQL counts every product of m in MySQL, keeps each one's
// sold units and stock beside its audit, and returns their sums (and the
// orders of instances outside own, and those of written that are gone),
// which the mysql-agrees rule compares with the row's sums.
func CountManyInMySQL(ctx context.Context, db *sql.DB, m *results.Many, own map[string]bool, written []string) (*results.DBCount, error) {
	sum := &results.DBCount{}
	for i := range m.Items {
		it := &m.Items[i]
		c, err := CountInMySQL(ctx, db, Item{ID: it.ID}, own, nil)
		if err != nil {
			return nil, err
		}
		it.MySQLSold, it.MySQLStock = &c.Sold, &c.Stock
		sum.Orders += c.Orders
		sum.Sold += c.Sold
		sum.InitialStock += c.InitialStock
		sum.Stock += c.Stock
		if len(c.Foreign) > 0 && sum.Foreign == nil {
			sum.Foreign = map[string]int{}
		}
		for in, n := range c.Foreign {
			sum.Foreign[in] += n
		}
	}
	gone, err := goneAmong(ctx, db, m, written)
	if err != nil {
		return nil, err
	}
	sum.Gone = gone
	return sum, nil
}

// goneAmong counts the order numbers of written that MySQL holds for no
// product of m: every order the burst answered 201 was one of theirs.
func goneAmong(ctx context.Context, db *sql.DB, m *results.Many, written []string) (int, error) {
	first, last := m.FirstID, m.FirstID+int64(len(m.Items))-1
	gone := 0
	for chunk := range slices.Chunk(written, 500) {
		q := "SELECT COUNT(*) FROM orders WHERE product_id BETWEEN ? AND ? AND order_no IN (?" + strings.Repeat(", ?", len(chunk)-1) + ")"
		args := []any{first, last}
		for _, n := range chunk {
			args = append(args, n)
		}
		var held int
		if err := db.QueryRowContext(ctx, q, args...).Scan(&held); err != nil {
			return 0, fmt.Errorf("looking for the many products' written orders in MySQL: %w", err)
		}
		gone += len(chunk) - held
	}
	return gone, nil
}
