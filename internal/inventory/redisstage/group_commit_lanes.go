package redisstage

import (
	"context"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// crossDeducter writes the orders of several items in one transaction.
type crossDeducter interface {
	// DeductAcross writes all of orders (of one or more items) in one
	// transaction, or none of them.
	DeductAcross(ctx context.Context, orders []inventory.Order) error
	// GroupWriters is how many groups the store takes at once to
	// advantage: the number of lanes.
	GroupWriters() int
}

// laneOf returns the lane of item id, opened if none is, with g.mu held:
// the item's own lane, or with across the open lane of its number.
func (g *groupCommit) laneOf(id int64) *lane {
	if l := g.lanes[id]; l != nil {
		return l
	}
	var l *lane
	if g.across != nil {
		n := id % int64(g.across.GroupWriters())
		if l = g.open[n]; l == nil {
			l = &lane{number: n}
			g.open[n] = l
		}
	} else {
		l = &lane{}
	}
	l.ids = append(l.ids, id)
	g.lanes[id] = l
	return l
}

// close forgets a lane that has nothing left to write, with g.mu held.
func (g *groupCommit) close(l *lane) {
	for _, id := range l.ids {
		delete(g.lanes, id)
	}
	if g.across != nil {
		delete(g.open, l.number)
	}
}

// deductAll writes a group of orders in one transaction: with DeductAll
// when they are of one item, else with DeductAcross.
func (g *groupCommit) deductAll(ctx context.Context, orders []inventory.Order) error {
	if g.across != nil {
		for _, o := range orders[1:] {
			if o.ItemID != orders[0].ItemID {
				return g.across.DeductAcross(ctx, orders)
			}
		}
	}
	return g.store.DeductAll(ctx, orders)
}
