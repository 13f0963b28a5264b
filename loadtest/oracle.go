package main

import (
	"github.com/seckill-lab/seckill/loadtest/cpu"

	"context"
	"database/sql"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	// The MySQL driver for the direct check; gorm stays in internal/store.
	_ "github.com/go-sql-driver/mysql"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/inventory"
)

// row is one line of the report: one scenario under one stage. The JSON
// names are read by the dashboard; keep them.
type row struct {
	Scenario       string  `json:"scenario"`
	Shape          string  `json:"shape"`
	Stage          string  `json:"stage"`
	Instances      int     `json:"instances"`
	Workers        int     `json:"workers"` // buyers in flight
	Requests       int     `json:"requests"`
	Created        int     `json:"created"`
	SoldOut        int     `json:"sold_out"`
	Other4xx       int     `json:"other_4xx"`     // 4xx other than 409 and 429
	ServerErrors   int     `json:"server_errors"` // 5xx other than a 503 with Retry-After
	Timeouts       int     `json:"timeouts"`
	Sold           int     `json:"sold"`
	FinalStock     int     `json:"final_stock"`
	Oversold       int     `json:"oversold"`
	Conserved      bool    `json:"conserved"`
	Throughput     float64 `json:"throughput"` // answered requests (201, 202 or 409) per second
	P50ms          float64 `json:"p50_ms"`
	P95ms          float64 `json:"p95_ms"`
	P99ms          float64 `json:"p99_ms"`
	ExpectOversell bool    `json:"expect_oversell"`
	Verdict        string  `json:"verdict"` // pass, fail or skipped
	// Broken names the rules a failed verdict broke, in the order the
	// note explains them.
	Broken []string `json:"broken,omitempty"`
	Note   string   `json:"note"`
	Plot   string   `json:"plot"`
	HDR    string   `json:"hdr,omitempty"` // HDR histogram file, in vegeta's hdrplot format
	P90ms  float64  `json:"p90_ms"`
	P999ms float64  `json:"p999_ms"`
	MaxMs  float64  `json:"max_ms"`

	// Beyond the dashboard's fields.
	Planned      int `json:"planned,omitempty"` // requests a burst meant to send; more than requests when capped
	Buyers       int `json:"buyers"`            // distinct buyers sent (requests / copies)
	InitialStock int `json:"initial_stock"`
	Conflicts    int `json:"conflicts"`  // 409s other than sold-out
	TooMany      int `json:"too_many"`   // 429s
	Overloaded   int `json:"overloaded"` // 503s with Retry-After
	// PostSale503 counts the 503s to requests sent after the last 201 or
	// 202 was answered: overload told to buyers of a sold-out item.
	PostSale503 int `json:"post_sale_503"`
	// RefusedWithStock counts the sold-out answers received before the
	// last order was created (by the orders' created_at): buyers refused
	// while a unit remained for a buyer who came later.
	RefusedWithStock int `json:"refused_with_stock"`
	// RefusedWithStockNet is RefusedWithStock less the refusals received
	// while units of a reservation the server later gave back were away
	// (the audit's given_back): those buyers may have been told the truth
	// of that instant. The verdict judges the raw count, the stricter.
	RefusedWithStockNet int `json:"refused_with_stock_net"`
	// GivenBack counts the units that left the Redis stock for a
	// reservation and went back (the audit's given_back).
	GivenBack       int            `json:"given_back,omitempty"`
	NetErrors       int            `json:"net_errors"`        // no answer at all (refused, reset)
	Replayed        int            `json:"replayed"`          // 201s marked Idempotent-Replayed
	BuyersWithOrder int            `json:"buyers_with_order"` // distinct buyers (Idempotency-Keys) answered 201
	DurationMS      float64        `json:"duration_ms"`
	Problems        map[string]int `json:"problems,omitempty"` // problem types answered, by count
	Statuses        map[int]int    `json:"statuses,omitempty"` // HTTP status -> count; 0 counts requests without an answer
	TransportErrors map[string]int `json:"transport_errors,omitempty"`
	MySQL           *dbCount       `json:"mysql,omitempty"`
	// RSSMB is each target's resident memory after the attack, in MiB
	// (process_resident_memory_bytes from its /metrics; instances of one
	// demo share a process).
	RSSMB []float64 `json:"rss_mb,omitempty"`

	// With --repeat, a row is the median run of its attack (repeat.go):
	// Round is the round it ran in, Runs the answered/s of every run in
	// round order, and RunsPerCeiling each run's answered/s over the HTTP
	// ceiling measured in its own round (with --baselines).
	Round          int       `json:"round,omitempty"`
	Runs           []float64 `json:"runs,omitempty"`
	RunsPerCeiling []float64 `json:"runs_per_http_ceiling,omitempty"`

	// A stage that queues its orders (redis-stream) answers 202: the sale
	// accepted, the order written later. Accepted counts those orders;
	// the rest says what became of them once the lab stopped waiting.
	Accepted     int     `json:"accepted,omitempty"`
	Confirmed    int     `json:"confirmed,omitempty"`
	FailedOrders int     `json:"failed_orders,omitempty"`
	Unconfirmed  int     `json:"unconfirmed,omitempty"` // still pending, or no such order
	ConfirmP50ms float64 `json:"confirm_p50_ms,omitempty"`
	ConfirmP99ms float64 `json:"confirm_p99_ms,omitempty"`
	PeakLag      int     `json:"peak_lag,omitempty"` // most orders accepted and not yet written at once

	// The T-0 scenario's figures (t0.go), and the paced scenario's
	// (paced.go); nil in the other scenarios' rows.
	T0    *t0Figures    `json:"t0,omitempty"`
	Paced *pacedFigures `json:"paced,omitempty"`
	// Scalper are the scalper scenarios' figures (scalper.go).
	Scalper *scalperFigures `json:"scalper,omitempty"`

	// The CPU the processes spent on the attack (package cpu), per answer
	// (201, 202 or 409, as answered/s counts them) and per unit sold.
	cpu.Figures
	CPUPerSaleMS *float64 `json:"cpu_per_sale_ms,omitempty"`
}

// setCPU keeps the CPU an attack cost, and what it comes to per answer
// and per unit sold.
func (r *row) setCPU(u *cpu.Usage, answers int) {
	r.CPU = u
	r.CPUPerAnswerMS, r.ServersPerAnswerMS = cpu.PerUnit(u.Seconds, answers), cpu.PerUnit(u.Servers(), answers)
	r.CPUPerSaleMS = cpu.PerUnit(u.Seconds, r.Sold)
}

// fillConfirmation copies what became of a queued stage's accepted orders
// into r.
func (r *row) fillConfirmation(c confirmation) {
	r.Accepted, r.Confirmed, r.FailedOrders = c.accepted, c.confirmed, c.failed
	r.Unconfirmed = c.pending + c.missing
	r.ConfirmP50ms, r.ConfirmP99ms = percentileMS(c.toConfirm, 0.50), percentileMS(c.toConfirm, 0.99)
	r.PeakLag = c.peakLag
}

const (
	verdictPass    = "pass"
	verdictFail    = "fail"
	verdictSkipped = "skipped"
)

// fill copies the attack's counts and the audit into r.
func (r *row) fill(res attackResult, a api.Audit) {
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

// T0Buyers is the T-0 crowd, 0 outside the T-0 scenario.
func (r *row) T0Buyers() int {
	if r.T0 == nil {
		return 0
	}
	return r.T0.Buyers
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func mysqlEarly(t *t0Figures) string {
	if t.SoldEarlyMySQL == nil {
		return ""
	}
	return fmt.Sprintf(", %d in MySQL", *t.SoldEarlyMySQL)
}

// countsText lists counts by name, e.g. "201 ×3, no answer ×1", in name
// order; "none" when empty.
func countsText(m map[string]int) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	var parts []string
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// statusCounts lists r's answers by status, e.g. "500 ×12, 503 ×3",
// lowest status first, with "no answer" for requests that got none. With
// serverErrors it lists only the 5xx that count as server errors: a 503
// with Retry-After is overload, not an error.
func statusCounts(r *row, serverErrors bool) string {
	codes := make([]int, 0, len(r.Statuses))
	for c := range r.Statuses {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var parts []string
	for _, c := range codes {
		n := r.Statuses[c]
		switch {
		case serverErrors && c < 500:
			continue
		case serverErrors && c == 503:
			n -= r.Overloaded
		case c == 0:
			parts = append(parts, fmt.Sprintf("no answer ×%d", n))
			continue
		}
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d ×%d", c, n))
		}
	}
	return strings.Join(parts, ", ")
}

// turnedAwayCounts lists the refusals that sent buyers away, e.g.
// "429 ×100, 503 ×70".
func turnedAwayCounts(r *row) string {
	var parts []string
	for _, c := range []struct {
		name string
		n    int
	}{{"429", r.TooMany}, {"503", r.Overloaded}, {"409 sold-out", r.SoldOut}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%s ×%d", c.name, c.n))
		}
	}
	return strings.Join(parts, ", ")
}

// commonError quotes the most frequent transport error, for a reader to
// tell a refused connection from a timeout at a glance.
func commonError(errs map[string]int) string {
	best, n := "", 0
	for e, c := range errs {
		if c > n || (c == n && e < best) {
			best, n = e, c
		}
	}
	if best == "" {
		return ""
	}
	if len(best) > 160 {
		best = best[:160] + "…"
	}
	return fmt.Sprintf("; most often %q", best)
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
	// Foreign counts the item's orders, whatever their status, by the
	// instance that wrote them, for the instances that are not among the
	// targets: another fleet on the same database (its own Redis, its own
	// resets) makes the lab's counts meaningless.
	Foreign map[string]int `json:"foreign,omitempty"`
	// Gone counts the orders the buyers were answered 201 for (written
	// before the answer) that MySQL no longer holds, in any status. The
	// service never deletes an order it answered 201 for; a reset does,
	// and the lab sent none since the burst: another fleet's did, and
	// took its own orders of the item with it, so that Foreign alone
	// would not see it.
	Gone int `json:"gone,omitempty"`
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

// readMySQL reads, for the T-0 row of product id, the orders MySQL holds
// with created_at before the opening and the last order's created_at:
// the database's own record, which then replaces the answers' for the
// time to the last unit sold. created_at and opens_at are both stored in
// UTC (the service writes UTC instants).
func (t *t0Figures) readMySQL(ctx context.Context, db *sql.DB, sc scenario, id int64) error {
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
func countInMySQL(ctx context.Context, db *sql.DB, sc scenario, id int64, own map[string]bool, written []string) (*dbCount, error) {
	// Live orders only: a cancelled order gave its units back, a failed
	// one never took any (sql/mysql/003_order_lifecycle.sql).
	ordersQ := "SELECT COUNT(*), COALESCE(SUM(quantity),0) FROM orders WHERE product_id=? AND status IN ('confirmed','paid')"
	stockQ := "SELECT initial_stock, stock FROM products WHERE id=?"
	if sc.coupon {
		ordersQ = "SELECT COUNT(*), COALESCE(SUM(quantity),0) FROM coupon_grabs WHERE batch_id=? AND status = 'confirmed'"
		stockQ = "SELECT total, remaining FROM coupon_batches WHERE id=?"
	}
	var c dbCount
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
