package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// A sale on MySQL in one round trip.
//
// A sale is one transaction: the order rows and the guarded decrement of
// the item's row. Sent a statement at a time it costs six round trips to
// MySQL (BEGIN, a prepare and an execute for each statement, COMMIT), and
// the row lock that the decrement takes is held across the COMMIT's round
// trip, while every other buyer of the item waits. On a busy box each
// round trip costs far more than MySQL's own work. So on MySQL the Ledger
// sends the whole transaction as one multi-statement:
//
//	START TRANSACTION;
//	INSERT INTO orders (...) VALUES (?, ...), (?, ...);
//	UPDATE products SET stock = stock - ?, fence_token = fence_token + 1, last_sale = ? WHERE id = ? AND stock >= ?;
//	SET @seckill_sold = (SELECT last_sale = ? FROM products WHERE id = ?);
//	DELETE FROM orders WHERE @seckill_sold IS NOT TRUE AND order_no IN (?, ...);
//	COMMIT
//
// The row stays locked only while MySQL runs the rest of the batch. As in
// the transaction of separate statements, the orders go in first, so a
// repeat buyer fails on the unique key without touching the hot row. When
// the decrement matches no row (sold out, outside the sale window, or no
// such item), the DELETE takes this batch's orders out again before the
// COMMIT, so nothing is written; the reply's row counts tell the outcomes
// apart. A statement that fails (a duplicate key, a deadlock) ends the
// batch with its transaction open: the Ledger rolls it back on the same
// connection before that connection goes back to the pool, or closes the
// connection, which makes MySQL roll it back.
//
// Whether the decrement took the units is read from the data: the UPDATE
// writes the batch's own mark (a random nonce) into the row it decrements,
// the SET reads whether the row carries that mark (NULL when there is no
// row), and the DELETE keeps the orders only if it does. Only this
// transaction can have written the mark, and it holds the row's lock until
// its COMMIT. An earlier version kept ROW_COUNT() in the variable instead.
// That is only as good as the server's bookkeeping, and MariaDB answers
// ROW_COUNT() with -1 in a batch whose client hung up while it waited
// (TestSaleWhoseBuyerLeftWhileItWaited): the DELETE took nothing back, the
// COMMIT wrote orders whose units never left, and db-atomic ended a wrk
// crowd with 101 orders for 100 units. (A DELETE that reads the mark in a
// NOT EXISTS subquery is as safe, and cost 5 to 9% more time and MariaDB
// CPU per contended sale in BenchmarkRedisAtomicSales/mysql/one-per-sale.)
//
// A sale whose deadline passes while MySQL runs it is cut off as a COMMIT
// whose answer was lost would be: its outcome is unknown. MySQL has the
// whole batch already and, once the item's row is free, may still commit
// it (TestSaleCutOffByItsDeadline). The callers treat a deadline so:
// redis-atomic gives the unit back to its copy, which the reconcile job
// corrects if the sale did commit (a copy above the database can only turn
// a buyer away), and the HTTP layer marks the Idempotency-Key's outcome
// unknown, so the buyer's retry is answered with the order.
//
// A lock holder's fenced write (WriteComputed with a token) is the same
// batch, whose UPDATE sets the stock the holder computed, fenced by its
// token, instead of decrementing it: a holder's round trips are waited
// through by every buyer behind the lock. An unfenced write stays a
// transaction of separate statements (see WriteComputed).
//
// The driver fills in the arguments itself (interpolateParams, escaped for
// the connection's character set): MySQL cannot prepare a multi-statement.
// The demo's SQLite runs in process, with no round trips to save, and keeps
// the transaction of separate statements.

// saleTables names what a sale writes, for one kind of item.
type saleTables struct {
	items, stock string // the item table and its stock column
	orders, no   string // the order table and its order number column
	columns      string // the order columns saleRow fills, in its order
}

var (
	productSale = saleTables{items: "products", stock: "stock", orders: "orders", no: "order_no",
		columns: "order_no, product_id, user_id, quantity, stage, instance, created_at, status, written_at"}
	couponSale = saleTables{items: "coupon_batches", stock: "remaining", orders: "coupon_grabs", no: "grab_no",
		columns: "grab_no, batch_id, user_id, quantity, stage, instance, created_at, status, written_at"}
)

func (productStatements) sale() saleTables { return productSale }
func (couponStatements) sale() saleTables  { return couponSale }

// saleRow is an order's values, as saleTables.columns lists them, and as
// newOrder and newCouponGrab write them.
func saleRow(o inventory.Order) []any {
	return []any{o.No, o.ItemID, o.UserID, int64(o.Quantity), o.Stage, o.Instance, o.CreatedAt, rowStatus(o), writtenAt(o)}
}

// The statements of a sale batch, in order; the reply has a row count for
// each.
const (
	saleBegin = iota
	saleInsert
	saleDecrement
	saleMarked
	saleTakeBack
	saleCommit
	saleStatements
)

// batch returns the multi-statement of a sale of orders (of one item, with
// total units) under the given mark, and its arguments. The decrement
// moves the item's fence on, as every stock writer that takes no lock does
// (see fencedOff). A window condition
// (clock.inWindow), when given, joins the decrement's WHERE: db-atomic
// checks the sale window in the very statement that takes the units.
func (t saleTables) batch(orders []inventory.Order, total int, window, mark string) (string, []driver.NamedValue) {
	cond := " AND " + t.stock + " >= ?"
	if window != "" {
		cond += " AND " + window
	}
	return t.write(orders, t.stock+" = "+t.stock+" - ?, fence_token = "+fenceMovedOn, int64(total), cond, []any{int64(total)}, mark)
}

// computedBatch returns the multi-statement of a lock holder's fenced write
// (WriteComputed with a token): the same batch as a sale's, whose UPDATE
// sets the stock to the value the holder computed instead of decrementing
// it, and matches only while no newer holder claimed the row.
func (t saleTables) computedBatch(o inventory.Order, newStock int, token int64, mark string) (string, []driver.NamedValue) {
	return t.write([]inventory.Order{o}, t.stock+" = ?", int64(newStock), " AND fence_token <= ?", []any{token}, mark)
}

// write builds a batch: the orders, then "UPDATE items SET set, last_sale =
// mark WHERE id = ? cond", the read of the mark, the take-back and the
// COMMIT (see the top of this file). set holds one placeholder, for
// setArg; cond one per condArgs.
func (t saleTables) write(orders []inventory.Order, set string, setArg any, cond string, condArgs []any, mark string) (string, []driver.NamedValue) {
	cols := strings.Count(t.columns, ",") + 1
	row := "(?" + strings.Repeat(", ?", cols-1) + ")"
	args := make([]driver.NamedValue, 0, (cols+1)*len(orders)+5+len(condArgs))
	add := func(v any) { args = append(args, driver.NamedValue{Ordinal: len(args) + 1, Value: v}) }
	var b strings.Builder
	b.WriteString("START TRANSACTION;\n")
	fmt.Fprintf(&b, "INSERT INTO %s (%s) VALUES ", t.orders, t.columns)
	for i, o := range orders {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
		for _, v := range saleRow(o) {
			add(v)
		}
	}
	fmt.Fprintf(&b, ";\nUPDATE %s SET %s, last_sale = ? WHERE id = ?%s;\n", t.items, set, cond)
	add(setArg)
	add(mark)
	add(orders[0].ItemID)
	for _, a := range condArgs {
		add(a)
	}
	fmt.Fprintf(&b, "SET @seckill_sold = (SELECT last_sale = ? FROM %s WHERE id = ?);\n", t.items)
	add(mark)
	add(orders[0].ItemID)
	fmt.Fprintf(&b, "DELETE FROM %s WHERE @seckill_sold IS NOT TRUE AND %s IN (?%s);\n", t.orders, t.no, strings.Repeat(", ?", len(orders)-1))
	for _, o := range orders {
		add(o.No)
	}
	b.WriteString("COMMIT")
	return b.String(), args
}

// saleMark returns a fresh mark for a sale batch: 128 random bits, in hex.
func saleMark() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// rollbackWait bounds the rollback after a failed batch; a connection that
// cannot roll back in time is closed instead.
const rollbackWait = 5 * time.Second

// sell writes orders (of one item, with total units) as one batch,
// retried like tx when InnoDB picked it as a deadlock victim or timed out
// its row lock. It returns errSoldOutOrMissing when the decrement matched
// no row (nothing was written).
func (l *Ledger) sell(ctx context.Context, orders []inventory.Order, total int, window string) error {
	// One mark for every attempt: a batch that failed rolled back, and its
	// mark with it.
	query, args := l.statements.sale().batch(orders, total, window, saleMark())
	return l.runWrite(ctx, orders, query, args)
}

// runWrite sends a batch of saleTables.write for orders, retried like tx
// when InnoDB picked it as a deadlock victim or timed out its row lock. It
// returns errSoldOutOrMissing when the UPDATE matched no row (nothing was
// written).
func (l *Ledger) runWrite(ctx context.Context, orders []inventory.Order, query string, args []driver.NamedValue) error {
	counts, err := l.sendWrite(ctx, query, args, len(orders) > 1)
	if err != nil {
		return err
	}
	if len(counts) != saleStatements {
		return fmt.Errorf("a sale of %d statements answered with %d row counts", saleStatements, len(counts))
	}
	n := int64(len(orders))
	switch {
	case counts[saleInsert] != n:
	case counts[saleDecrement] == 1 && counts[saleTakeBack] == 0:
		return nil
	case counts[saleDecrement] == 0 && counts[saleTakeBack] == n:
		return errSoldOutOrMissing
	}
	// Not possible with the batch above; said rather than trusted.
	return fmt.Errorf("a sale of %d orders of %s %d answered with row counts %v", n, l.table, orders[0].ItemID, counts)
}

// sendWrite sends a batch that ends in its COMMIT, again (up to 3 times)
// when InnoDB picked it as a deadlock victim or timed out its row lock,
// and returns the rows each statement affected. A group's batch (group:
// it carries several buyers) goes out on a connection checked first
// (DB.batch).
func (l *Ledger) sendWrite(ctx context.Context, query string, args []driver.NamedValue, group bool) ([]int64, error) {
	var counts []int64
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		counts, err = l.db.batch(ctx, query, args, group)
		if !retryable(err) {
			break
		}
	}
	var unsent notSent
	switch {
	case errors.As(err, &unsent):
		return nil, translate(unsent.err) // nothing reached MySQL
	case err != nil:
		return nil, translate(commitLost(err)) // the batch ends in its COMMIT
	}
	return counts, nil
}

// notSent is an error of DB.batch from before it sent anything: its
// outcome is known (nothing was written), whatever it says, a deadline
// included.
type notSent struct{ err error }

func (e notSent) Error() string { return e.err.Error() }
func (e notSent) Unwrap() error { return e.err }

// batch runs a multi-statement on one MySQL connection and returns the rows
// each statement affected. A failed statement's transaction is rolled back on
// that connection (see the top of this file). With checked, the batch goes
// out on a connection whose socket was read first (liveConn).
func (d *DB) batch(ctx context.Context, query string, args []driver.NamedValue, checked bool) ([]int64, error) {
	d.record(query)
	sqlDB, err := d.gdb.DB()
	if err != nil {
		return nil, notSent{err}
	}
	var conn *sql.Conn
	if checked {
		conn, err = liveConn(ctx, sqlDB)
	} else {
		conn, err = sqlDB.Conn(ctx)
	}
	if err != nil {
		return nil, notSent{err} // no connection by the deadline, or a refused dial
	}
	defer func() { _ = conn.Close() }()
	var counts []int64
	var failed error
	err = conn.Raw(func(dc any) error {
		ex, ok := dc.(driver.ExecerContext)
		if !ok {
			return fmt.Errorf("driver connection %T cannot run a statement batch", dc)
		}
		res, err := ex.ExecContext(ctx, query, args)
		if err != nil {
			failed = err
			if errors.Is(err, driver.ErrSkip) {
				return nil // the driver refused before sending anything
			}
			if v, ok := dc.(driver.Validator); ok && v.IsValid() && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
				// The context was over before the driver sent anything: a
				// context that ends on the way closes the connection.
				failed = notSent{err}
				return nil
			}
			d.record("ROLLBACK")
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackWait)
			defer cancel()
			if _, err := ex.ExecContext(rctx, "ROLLBACK", nil); err != nil {
				return driver.ErrBadConn // closes the connection: MySQL rolls back
			}
			return nil
		}
		r, ok := res.(mysqldriver.Result)
		if !ok {
			return fmt.Errorf("driver result %T has no row counts per statement", res)
		}
		counts = r.AllRowsAffected()
		return nil
	})
	switch {
	case errors.Is(failed, driver.ErrSkip):
		return nil, errors.New("the MySQL driver would not run a statement batch: the DSN needs interpolateParams=true and multiStatements=true (OpenMySQL sets both)")
	case failed != nil:
		return nil, failed
	case err != nil:
		return nil, err
	}
	return counts, nil
}

// liveConn returns a connection of the pool whose socket a non-blocking
// read found open, as the driver's liveness check (CheckConnLiveness,
// off for the store: store.go) would: a connection the server closed
// while it was idle (a KILL, a restart, a failover, an idle timeout) is
// dropped, and the next one tried, up to the pool's size, then a freshly
// dialled one. A group commit's batch carries several buyers: a stale
// connection would fail them all, where one lone sale pays for it
// otherwise (TestKilledConnectionsCostNoGroup). The check is one system
// call a group.
func liveConn(ctx context.Context, sqlDB *sql.DB) (*sql.Conn, error) {
	for tries := sqlDB.Stats().MaxOpenConnections + 1; ; tries-- {
		conn, err := sqlDB.Conn(ctx)
		if err != nil || tries <= 0 {
			return conn, err
		}
		stale := false
		err = conn.Raw(func(dc any) error {
			if c, ok := dc.(boundedConn); ok && !c.alive() {
				stale = true
				return driver.ErrBadConn // dropped, not pooled again
			}
			return nil
		})
		if !stale {
			if err != nil {
				_ = conn.Close()
				return nil, err
			}
			return conn, nil
		}
		_ = conn.Close()
	}
}

// itemTotal is the units a group of orders takes from one item.
type itemTotal struct {
	id    int64
	total int
}

// acrossBatch returns the multi-statement of a sale of orders of several
// items (one itemTotal each, in ascending id order) under the given mark:
//
//	START TRANSACTION;
//	INSERT INTO orders (...) VALUES (?, ...), (?, ...);
//	UPDATE products SET stock = stock - ?, ..., last_sale = ? WHERE id = ? AND stock >= ?;  -- one per item
//	SET @seckill_sold = (SELECT COUNT(*) = ? FROM products WHERE id IN (?, ...) AND last_sale = ?);
//	UPDATE products SET stock = stock + CASE id WHEN ? THEN ? ... END WHERE @seckill_sold IS NOT TRUE AND id IN (?, ...) AND last_sale = ?;
//	DELETE FROM orders WHERE @seckill_sold IS NOT TRUE AND order_no IN (?, ...);
//	COMMIT
//
// Every item's decrement must carry the mark for the sale to stand; when
// one matched no row, the second UPDATE gives the others their units back
// and the DELETE takes the orders out, before the COMMIT: all or nothing,
// as in a sale of one item. The rows are locked in ascending id order, so
// two groups of any instances that share items wait for each other, one
// behind the other, and never deadlock on them.
func (t saleTables) acrossBatch(orders []inventory.Order, items []itemTotal, mark string) (string, []driver.NamedValue) {
	cols := strings.Count(t.columns, ",") + 1
	row := "(?" + strings.Repeat(", ?", cols-1) + ")"
	args := make([]driver.NamedValue, 0, (cols+1)*len(orders)+6*len(items)+4)
	add := func(vs ...any) {
		for _, v := range vs {
			args = append(args, driver.NamedValue{Ordinal: len(args) + 1, Value: v})
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "START TRANSACTION;\nINSERT INTO %s (%s) VALUES ", t.orders, t.columns)
	for i, o := range orders {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
		add(saleRow(o)...)
	}
	b.WriteString(";\n")
	ids := "?" + strings.Repeat(", ?", len(items)-1)
	for _, it := range items {
		fmt.Fprintf(&b, "UPDATE %s SET %s = %s - ?, fence_token = %s, last_sale = ? WHERE id = ? AND %s >= ?;\n", t.items, t.stock, t.stock, fenceMovedOn, t.stock)
		add(int64(it.total), mark, it.id, int64(it.total))
	}
	fmt.Fprintf(&b, "SET @seckill_sold = (SELECT COUNT(*) = ? FROM %s WHERE id IN (%s) AND last_sale = ?);\n", t.items, ids)
	add(int64(len(items)))
	for _, it := range items {
		add(it.id)
	}
	add(mark)
	fmt.Fprintf(&b, "UPDATE %s SET %s = %s + CASE id%s END WHERE @seckill_sold IS NOT TRUE AND id IN (%s) AND last_sale = ?;\n",
		t.items, t.stock, t.stock, strings.Repeat(" WHEN ? THEN ?", len(items)), ids)
	for _, it := range items {
		add(it.id, int64(it.total))
	}
	for _, it := range items {
		add(it.id)
	}
	add(mark)
	fmt.Fprintf(&b, "DELETE FROM %s WHERE @seckill_sold IS NOT TRUE AND %s IN (?%s);\nCOMMIT", t.orders, t.no, strings.Repeat(", ?", len(orders)-1))
	for _, o := range orders {
		add(o.No)
	}
	return b.String(), args
}

// sellAcross writes orders of several items (items, in ascending id
// order) as one batch of acrossBatch. When an item's decrement matched no
// row it returns that item's id and errSoldOutOrMissing, and nothing was
// written.
func (l *Ledger) sellAcross(ctx context.Context, orders []inventory.Order, items []itemTotal) (int64, error) {
	query, args := l.statements.sale().acrossBatch(orders, items, saleMark())
	counts, err := l.sendWrite(ctx, query, args, len(orders) > 1)
	if err != nil {
		return 0, err
	}
	k, n := len(items), int64(len(orders))
	if len(counts) != k+6 {
		return 0, fmt.Errorf("a sale of %d statements answered with %d row counts", k+6, len(counts))
	}
	decremented := counts[2 : 2+k]
	restored, takenBack := counts[k+3], counts[k+4]
	short, took := int64(0), int64(0)
	for i, c := range decremented {
		took += c
		if c == 0 && short == 0 {
			short = items[i].id
		}
	}
	switch {
	case counts[1] != n:
	case short == 0 && took == int64(k) && restored == 0 && takenBack == 0:
		return 0, nil
	case short != 0 && restored == took && takenBack == n:
		return short, errSoldOutOrMissing
	}
	// Not possible with the batch above; said rather than trusted.
	return 0, fmt.Errorf("a sale of %d orders of %d %s answered with row counts %v", n, k, l.table, counts)
}
