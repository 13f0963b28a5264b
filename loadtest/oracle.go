package main

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"strings"
	"time"

	// The MySQL driver for the direct check; gorm stays in internal/store.
	_ "github.com/go-sql-driver/mysql"
)

// row is one line of the report: one scenario under one stage. The JSON
// names are read by the dashboard; keep them.
type row struct {
	Scenario       string  `json:"scenario"`
	Shape          string  `json:"shape"`
	Stage          string  `json:"stage"`
	Instances      int     `json:"instances"`
	Requests       int     `json:"requests"`
	Created        int     `json:"created"`
	SoldOut        int     `json:"sold_out"`
	Other4xx       int     `json:"other_4xx"`
	ServerErrors   int     `json:"server_errors"`
	Timeouts       int     `json:"timeouts"`
	Sold           int     `json:"sold"`
	FinalStock     int     `json:"final_stock"`
	Oversold       int     `json:"oversold"`
	Conserved      bool    `json:"conserved"`
	Throughput     float64 `json:"throughput"` // answered buyers (201 or 409) per second
	P50ms          float64 `json:"p50_ms"`
	P95ms          float64 `json:"p95_ms"`
	P99ms          float64 `json:"p99_ms"`
	ExpectOversell bool    `json:"expect_oversell"`
	Verdict        string  `json:"verdict"` // pass, fail or skipped
	Note           string  `json:"note"`
	Plot           string  `json:"plot"`

	// Beyond the dashboard's fields.
	Planned         int            `json:"planned,omitempty"` // requests a burst meant to send; more than requests when capped
	Buyers          int            `json:"buyers"`            // distinct buyers sent (requests / copies)
	InitialStock    int            `json:"initial_stock"`
	NetErrors       int            `json:"net_errors"`        // no answer at all (refused, reset)
	Replayed        int            `json:"replayed"`          // 201s marked Idempotent-Replayed
	BuyersWithOrder int            `json:"buyers_with_order"` // distinct buyers (Idempotency-Keys) answered 201
	DurationMS      float64        `json:"duration_ms"`
	Problems        map[string]int `json:"problems,omitempty"` // problem types answered, by count
	MySQL           *dbCount       `json:"mysql,omitempty"`
}

const (
	verdictPass    = "pass"
	verdictFail    = "fail"
	verdictSkipped = "skipped"
)

// fill copies the attack's counts and the audit into r.
func (r *row) fill(res attackResult, a audit) {
	t := res.tally
	r.Requests = t.requests
	r.Planned = int(t.planned)
	r.Created = t.outcomes[outCreated]
	r.SoldOut = t.outcomes[outSoldOut]
	r.Other4xx = t.outcomes[outOther4xx]
	r.ServerErrors = t.outcomes[outServerError]
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
	switch stage {
	case "unlocked":
		return true
	case "local-mutex":
		return instances > 1
	}
	return false
}

// judge sets r's verdict and note from its counts. A stage expected to
// oversell passes when it did. A stage expected to be safe passes when
// nothing was oversold, stock was conserved, and every buyer told "201"
// has exactly one order behind it. Disagreement between the audit and
// MySQL fails any stage: the lab cannot vouch for an oracle that lies.
func judge(r *row) {
	var fails, notes []string
	if r.MySQL != nil {
		if d := r.MySQL.disagreement(r); d != "" {
			fails = append(fails, d)
		}
	}
	// A buyer whose request timed out may or may not have an order, so the
	// count of 201s only has to match the audit when every request got an
	// answer.
	answeredAll := r.Timeouts == 0 && r.NetErrors == 0
	switch {
	case r.Requests == 0:
		fails = append(fails, "no request was sent")
	case r.ExpectOversell:
		if r.Oversold > 0 {
			notes = append(notes, fmt.Sprintf("oversold by %d as expected (%d sold of %d)", r.Oversold, r.Sold, r.InitialStock))
		} else {
			why := "a larger crowd or more --workers widens the race"
			if r.Buyers <= r.InitialStock {
				why = fmt.Sprintf("only %d buyers were sent, no more than the stock, so nothing could oversell: send more --buyers, or a longer --duration", r.Buyers)
			}
			fails = append(fails, fmt.Sprintf("expected overselling but saw none (%d sold of %d); %s", r.Sold, r.InitialStock, why))
		}
		if !r.Conserved {
			notes = append(notes, fmt.Sprintf("stock not conserved: %d left the stock, %d were sold", r.InitialStock-r.FinalStock, r.Sold))
		}
	default:
		if r.Oversold > 0 {
			fails = append(fails, fmt.Sprintf("oversold by %d (%d sold of %d)", r.Oversold, r.Sold, r.InitialStock))
		}
		if !r.Conserved {
			fails = append(fails, fmt.Sprintf("stock not conserved: %d left the stock, %d were sold", r.InitialStock-r.FinalStock, r.Sold))
		}
		if answeredAll && r.BuyersWithOrder != r.Sold {
			fails = append(fails, fmt.Sprintf("%d buyers were answered 201 but the audit counts %d sold", r.BuyersWithOrder, r.Sold))
		}
		// Refusing everyone is safe but not a sale: a stage that sold
		// nothing from a full stock is broken, and calling it safe would
		// hide that.
		if r.Sold == 0 && r.InitialStock > 0 {
			fails = append(fails, fmt.Sprintf("sold nothing although %d units were in stock: all %d requests were refused", r.InitialStock, r.Requests))
		}
		if len(fails) == 0 {
			notes = append(notes, fmt.Sprintf("safe: %d sold of %d, %d left, conserved", r.Sold, r.InitialStock, r.FinalStock))
		}
	}
	if r.Planned > r.Requests {
		notes = append(notes, fmt.Sprintf("stopped at the --max-duration cap after %d of %d requests", r.Requests, r.Planned))
	}
	if r.Replayed > 0 {
		notes = append(notes, fmt.Sprintf("%d idempotent replays", r.Replayed))
	}
	if r.SoldOut > 0 && r.FinalStock > 0 && r.Conserved {
		notes = append(notes, fmt.Sprintf("%d buyers told sold-out while %d units remained", r.SoldOut, r.FinalStock))
	}
	if !answeredAll {
		notes = append(notes, fmt.Sprintf("%d timeouts and %d network errors: those buyers' outcome is known only to the audit", r.Timeouts, r.NetErrors))
	}
	if r.MySQL != nil && len(fails) == 0 {
		notes = append(notes, "MySQL agrees with the audit")
	}
	if p := otherProblems(r.Problems); p != "" {
		notes = append(notes, p)
	}
	r.Verdict = verdictPass
	if len(fails) > 0 {
		r.Verdict = verdictFail
	}
	r.Note = strings.Join(append(fails, notes...), "; ")
}

// otherProblems summarises the problem types other than sold-out.
func otherProblems(m map[string]int) string {
	var parts []string
	for k, n := range m {
		if k != "/problems/sold-out" {
			parts = append(parts, fmt.Sprintf("%s ×%d", strings.TrimPrefix(k, "/problems/"), n))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	sort.Strings(parts)
	return "answers: " + strings.Join(parts, ", ")
}

// dbCount is what MySQL itself says about the item, counted without the
// service in between.
type dbCount struct {
	Orders       int `json:"orders"`
	Sold         int `json:"sold"`
	InitialStock int `json:"initial_stock"`
	Stock        int `json:"stock"`
}

// disagreement describes how the MySQL count differs from r's audit, or
// returns "".
func (c *dbCount) disagreement(r *row) string {
	if c.Sold == r.Sold && c.InitialStock == r.InitialStock && c.Stock == r.FinalStock {
		return ""
	}
	return fmt.Sprintf("MySQL disagrees with the audit: MySQL has %d orders for %d units, initial stock %d, stock %d; the audit says %d sold, initial %d, stock %d",
		c.Orders, c.Sold, c.InitialStock, c.Stock, r.Sold, r.InitialStock, r.FinalStock)
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

// countInMySQL counts the item's orders and reads its stock straight from
// the tables.
func countInMySQL(ctx context.Context, db *sql.DB, sc scenario, id int64) (*dbCount, error) {
	ordersQ := "SELECT COUNT(*), COALESCE(SUM(quantity),0) FROM orders WHERE product_id=?"
	stockQ := "SELECT initial_stock, stock FROM products WHERE id=?"
	if sc.coupon {
		ordersQ = "SELECT COUNT(*), COALESCE(SUM(quantity),0) FROM coupon_grabs WHERE batch_id=?"
		stockQ = "SELECT total, remaining FROM coupon_batches WHERE id=?"
	}
	var c dbCount
	if err := db.QueryRowContext(ctx, ordersQ, id).Scan(&c.Orders, &c.Sold); err != nil {
		return nil, fmt.Errorf("counting %s %d in MySQL: %w", sc.kind(), id, err)
	}
	if err := db.QueryRowContext(ctx, stockQ, id).Scan(&c.InitialStock, &c.Stock); err != nil {
		return nil, fmt.Errorf("reading %s %d in MySQL: %w", sc.kind(), id, err)
	}
	return &c, nil
}
