package store

import (
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// The statements of each kind of item. Products and coupon batches keep the
// same facts under different names (stock and remaining, orders and
// coupon_grabs), so each statement is written twice, side by side, in the
// words of its own tables. The Ledger decides which run together and what
// their results mean. TestGuardedSQL pins the SQL that gorm makes of the
// ones the stages teach, on both engines.

type (
	productStatements struct{} // products and orders
	couponStatements  struct{} // coupon_batches and coupon_grabs
)

// list reads every item, by id.
func (productStatements) list(tx *gorm.DB) ([]inventory.Item, error) {
	var rows []Product
	err := tx.Order("id").Find(&rows).Error
	return toItems(rows), err
}

func (couponStatements) list(tx *gorm.DB) ([]inventory.Item, error) {
	var rows []CouponBatch
	err := tx.Order("id").Find(&rows).Error
	return toItems(rows), err
}

// get reads one item, or fails with gorm.ErrRecordNotFound.
func (productStatements) get(tx *gorm.DB, id int64) (inventory.Item, error) {
	var p Product
	err := tx.Take(&p, id).Error
	return p.item(), err
}

func (couponStatements) get(tx *gorm.DB, id int64) (inventory.Item, error) {
	var b CouponBatch
	err := tx.Take(&b, id).Error
	return b.item(), err
}

// readStock is the read of the lock stages' read-check-write, or
// gorm.ErrRecordNotFound:
//
//	SELECT stock FROM products WHERE id = ? LIMIT 1
func (productStatements) readStock(tx *gorm.DB, id int64) (int, error) {
	var p Product
	err := tx.Select("stock").Take(&p, id).Error
	return p.Stock, err
}

func (couponStatements) readStock(tx *gorm.DB, id int64) (int, error) {
	var b CouponBatch
	err := tx.Select("remaining").Take(&b, id).Error
	return b.Remaining, err
}

// setStock is the write of the lock stages' read-check-write: the naive
// computed write. n was computed from an earlier read, so two buyers who
// read the same stock both write the same n and one sale is lost: this is
// where the unlocked stage oversells. With a token, fencedWrite adds the
// fence (AND fence_token <= ?); without one (unlocked, local-mutex, a lock
// stage with fencing off: no lock the fleet shares) it moves the fence on,
// as every writer of the stock outside the fleet's lock does (fencedOff):
//
//	UPDATE products SET fence_token = fence_token + 1, stock = ? WHERE id = ?
func (productStatements) setStock(tx *gorm.DB, id int64, n int, token int64) *gorm.DB {
	return tx.Model(&Product{}).Where("id = ?", id).Scopes(fencedWrite(token)).Updates(computedStock("stock", n, token))
}

func (couponStatements) setStock(tx *gorm.DB, id int64, n int, token int64) *gorm.DB {
	return tx.Model(&CouponBatch{}).Where("id = ?", id).Scopes(fencedWrite(token)).Updates(computedStock("remaining", n, token))
}

// computedStock is what a computed write sets: the stock column, and the
// fence moved on when the write carries no token.
func computedStock(column string, n int, token int64) map[string]any {
	if token > 0 {
		return map[string]any{column: n}
	}
	return map[string]any{column: n, "fence_token": fencedOff}
}

// deduct is db-atomic's guarded decrement: the database checks and
// subtracts in one statement, under the row lock, so no buyer acts on a
// stale read. No row matched means sold out, outside the window, or no
// such item. With window (db-atomic; not the writes that follow a Redis
// stage's buy) the statement also checks the sale window against the
// database's clock (clock.inWindow). It moves the fence on (fencedOff):
//
//	UPDATE products SET stock = stock - ?, fence_token = fence_token + 1 WHERE id = ? AND stock >= ?
func (productStatements) deduct(tx *gorm.DB, id int64, q int, window string) *gorm.DB {
	return tx.Model(&Product{}).Where("id = ? AND stock >= ?", id, q).Scopes(inWindow(window)).
		Updates(map[string]any{"stock": gorm.Expr("stock - ?", q), "fence_token": fencedOff})
}

func (couponStatements) deduct(tx *gorm.DB, id int64, q int, window string) *gorm.DB {
	return tx.Model(&CouponBatch{}).Where("id = ? AND remaining >= ?", id, q).Scopes(inWindow(window)).
		Updates(map[string]any{"remaining": gorm.Expr("remaining - ?", q), "fence_token": fencedOff})
}

// inWindow is a gorm scope that adds the window condition cond, if any.
func inWindow(cond string) func(*gorm.DB) *gorm.DB {
	return func(tx *gorm.DB) *gorm.DB {
		if cond == "" {
			return tx
		}
		return tx.Where(cond)
	}
}

// claim records a lock holder's fencing token on the row; no row matches
// when a newer (or the same) token is recorded already:
//
//	UPDATE products SET fence_token = ? WHERE id = ? AND fence_token < ?
func (productStatements) claim(tx *gorm.DB, id, token int64) *gorm.DB {
	return tx.Model(&Product{}).Where("id = ?", id).Where(claimableBy(token)).Update("fence_token", token)
}

func (couponStatements) claim(tx *gorm.DB, id, token int64) *gorm.DB {
	return tx.Model(&CouponBatch{}).Where("id = ?", id).Where(claimableBy(token)).Update("fence_token", token)
}

// claimableBy and fencedWrite are the fence. Fencing tokens only grow: a
// holder claims the row with a token newer than any recorded, and its stock
// write lands only while no newer holder has claimed the row since, so a
// holder whose lock expired mid-sale writes nothing.
func claimableBy(token int64) clause.Expression {
	return clause.Lt{Column: "fence_token", Value: token}
}

// fencedWrite is a gorm scope: with a token (> 0), the write matches only
// while the row's fence is not newer than the token.
func fencedWrite(token int64) func(*gorm.DB) *gorm.DB {
	return func(tx *gorm.DB) *gorm.DB {
		if token <= 0 {
			return tx
		}
		return tx.Where(clause.Lte{Column: "fence_token", Value: token})
	}
}

// insertOrder records a purchase. The schema's unique keys refuse a second
// order of the same user (or number) with gorm.ErrDuplicatedKey.
func (productStatements) insertOrder(tx *gorm.DB, o inventory.Order) error {
	return tx.Create(newOrder(o)).Error
}

func (couponStatements) insertOrder(tx *gorm.DB, o inventory.Order) error {
	return tx.Create(newCouponGrab(o)).Error
}

// insertOrders records many purchases in one multi-row INSERT.
func (productStatements) insertOrders(tx *gorm.DB, orders []inventory.Order) error {
	rows := make([]*Order, len(orders))
	for i, o := range orders {
		rows[i] = newOrder(o)
	}
	return tx.Create(rows).Error
}

func (couponStatements) insertOrders(tx *gorm.DB, orders []inventory.Order) error {
	rows := make([]*CouponGrab, len(orders))
	for i, o := range orders {
		rows[i] = newCouponGrab(o)
	}
	return tx.Create(rows).Error
}

// restock sets the initial stock and the stock to n, and the sale window
// (NULL for a bound it does not have). A map, not a struct: gorm's Updates
// skips a struct's zero values, and 0 is a valid stock. It moves the fence
// on (fencedOff).
func (productStatements) restock(tx *gorm.DB, id int64, n int, w inventory.SaleWindow) *gorm.DB {
	return tx.Model(&Product{}).Where("id = ?", id).Updates(map[string]any{"initial_stock": n, "stock": n,
		"opens_at": NullStamp{Stamp{w.OpensAt}}, "closes_at": NullStamp{Stamp{w.ClosesAt}}, "fence_token": fencedOff})
}

func (couponStatements) restock(tx *gorm.DB, id int64, n int, w inventory.SaleWindow) *gorm.DB {
	return tx.Model(&CouponBatch{}).Where("id = ?", id).Updates(map[string]any{"total": n, "remaining": n,
		"opens_at": NullStamp{Stamp{w.OpensAt}}, "closes_at": NullStamp{Stamp{w.ClosesAt}}, "fence_token": fencedOff})
}

// fencedOff moves an item's fence one past the newest token recorded. The
// writers of the stock outside the fleet's lock set it with their write: a
// reset, a cancelled order's units coming back, the sales of the stages
// that take no lock (db-atomic, the writes after redis-atomic's and
// redis-stream's buys: sale.go's batch says it as fenceMovedOn) and a
// computed write without a token. They meet a holder when a stage switch
// lands mid-sale. A lock holder that claimed the row and read the stock
// before them then writes nothing (its write needs fence_token <= its
// token), instead of writing the stock it computed from its read over
// theirs. Tokens only grow, and the lock's next token is newer than the
// fence (its tokens are at least the Redis server's time in microseconds,
// and one more than the last).
var fencedOff = gorm.Expr(fenceMovedOn)

// fenceMovedOn is the new fence of a write outside the fleet's lock.
const fenceMovedOn = "fence_token + 1"

// windowAt reads the item's stock and its window against the database's
// clock, in one statement; gorm.ErrRecordNotFound when there is no item:
//
//	SELECT stock, opens_at IS NOT NULL AS opens, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), opens_at) AS opens_in_us,
//	  closes_at IS NOT NULL AS closes, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), closes_at) AS closes_in_us
//	FROM products WHERE id = ?
func (productStatements) windowAt(tx *gorm.DB, c clock, id int64) (windowRow, error) {
	return readWindow(tx.Model(&Product{}), c, "stock", id)
}

func (couponStatements) windowAt(tx *gorm.DB, c clock, id int64) (windowRow, error) {
	return readWindow(tx.Model(&CouponBatch{}), c, "remaining", id)
}

// windowRow is what windowAt reads.
type windowRow struct {
	Stock      int
	Opens      bool
	OpensInUs  *int64
	Closes     bool
	ClosesInUs *int64
}

func readWindow(tx *gorm.DB, c clock, stock string, id int64) (windowRow, error) {
	var r windowRow
	err := tx.Select(stock+" AS stock, opens_at IS NOT NULL AS opens, "+c.until("opens_at")+" AS opens_in_us, "+
		"closes_at IS NOT NULL AS closes, "+c.until("closes_at")+" AS closes_in_us").
		Where("id = ?", id).Take(&r).Error
	return r, err
}

func (r windowRow) window() inventory.WindowAt {
	us := func(p *int64) time.Duration {
		if p == nil {
			return 0
		}
		return time.Duration(*p) * time.Microsecond
	}
	return inventory.WindowAt{Opens: r.Opens, OpensIn: us(r.OpensInUs), Closes: r.Closes, ClosesIn: us(r.ClosesInUs)}
}

// clock is the database's own clock, in the SQL of its dialect: the
// reference clock of the SQL stages' window check.
type clock struct{ dialect Dialect }

// now is the database's now, as a value comparable with a window column
// wrapped by at.
func (c clock) now() string {
	if c.dialect == MySQL {
		return "UTC_TIMESTAMP(6)"
	}
	return "julianday('now')" // SQLite keeps the columns as text: compare day numbers
}

// at is a timestamp column, comparable with now.
func (c clock) at(col string) string {
	if c.dialect == MySQL {
		return col
	}
	return "julianday(" + col + ")"
}

// until is the microseconds from now to the column (negative once past;
// NULL for NULL).
func (c clock) until(col string) string {
	if c.dialect == MySQL {
		return "TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), " + col + ")"
	}
	return "CAST(ROUND((julianday(" + col + ") - julianday('now')) * 86400000000) AS INTEGER)"
}

// inWindow is the condition that the database's now is in the row's
// window: the part db-atomic's guarded decrement adds.
func (c clock) inWindow() string {
	return "(opens_at IS NULL OR " + c.at("opens_at") + " <= " + c.now() + ") AND (closes_at IS NULL OR " + c.at("closes_at") + " > " + c.now() + ")"
}

// deleteOrders deletes every order of the item.
func (productStatements) deleteOrders(tx *gorm.DB, id int64) *gorm.DB {
	return tx.Where("product_id = ?", id).Delete(&Order{})
}

func (couponStatements) deleteOrders(tx *gorm.DB, id int64) *gorm.DB {
	return tx.Where("batch_id = ?", id).Delete(&CouponGrab{})
}

// audit reads the stock and the orders' totals in one statement, so they
// come from one snapshot; gorm.ErrRecordNotFound when there is no item.
// Only live orders (confirmed, paid) count as sold: a cancelled order gave
// its units back and a failed one never took any.
func (productStatements) audit(tx *gorm.DB, id int64) (a inventory.Audit, err error) {
	err = tx.Model(&Product{}).
		Select("products.initial_stock, products.stock, "+tally("orders")).
		Joins("LEFT JOIN orders ON orders.product_id = products.id").
		Where("products.id = ?", id).
		Group("products.id, products.initial_stock, products.stock").
		Take(&a).Error
	return a, err
}

func (couponStatements) audit(tx *gorm.DB, id int64) (a inventory.Audit, err error) {
	err = tx.Model(&CouponBatch{}).
		Select("coupon_batches.total AS initial_stock, coupon_batches.remaining AS stock, "+tally("coupon_grabs")).
		Joins("LEFT JOIN coupon_grabs ON coupon_grabs.batch_id = coupon_batches.id").
		Where("coupon_batches.id = ?", id).
		Group("coupon_batches.id, coupon_batches.total, coupon_batches.remaining").
		Take(&a).Error
	return a, err
}

// tally sums one item's order rows by status, for audit.
func tally(t string) string {
	units := func(cond string) string {
		return "COALESCE(SUM(CASE WHEN " + t + "." + cond + " THEN " + t + ".quantity END), 0)"
	}
	count := func(cond string) string { return "COUNT(CASE WHEN " + t + "." + cond + " THEN 1 END)" }
	live := "status IN ('confirmed', 'paid')"
	return units(live) + " AS sold, " + count(live) + " AS orders, " +
		units("status = 'paid'") + " AS paid, " +
		units("status = 'cancelled'") + " AS cancelled, " + count("status = 'cancelled'") + " AS cancelled_orders, " +
		count("status = 'failed'") + " AS failed"
}

// buyers lists the users who hold an order for the item.
func (productStatements) buyers(tx *gorm.DB, id int64) (users []string, err error) {
	err = tx.Model(&Order{}).Where("product_id = ?", id).Pluck("user_id", &users).Error
	return users, err
}

func (couponStatements) buyers(tx *gorm.DB, id int64) (users []string, err error) {
	err = tx.Model(&CouponGrab{}).Where("batch_id = ?", id).Pluck("user_id", &users).Error
	return users, err
}

// order reads one order by its number, whatever its status;
// gorm.ErrRecordNotFound when none was written.
func (productStatements) order(tx *gorm.DB, no string) (inventory.Order, error) {
	var r Order
	err := tx.Where("order_no = ?", no).Take(&r).Error
	return r.order(), err
}

func (couponStatements) order(tx *gorm.DB, no string) (inventory.Order, error) {
	var g CouponGrab
	err := tx.Where("grab_no = ?", no).Take(&g).Error
	return g.order(), err
}

// orderOf reads the order a user holds for an item (the unique key allows
// one per buyer); gorm.ErrRecordNotFound when there is none.
func (productStatements) orderOf(tx *gorm.DB, id int64, user string) (inventory.Order, error) {
	var r Order
	err := tx.Where("product_id = ? AND user_id = ?", id, user).Take(&r).Error
	return r.order(), err
}

func (couponStatements) orderOf(tx *gorm.DB, id int64, user string) (inventory.Order, error) {
	var g CouponGrab
	err := tx.Where("batch_id = ? AND user_id = ?", id, user).Take(&g).Error
	return g.order(), err
}

// findOrder looks an order up by its number; gorm.ErrRecordNotFound when
// none was committed.
func (productStatements) findOrder(tx *gorm.DB, no string) *gorm.DB {
	return tx.Select("id").Where("order_no = ?", no).Take(&Order{})
}

func (couponStatements) findOrder(tx *gorm.DB, no string) *gorm.DB {
	return tx.Select("id").Where("grab_no = ?", no).Take(&CouponGrab{})
}

// The payment lifecycle, for products only: coupon grabs are free. Every
// change of status is one conditional UPDATE on the order's row, so two
// instances that race to pay and to cancel, or to cancel twice, cannot
// both win: the row lock orders them, and the second matches no row.

// pay marks a confirmed order paid while its payment window is open:
//
//	UPDATE orders SET status = 'paid' WHERE order_no = ? AND status = 'confirmed' AND created_at >= ?
func (productStatements) pay(tx *gorm.DB, no string, since time.Time) *gorm.DB {
	return tx.Model(&Order{}).Where("order_no = ? AND status = ? AND created_at >= ?", no, inventory.StatusConfirmed, since).
		Update("status", inventory.StatusPaid)
}

// unpaid lists confirmed orders created before cutoff, oldest first.
func (productStatements) unpaid(tx *gorm.DB, cutoff time.Time, limit int) ([]inventory.Order, error) {
	var rows []Order
	err := tx.Where("status = ? AND created_at < ?", inventory.StatusConfirmed, cutoff).Order("created_at").Limit(limit).Find(&rows).Error
	out := make([]inventory.Order, len(rows))
	for i, r := range rows {
		out[i] = r.order()
	}
	return out, err
}

// cancel cancels one unpaid order whose window has closed, and records the
// Redis copy generation its units are owed to (gen, or "" for none):
//
//	UPDATE orders SET status = 'cancelled', copy_gen = ? WHERE order_no = ? AND status = 'confirmed' AND created_at < ?
func (productStatements) cancel(tx *gorm.DB, no string, cutoff time.Time, gen string) *gorm.DB {
	return tx.Model(&Order{}).Where("order_no = ? AND status = ? AND created_at < ?", no, inventory.StatusConfirmed, cutoff).
		Updates(map[string]any{"status": inventory.StatusCancelled, "copy_gen": gen})
}

// restore returns the units of a cancelled order of q units to the stock,
// but never more than really left it. Under a stage that oversold
// (unlocked, local-mutex) more units were sold than left the stock: the
// gap, sold - (initial - stock), is closed first, and only the rest comes
// back, so the stock never rises above its initial amount and the audit
// of an oversold sale still adds up. Run after the order is marked
// cancelled, so that "sold" no longer counts it:
//
//	UPDATE products SET stock = stock + GREATEST(0, LEAST(?, initial_stock - stock -
//	  (SELECT COALESCE(SUM(quantity), 0) FROM orders WHERE product_id = ? AND status IN ('confirmed', 'paid'))))
//	WHERE id = ?
//
// (written with CASE, which MySQL and SQLite share). Under the safe stages
// the gap is 0 and all q units come back.
func (productStatements) restore(tx *gorm.DB, id int64, q int) *gorm.DB {
	room := "initial_stock - stock - (SELECT COALESCE(SUM(quantity), 0) FROM orders WHERE product_id = ? AND status IN (?, ?))"
	back := "CASE WHEN " + room + " <= 0 THEN 0 WHEN " + room + " < ? THEN " + room + " ELSE ? END"
	paid, confirmed := inventory.StatusPaid, inventory.StatusConfirmed
	return tx.Model(&Product{}).Where("id = ?", id).Updates(map[string]any{"stock": gorm.Expr("stock + "+back,
		id, confirmed, paid, id, confirmed, paid, q, id, confirmed, paid, q), "fence_token": fencedOff})
}

// owed lists cancelled orders whose units the Redis copy has not got back.
func (productStatements) owed(tx *gorm.DB, limit int) ([]inventory.Owed, error) {
	var rows []Order
	err := tx.Where("status = ? AND copy_gen <> ''", inventory.StatusCancelled).Order("created_at").Limit(limit).Find(&rows).Error
	out := make([]inventory.Owed, len(rows))
	for i, r := range rows {
		out[i] = inventory.Owed{Order: r.order(), Gen: r.CopyGen}
	}
	return out, err
}

// clearOwed records that the Redis copy got the units back (or can no
// longer take them).
func (productStatements) clearOwed(tx *gorm.DB, no, gen string) *gorm.DB {
	return tx.Model(&Order{}).Where("order_no = ? AND copy_gen = ?", no, gen).Update("copy_gen", "")
}
