package verdict

import (
	"slices"
	"strings"
	"testing"

	"github.com/seckill-lab/seckill/loadtest/results"
)

// manyRow is a safe many row: three products of 5 units; the hottest had
// 20 buyers and sold out, the next 3 buyers and sold 3 (2 left: a cold
// product's stock beside the hot one's sold-out answers is no fault), the
// coldest 5 buyers and sold out.
func manyRow() results.Row {
	m := &results.Many{Products: 3, StockEach: 5, FirstID: 900001, Buyers: 28, Exponent: 1, Seed: 7, Items: []results.ManyItem{
		{ID: 900001, Stock: 5, Buyers: 20, Sent: 20, Created: 5, SoldOut: 15, Sold: 5, Conserved: true},
		{ID: 900002, Stock: 5, Buyers: 3, Sent: 3, Created: 3, Sold: 3, FinalStock: 2, Conserved: true},
		{ID: 900003, Stock: 5, Buyers: 5, Sent: 5, Created: 5, Sold: 5, Conserved: true},
	}}
	r := results.Row{Scenario: "many", Stage: "redis-atomic", Workers: 16, Requests: 28, Planned: 28, Buyers: 28, Created: 13, SoldOut: 15,
		BuyersWithOrder: 13, Statuses: map[int]int{201: 13, 409: 15}, Throughput: 900, Many: m}
	m.Sum(&r)
	return r
}

// TestJudgeMany checks the many rules on their own: a row that keeps
// them, edited to break one, fails naming that rule; the liveness, capped
// and refused-with-stock rules, which read the sums, leave it alone.
func TestJudgeMany(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*results.Row)
		verdict string
		broken  []string
		note    string
	}{
		{"exact on every product, no buy row", func(*results.Row) {}, results.Pass, nil,
			"many-vs-buy skipped: no buy row of redis-atomic at 16 in flight in this run"},
		{"one product oversold", func(r *results.Row) {
			it := &r.Many.Items[0]
			it.Sold, it.Oversold, it.Created, it.SoldOut = 6, 1, 6, 14
			r.Created, r.BuyersWithOrder, r.SoldOut = 14, 14, 14
		}, results.Fail, []string{RuleOversold, RuleExactPerProduct}, "exact-per-product: 1 of 3 products did not sell exactly min(stock, their buyers): #900001 oversold by 1 (6 sold of 5)"},
		{"a cold product sold short of its buyers", func(r *results.Row) {
			it := &r.Many.Items[1]
			it.Sold, it.FinalStock, it.Created, it.SoldOut = 2, 3, 2, 1
			r.Created, r.BuyersWithOrder, r.SoldOut = 12, 12, 16
		}, results.Fail, []string{RuleExactPerProduct}, "#900002 sold 2, want 3 (stock 5, 3 buyers)"},
		{"MySQL holds another count for one product", func(r *results.Row) {
			sold, stock := 4, 1
			r.Many.Items[2].MySQLSold, r.Many.Items[2].MySQLStock = &sold, &stock
		}, results.Fail, []string{RuleExactPerProduct}, "#900003: MySQL has 4 sold, stock 1; the audit 5 sold, stock 0"},
		{"refused while its stock remained", func(r *results.Row) { r.Many.Items[0].RefusedWithStock = 2 }, results.Fail,
			[]string{RuleRefusedPerProduct}, "refused-per-product: 2 sold-out answers were received before their product's last order was created, on 1 products (#900001 2)"},
		{"below 0.8× buy", func(r *results.Row) { buy := 1200.0; r.Many.BuyThroughput = &buy }, results.Fail,
			[]string{RuleManyVsBuy}, "many-vs-buy: answered 900/s, below 0.8× the buy row's 1200/s on redis-atomic in this run (0.75×)"},
		{"at least 0.8× buy", func(r *results.Row) { buy := 1000.0; r.Many.BuyThroughput = &buy }, results.Pass, nil,
			"answered/s 0.90× the buy row's (1000/s)"},
		{"racing stage oversold a product", func(r *results.Row) {
			r.ExpectOversell = true
			r.Many.Items[0].Sold, r.Many.Items[0].Oversold = 9, 4
			r.Many.Sum(r)
		}, results.Pass, nil, "oversold by 4 as expected"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := manyRow()
			tt.edit(&r)
			if r.Many != nil && !r.ExpectOversell {
				r.Many.Sum(&r)
			}
			Judge(&r)
			if r.Verdict != tt.verdict || !slices.Equal(r.Broken, tt.broken) {
				t.Fatalf("verdict %s broken %v, want %s %v; note: %s", r.Verdict, r.Broken, tt.verdict, tt.broken, r.Note)
			}
			if !strings.Contains(r.Note, tt.note) {
				t.Errorf("note %q lacks %q", r.Note, tt.note)
			}
		})
	}
}

// TestCompareWithBuyReadsTheSameStagesBuyRow: a many row is compared with
// the buy row of its own stage, in-flight level and round, and a many
// row without one says the rule was skipped instead of passing it
// silently.
func TestCompareWithBuyReadsTheSameStagesBuyRow(t *testing.T) {
	slow := manyRow() // 900/s on redis-atomic, whose buy row answered 1,500/s
	other := manyRow()
	other.Stage = "db-atomic" // no buy row of db-atomic ran
	rows := []results.Row{
		{Scenario: "buy", Stage: "redis-atomic", Workers: 16, Requests: 2000, Throughput: 1500, Verdict: results.Pass},
		{Scenario: "buy", Stage: "redis-atomic", Workers: 64, Requests: 2000, Throughput: 100, Verdict: results.Pass},
		slow, other,
	}
	for i := range rows[2:] {
		Judge(&rows[2+i])
	}
	CompareWithBuy(rows)
	if got := rows[2]; got.Verdict != results.Fail || !slices.Equal(got.Broken, []string{RuleManyVsBuy}) || got.Many.BuyThroughput == nil || *got.Many.BuyThroughput != 1500 {
		t.Errorf("redis-atomic many row: %s %v, compared with %v; note %s", got.Verdict, got.Broken, got.Many.BuyThroughput, got.Note)
	}
	if got := rows[3]; got.Verdict != results.Pass || got.Many.BuyThroughput != nil || !strings.Contains(got.Note, RuleManyVsBuy+" skipped: no buy row of db-atomic") {
		t.Errorf("db-atomic many row: %s %v; note %s", got.Verdict, got.Broken, got.Note)
	}
}
