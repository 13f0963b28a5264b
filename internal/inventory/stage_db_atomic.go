package inventory

import "context"

// Stage "db-atomic": no lock. The database decides, in one statement.
//
//	UPDATE products SET stock = stock - ? WHERE id = ? AND stock >= ?
//
// The row lock the UPDATE takes makes the check and the decrement one atomic
// step, so no interleaving of buyers can oversell, on one instance or many.
// Zero rows affected means sold out. The order insert shares the
// transaction, so an order exists exactly when stock left. The cost is that
// every buyer of a hot item queues on that one row. The sale window rides
// in the same WHERE, against the database's own clock (window.go), so no
// instance's clock can open the sale early.

// NewDBAtomic returns the db-atomic stage.
func NewDBAtomic(store Deducter) Stage { return dbAtomic{store: store} }

type dbAtomic struct{ store Deducter }

// Buy runs the guarded decrement; with a store that keeps sale windows
// (WindowDeducter), the same statement checks the window against the
// database's clock.
func (s dbAtomic) Buy(ctx context.Context, o Order) error {
	if wd, ok := s.store.(WindowDeducter); ok {
		return wd.DeductInWindow(ctx, o)
	}
	return s.store.Deduct(ctx, o)
}
