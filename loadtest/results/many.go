package results

import "fmt"

// Many is the many scenario's figures (scenario/many.go): a catalogue of
// products on sale at once, each buyer choosing one by a Zipf law. The
// row's sold, stock and oversold are the sums over the products; the
// verdict judges each product on its own (verdict/many.go).
type Many struct {
	Products  int     `json:"products"`
	StockEach int     `json:"stock_each"`
	FirstID   int64   `json:"first_id"`
	Buyers    int     `json:"buyers"`
	Exponent  float64 `json:"zipf_s"`
	Seed      uint64  `json:"seed"`
	// Items are the products, hottest first (the Zipf law's rank 1 is
	// FirstID).
	Items []ManyItem `json:"items"`
	// BuyThroughput is the answered/s of the buy row of the same stage,
	// in-flight level and round of the same run, which the many-vs-buy
	// rule compares the row with; nil when no such row ran (the rule is
	// then skipped, and the note says so). BuyLooked says the run's rows
	// were searched for it (verdict.CompareWithBuy).
	BuyThroughput *float64 `json:"buy_throughput,omitempty"`
	BuyLooked     bool     `json:"-"`
}

// ManyItem is one product of the many scenario.
type ManyItem struct {
	ID    int64 `json:"id"`
	Stock int   `json:"stock"`
	// Buyers are the distinct buyers the Zipf law sent to it (planned:
	// a capped burst sends fewer, and the product then sells fewer than
	// it should), Sent the requests that left.
	Buyers     int  `json:"buyers"`
	Sent       int  `json:"sent"`
	Created    int  `json:"created"`
	SoldOut    int  `json:"sold_out"`
	Sold       int  `json:"sold"`
	FinalStock int  `json:"final_stock"`
	Oversold   int  `json:"oversold"`
	Conserved  bool `json:"conserved"`
	// RefusedWithStock counts the sold-out answers for this product
	// received before its own last order was created.
	RefusedWithStock int `json:"refused_with_stock"`
	// RefusedWithStockNet leaves out those received while units of a
	// reservation given back later were away (Row.RefusedWithStockNet),
	// and GivenBack counts those units.
	RefusedWithStockNet int `json:"refused_with_stock_net"`
	GivenBack           int `json:"given_back,omitempty"`
	// MySQLSold and MySQLStock are what MySQL holds for it, when the lab
	// counts there.
	MySQLSold  *int `json:"mysql_sold,omitempty"`
	MySQLStock *int `json:"mysql_stock,omitempty"`
}

// Want is what the product must sell on a safe stage: one unit to each
// of its buyers, or its whole stock when they are more.
func (it ManyItem) Want() int { return min(it.Stock, it.Buyers) }

// Inexact describes how the product's sale was not exact (sold other
// than Want, oversold, units lost, MySQL disagreeing), or returns "".
func (it ManyItem) Inexact() string {
	switch {
	case it.Oversold > 0:
		return fmt.Sprintf("#%d oversold by %d (%d sold of %d)", it.ID, it.Oversold, it.Sold, it.Stock)
	case !it.Conserved:
		return fmt.Sprintf("#%d not conserved (%d left the stock, %d sold)", it.ID, it.Stock-it.FinalStock, it.Sold)
	case it.Sold != it.Want():
		return fmt.Sprintf("#%d sold %d, want %d (stock %d, %d buyers)", it.ID, it.Sold, it.Want(), it.Stock, it.Buyers)
	case it.MySQLSold != nil && (*it.MySQLSold != it.Sold || *it.MySQLStock != it.FinalStock):
		return fmt.Sprintf("#%d: MySQL has %d sold, stock %d; the audit %d sold, stock %d", it.ID, *it.MySQLSold, *it.MySQLStock, it.Sold, it.FinalStock)
	}
	return ""
}

// SoldOutCount is how many products sold their whole stock.
func (m *Many) SoldOutCount() int {
	n := 0
	for _, it := range m.Items {
		if it.FinalStock == 0 {
			n++
		}
	}
	return n
}

// Note is the many row's figures in words.
func (m *Many) Note() string {
	s := fmt.Sprintf("%d products × %d units, %d buyers by Zipf s=%g, seed %d; %d sold out", m.Products, m.StockEach, m.Buyers, m.Exponent, m.Seed, m.SoldOutCount())
	if len(m.Items) > 0 {
		hot, cold := m.Items[0], m.Items[len(m.Items)-1]
		s += fmt.Sprintf("; hottest #%d %d buyers, coldest #%d %d", hot.ID, hot.Buyers, cold.ID, cold.Buyers)
	}
	return s
}

// Sum makes r's counts the sums over the products: stock, sold, stock
// left, oversold, conserved (every product), the refusals while a
// product's own stock remained, the units given back.
func (m *Many) Sum(r *Row) {
	r.InitialStock, r.Sold, r.FinalStock, r.Oversold, r.Conserved = 0, 0, 0, 0, true
	r.RefusedWithStock, r.RefusedWithStockNet, r.GivenBack = 0, 0, 0
	for _, it := range m.Items {
		r.InitialStock += it.Stock
		r.Sold += it.Sold
		r.FinalStock += it.FinalStock
		r.Oversold += it.Oversold
		r.Conserved = r.Conserved && it.Conserved
		r.RefusedWithStock += it.RefusedWithStock
		r.RefusedWithStockNet += it.RefusedWithStockNet
		r.GivenBack += it.GivenBack
	}
}
