package results

import "fmt"

// DBCount is what MySQL itself says about the item, counted without the
// service in between.
type DBCount struct {
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

// Disagreement describes how the MySQL count differs from r's audit, or
// returns "".
func (c *DBCount) Disagreement(r *Row) string {
	if c.Sold == r.Sold && c.InitialStock == r.InitialStock && c.Stock == r.FinalStock {
		return ""
	}
	return fmt.Sprintf("MySQL disagrees with the audit: MySQL has %d orders for %d units, initial stock %d, stock %d; the audit says %d sold, initial %d, stock %d",
		c.Orders, c.Sold, c.InitialStock, c.Stock, r.Sold, r.InitialStock, r.FinalStock)
}
