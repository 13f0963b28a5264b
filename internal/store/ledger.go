package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// Ledger is an inventory.Store over one kind of item: products and their
// orders, or coupon batches and their grabs.
type Ledger struct {
	db         *DB
	table      string // the item table, for error messages
	statements statements
}

var _ interface {
	inventory.Store
	inventory.FenceReader
	inventory.WindowReader
	inventory.WindowDeducter
	inventory.WindowSetter
	inventory.Clock
} = (*Ledger)(nil)

// statements are the SQL statements of one kind of item (statements.go),
// written in the words of its own tables. The Ledger runs them the same way
// for both kinds: which share a transaction, what "no row" means, which
// errors are retried.
type statements interface {
	list(tx *gorm.DB) ([]inventory.Item, error)
	get(tx *gorm.DB, id int64) (inventory.Item, error)
	readStock(tx *gorm.DB, id int64) (int, error)
	setStock(tx *gorm.DB, id int64, n int, token int64) *gorm.DB
	deduct(tx *gorm.DB, id int64, q int, window string) *gorm.DB
	claim(tx *gorm.DB, id, token int64) *gorm.DB
	insertOrder(tx *gorm.DB, o inventory.Order) error
	insertOrders(tx *gorm.DB, orders []inventory.Order) error
	restock(tx *gorm.DB, id int64, n int, w inventory.SaleWindow) *gorm.DB
	windowAt(tx *gorm.DB, c clock, id int64) (windowRow, error)
	deleteOrders(tx *gorm.DB, id int64) *gorm.DB
	audit(tx *gorm.DB, id int64) (inventory.Audit, error)
	buyers(tx *gorm.DB, id int64) ([]string, error)
	sale() saleTables
	findOrder(tx *gorm.DB, no string) *gorm.DB
	order(tx *gorm.DB, no string) (inventory.Order, error)
	orderOf(tx *gorm.DB, id int64, user string) (inventory.Order, error)
}

// paymentStatements are the payment lifecycle's statements: products have
// them, coupon batches (free) do not.
type paymentStatements interface {
	pay(tx *gorm.DB, no string, since time.Time) *gorm.DB
	unpaid(tx *gorm.DB, cutoff time.Time, limit int) ([]inventory.Order, error)
	cancel(tx *gorm.DB, no string, cutoff time.Time, gen string) *gorm.DB
	restore(tx *gorm.DB, id int64, q int) *gorm.DB
	owed(tx *gorm.DB, limit int) ([]inventory.Owed, error)
	clearOwed(tx *gorm.DB, no, gen string) *gorm.DB
}

// Products returns the ledger of products and their orders.
func (d *DB) Products() *Ledger {
	return &Ledger{db: d, table: "products", statements: productStatements{}}
}

// Coupons returns the ledger of coupon batches and their grabs.
func (d *DB) Coupons() *Ledger {
	return &Ledger{db: d, table: "coupon_batches", statements: couponStatements{}}
}

func (l *Ledger) conn(ctx context.Context) *gorm.DB { return l.db.gdb.WithContext(ctx) }

// List returns every item, by id.
func (l *Ledger) List(ctx context.Context) ([]inventory.Item, error) {
	items, err := l.statements.list(l.conn(ctx))
	if err != nil {
		return nil, translate(fmt.Errorf("list %s: %w", l.table, err))
	}
	return items, nil
}

// Get returns one item, or inventory.ErrNotFound.
func (l *Ledger) Get(ctx context.Context, id int64) (inventory.Item, error) {
	it, err := l.statements.get(l.conn(ctx), id)
	if err != nil {
		return inventory.Item{}, translate(fmt.Errorf("get %s %d: %w", l.table, id, err))
	}
	return it, nil
}

// Audit reads stock and order totals of one item in a single statement, so
// that the numbers come from one consistent snapshot. It returns
// inventory.ErrNotFound for an unknown item.
func (l *Ledger) Audit(ctx context.Context, id int64) (inventory.Audit, error) {
	a, err := l.statements.audit(l.conn(ctx), id)
	if err != nil {
		return inventory.Audit{}, translate(fmt.Errorf("audit %s %d: %w", l.table, id, err))
	}
	a.ItemID = id
	return a, nil
}

// Reset deletes the item's orders and sets initial stock and stock to n, or
// returns inventory.ErrNotFound. The item is then always on sale (no
// window). The fencing token moves one on (tokens only grow): a lock
// holder that read the stock before the reset writes nothing.
func (l *Ledger) Reset(ctx context.Context, id int64, n int) error {
	return l.ResetSale(ctx, id, n, inventory.SaleWindow{})
}

// ResetSale is Reset that also sets the item's sale window.
func (l *Ledger) ResetSale(ctx context.Context, id int64, n int, w inventory.SaleWindow) error {
	return l.tx(ctx, func(tx *gorm.DB) error {
		res := l.statements.restock(tx, id, n, w)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return fmt.Errorf("%s %d: %w", l.table, id, inventory.ErrNotFound)
		}
		return l.statements.deleteOrders(tx, id).Error
	})
}

// ReadStock reads the stock in its own statement, outside any transaction.
// It returns inventory.ErrNotFound for an unknown item.
func (l *Ledger) ReadStock(ctx context.Context, id int64) (int, error) {
	stock, err := l.statements.readStock(l.conn(ctx), id)
	if err != nil {
		return 0, translate(fmt.Errorf("read stock of %s %d: %w", l.table, id, err))
	}
	return stock, nil
}

// Now reads the database's clock, in UTC: the reference clock of the SQL
// stages' window check, which the API shows beside an item's window.
func (l *Ledger) Now(ctx context.Context) (time.Time, error) {
	q := "SELECT UTC_TIMESTAMP(6)"
	if l.db.dialect == SQLite {
		q = "SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')"
	}
	var now Stamp
	if err := l.conn(ctx).Raw(q).Row().Scan(&now); err != nil {
		return time.Time{}, translate(fmt.Errorf("read the database's clock: %w", err))
	}
	return now.UTC(), nil
}

// WindowAt reads the item's sale window against the database's clock (the
// lock stages' check), or returns inventory.ErrNotFound.
func (l *Ledger) WindowAt(ctx context.Context, id int64) (inventory.WindowAt, error) {
	r, err := l.statements.windowAt(l.conn(ctx), clock{l.db.dialect}, id)
	if err != nil {
		return inventory.WindowAt{}, translate(fmt.Errorf("read the sale window of %s %d: %w", l.table, id, err))
	}
	return r.window(), nil
}

// Fence claims the item for a lock holder with the given token. It fails
// with inventory.ErrLockLost when a newer (or the same) token is recorded,
// and with inventory.ErrNotFound for an unknown item.
func (l *Ledger) Fence(ctx context.Context, id int64, token int64) error {
	res := l.statements.claim(l.conn(ctx), id, token)
	if res.Error != nil {
		return translate(fmt.Errorf("fence %s %d: %w", l.table, id, res.Error))
	}
	if res.RowsAffected == 0 {
		return l.missingOr(ctx, id, fmt.Errorf("%s %d: token %d is stale: %w", l.table, id, token, inventory.ErrLockLost))
	}
	return nil
}

// FenceAndRead is Fence followed by ReadStock, with Fence's answers, in
// one round trip on MySQL: a holder pays for each round trip of its
// section while the fleet waits for the lock. There the claim and the read
// go as one batch, and whether the claim took is read from the data, as a
// sale's outcome is (sale.go): the claim writes a fresh mark into the
// row's last_sale, and the read says whether the row carries it. A token
// equal to the recorded one is refused, as by Fence: two holders can carry
// one token when a failover re-issues it, and only the first may claim.
func (l *Ledger) FenceAndRead(ctx context.Context, id int64, token int64) (int, error) {
	if l.db.dialect != MySQL { // in process: no round trip to save
		if err := l.Fence(ctx, id, token); err != nil {
			return 0, err
		}
		return l.ReadStock(ctx, id)
	}
	t := l.statements.sale()
	mark := saleMark()
	q := fmt.Sprintf("UPDATE %s SET fence_token = ?, last_sale = ? WHERE id = ? AND fence_token < ?;\n"+
		"SELECT %s, COALESCE(last_sale = ?, FALSE), fence_token FROM %s WHERE id = ?", t.items, t.stock, t.items)
	fail := func(err error) (int, error) {
		return 0, translate(fmt.Errorf("fence and read %s %d: %w", l.table, id, err))
	}
	rows, err := l.conn(ctx).Raw(q, token, mark, id, token, mark, id).Rows()
	if err != nil {
		return fail(err)
	}
	defer func() { _ = rows.Close() }()
	var stock int
	var claimed bool
	var fence int64
	found := false
	for { // the UPDATE's result (no rows), then the SELECT's
		for rows.Next() {
			if err := rows.Scan(&stock, &claimed, &fence); err != nil {
				return fail(err)
			}
			found = true
		}
		if !rows.NextResultSet() {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	switch {
	case !found:
		return 0, fmt.Errorf("%s %d: %w", l.table, id, inventory.ErrNotFound)
	case !claimed:
		return 0, fmt.Errorf("%s %d: token %d is stale (%d recorded): %w", l.table, id, token, fence, inventory.ErrLockLost)
	}
	return stock, nil
}

// WriteComputed inserts o and writes newStock in one transaction. With a
// token (> 0), the write needs the item's fence to be no newer than the
// token, else it fails with inventory.ErrLockLost and writes nothing. A
// repeat buyer gets inventory.ErrAlreadyPurchased, a negative newStock
// inventory.ErrSoldOut (the CHECK constraint), an unknown item
// inventory.ErrNotFound.
func (l *Ledger) WriteComputed(ctx context.Context, o inventory.Order, newStock int, token int64) error {
	if l.db.dialect == MySQL && token > 0 {
		// One batch, like a sale (sale.go): the holder's write is the
		// longest part of the section, and every round trip of it is one
		// the rest of the fleet's buyers wait through for the lock. Only
		// a fenced write: MySQL runs a batch whose client hung up to its
		// end, and a write that lands after its buyer left is safe only
		// when a newer holder's claim fences it off. Without a token (the
		// teaching stages, fencing off) the write is a transaction of
		// separate statements, which a hang-up before its COMMIT rolls
		// back: else a buyer cut off while its write waited would write
		// its stale stock after the next buyer's, under a mutex it gave
		// up (TestCutOffUnfencedWriteDoesNotLandLate).
		mark := saleMark()
		l.db.freeze.arm(mark) // fault injection (freeze.go); nil in production
		query, args := l.statements.sale().computedBatch(o, newStock, token, mark)
		err := l.runWrite(ctx, []inventory.Order{o}, query, args)
		if errors.Is(err, errSoldOutOrMissing) {
			return fmt.Errorf("%s %d: write with token %d fenced off: %w", l.table, o.ItemID, token, inventory.ErrLockLost)
		}
		return err
	}
	err := l.tx(ctx, func(tx *gorm.DB) error {
		if err := l.statements.insertOrder(tx, o); err != nil {
			return err
		}
		res := l.statements.setStock(tx, o.ItemID, newStock, token)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			if token > 0 {
				return fmt.Errorf("%s %d: write with token %d fenced off: %w", l.table, o.ItemID, token, inventory.ErrLockLost)
			}
			return fmt.Errorf("%s %d: %w", l.table, o.ItemID, inventory.ErrNotFound)
		}
		return nil
	})
	if l.db.dialect == MySQL && errors.Is(err, inventory.ErrOutcomeUnknown) {
		return l.settlesWithTheRow(err, o.ItemID)
	}
	return err
}

// settlesWithTheRow returns err, the unknown outcome of a computed write
// on MySQL, as an inventory.Unsettled that settles once the write's
// transaction has ended on the server. That the client's COMMIT call
// returned does not say so: its connection may have broken with the
// COMMIT already on its way (in a socket buffer, a proxy, a server waiting
// for its log), and MySQL may commit it later. Until then the transaction
// holds the lock its UPDATE took on the item's row, so a locking read of
// the row gets through only once it has committed or rolled back, and the
// section's guard is kept until then (TestBrokenCommitKeepsTheGuard).
func (l *Ledger) settlesWithTheRow(err error, id int64) error {
	var u *inventory.Unsettled
	if errors.As(err, &u) {
		err = u.Unwrap() // the COMMIT's call returning is not the end
	}
	settled := make(chan struct{})
	go func() {
		defer close(settled)
		l.awaitRowFree(id)
	}()
	return inventory.NewUnsettled(err, settled)
}

// lockRowOnce runs the locking read query of the row id in a transaction
// of its own, which it rolls back: it has nothing to keep. It runs under
// the DB's life, so Close ends a read that still waits.
func (l *Ledger) lockRowOnce(query string, id int64) error {
	tx := l.conn(l.db.life).Begin()
	if tx.Error != nil {
		return tx.Error
	}
	defer tx.Rollback()
	var got int64
	return tx.Raw(query, id).Scan(&got).Error
}

// awaitRowFree returns once a locking read of the item's row got through
// on a connection of its own, trying again while the lock wait times out
// or MySQL cannot be reached, or once the database is closed (then the
// transaction it waited for may still be open: no write of this pool can
// follow it anyway).
func (l *Ledger) awaitRowFree(id int64) {
	query := fmt.Sprintf("SELECT id FROM %s WHERE id = ? FOR UPDATE", l.statements.sale().items)
	pause := 50 * time.Millisecond
	for {
		if l.lockRowOnce(query, id) == nil {
			return
		}
		select {
		case <-l.db.life.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// Deduct inserts o and decrements the stock only if enough is left, in one
// transaction (on MySQL sent as one batch of statements: sale.go). It fails
// with inventory.ErrSoldOut when too little is left,
// inventory.ErrAlreadyPurchased for a repeat buyer, inventory.ErrNotFound
// for an unknown item, inventory.ErrOverloaded when InnoDB rolled it back
// as a deadlock victim (or timed out its row lock) on every try. It does not look at the sale window: it writes
// what a Redis stage already sold (see DeductInWindow).
func (l *Ledger) Deduct(ctx context.Context, o inventory.Order) error {
	return l.deduct(ctx, o, "")
}

// DeductInWindow is Deduct whose guarded decrement also checks the sale
// window against the database's clock, in the same statement (db-atomic).
// Outside the window it fails with an *inventory.NotOpen or
// inventory.ErrSaleClosed.
func (l *Ledger) DeductInWindow(ctx context.Context, o inventory.Order) error {
	return l.deduct(ctx, o, clock{l.db.dialect}.inWindow())
}

func (l *Ledger) deduct(ctx context.Context, o inventory.Order, window string) error {
	var err error
	if l.db.dialect == MySQL {
		err = l.sell(ctx, []inventory.Order{o}, o.Quantity, window) // sale.go
	} else {
		err = l.deductInTx(ctx, o, window)
	}
	if retryable(err) {
		// InnoDB rolled back every try (the buys of one user that wait on
		// each other's order key deadlock when the first takes its order
		// back): nothing was written, and the buyer may come again. A
		// group (DeductAll) keeps the driver's error, so that its caller
		// writes the group's orders one by one.
		return fmt.Errorf("%s %d: %w (a lock conflict on every try): %w", l.table, o.ItemID, inventory.ErrOverloaded, err)
	}
	if errors.Is(err, errSoldOutOrMissing) {
		soldOut := fmt.Errorf("%s %d: %w", l.table, o.ItemID, inventory.ErrSoldOut)
		if window == "" {
			return l.missingOr(ctx, o.ItemID, soldOut)
		}
		return l.whyRefused(ctx, o, soldOut)
	}
	return err
}

// whyRefused explains a guarded decrement in the window that matched no
// row, by a second read against the database's clock, in the order of
// precedence: no such item, outside the window, sold out. A window that
// opened between the two statements, with the units there, was still shut
// when the decrement ran: the buyer hears it opened just now.
func (l *Ledger) whyRefused(ctx context.Context, o inventory.Order, soldOut error) error {
	r, err := l.statements.windowAt(l.conn(ctx), clock{l.db.dialect}, o.ItemID)
	if err != nil {
		return translate(fmt.Errorf("read the sale window of %s %d: %w", l.table, o.ItemID, err))
	}
	w := r.window()
	if err := w.Err(o.ItemID); err != nil {
		return err
	}
	if r.Stock >= o.Quantity && w.Opens {
		return &inventory.NotOpen{ItemID: o.ItemID}
	}
	return inventory.SoldOutAt(w, soldOut)
}

// deductInTx is Deduct as a transaction of separate statements.
func (l *Ledger) deductInTx(ctx context.Context, o inventory.Order, window string) error {
	return l.tx(ctx, func(tx *gorm.DB) error {
		// Insert first: a repeat buyer fails on the unique key without
		// touching the hot row, and the row lock the UPDATE takes is held
		// only for the rest of this short transaction.
		if err := l.statements.insertOrder(tx, o); err != nil {
			return err
		}
		res := l.statements.deduct(tx, o.ItemID, o.Quantity, window)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return errSoldOutOrMissing
		}
		return nil
	})
}

var errSoldOutOrMissing = errors.New("no row matched")

// DeductAll is Deduct for many orders of one item, in one transaction: one
// multi-row INSERT, one guarded decrement by their total. Either all are
// written or none: it fails with inventory.ErrSoldOut when the stock does
// not cover them all, inventory.ErrAlreadyPurchased when one of them (or
// its buyer) has a row already, inventory.ErrInvalid when they are not of
// one item. redis-stream's writers take orders in batches, so a batch costs
// the hot row one lock instead of one per order.
func (l *Ledger) DeductAll(ctx context.Context, orders []inventory.Order) error {
	if len(orders) == 0 {
		return nil
	}
	id, total := orders[0].ItemID, 0
	for _, o := range orders {
		if o.ItemID != id {
			return fmt.Errorf("%w: a batch holds orders of items %d and %d", inventory.ErrInvalid, id, o.ItemID)
		}
		total += o.Quantity
	}
	var err error
	if l.db.dialect == MySQL {
		err = l.sell(ctx, orders, total, "") // sale.go
	} else {
		err = l.tx(ctx, func(tx *gorm.DB) error {
			if err := l.statements.insertOrders(tx, orders); err != nil {
				return err
			}
			res := l.statements.deduct(tx, id, total, "")
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected == 0 {
				return errSoldOutOrMissing
			}
			return nil
		})
	}
	if errors.Is(err, errSoldOutOrMissing) {
		return l.missingOr(ctx, id, fmt.Errorf("%s %d: %d units for %d orders: %w", l.table, id, total, len(orders), inventory.ErrSoldOut))
	}
	return err
}

// DeductAcross is DeductAll for orders of one or more items, in one
// transaction: one multi-row INSERT, then one guarded decrement per item,
// by its orders' total, in ascending item id (on MySQL sent as one batch:
// sale.go). Rows locked in one order by every writer cannot deadlock, in
// one instance or across a fleet. Either all are written or none: it fails
// with inventory.ErrSoldOut when an item's stock does not cover its
// orders (the first such item, in id order, named),
// inventory.ErrAlreadyPurchased when one of them (or its buyer) has a row
// already, inventory.ErrNotFound for an unknown item. redis-atomic's group
// commit writes the sales of many items so when many sales run at once.
func (l *Ledger) DeductAcross(ctx context.Context, orders []inventory.Order) error {
	if len(orders) == 0 {
		return nil
	}
	items := totalsByItem(orders)
	var short int64
	var err error
	if l.db.dialect == MySQL {
		short, err = l.sellAcross(ctx, orders, items) // sale.go
	} else {
		err = l.tx(ctx, func(tx *gorm.DB) error {
			if err := l.statements.insertOrders(tx, orders); err != nil {
				return err
			}
			for _, it := range items {
				res := l.statements.deduct(tx, it.id, it.total, "")
				if res.Error != nil {
					return res.Error
				}
				if res.RowsAffected == 0 {
					short = it.id
					return errSoldOutOrMissing
				}
			}
			return nil
		})
	}
	if errors.Is(err, errSoldOutOrMissing) {
		return l.missingOr(ctx, short, fmt.Errorf("%s %d: too few units for a group of %d orders of %d items: %w", l.table, short, len(orders), len(items), inventory.ErrSoldOut))
	}
	return err
}

// totalsByItem returns the units orders take from each item, in ascending
// item id.
func totalsByItem(orders []inventory.Order) []itemTotal {
	var items []itemTotal
	for _, o := range orders {
		i, found := slices.BinarySearchFunc(items, o.ItemID, func(it itemTotal, id int64) int { return cmp.Compare(it.id, id) })
		if !found {
			items = slices.Insert(items, i, itemTotal{id: o.ItemID})
		}
		items[i].total += o.Quantity
	}
	return items
}

// GroupWriters is how many groups of sales the database takes at once to
// advantage: one on the embedded engine, which writes on one connection.
func (l *Ledger) GroupWriters() int {
	if l.db.dialect == MySQL {
		return mysqlGroupWriters
	}
	return 1
}

// mysqlGroupWriters is GroupWriters on MySQL: groups of different items
// write at once, each a few of the pool's connections (DefaultMaxConns).
const mysqlGroupWriters = 8

// missingOr returns ErrNotFound if the item does not exist, else err. It
// runs only after a guarded statement matched no row, never on a sale.
func (l *Ledger) missingOr(ctx context.Context, id int64, err error) error {
	if _, gerr := l.ReadStock(ctx, id); errors.Is(gerr, inventory.ErrNotFound) {
		return gerr
	}
	return err
}

// tx runs fn in a transaction, again (up to 3 times) when MySQL picked it
// as a deadlock victim or timed out its row lock, and translates the final
// error. A COMMIT whose answer was lost is inventory.ErrOutcomeUnknown.
func (l *Ledger) tx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		err = l.runTx(ctx, fn)
		if !retryable(err) {
			break
		}
	}
	return translate(err)
}

// runTx runs fn in one transaction and commits it. The COMMIT is awaited
// only until ctx ends: database/sql sends it with no context, and the DSN
// sets no read timeout, so a MySQL gone silent mid-commit (a blackhole, a
// paused server) would hold the buy until the connection died, long past
// its deadline. At the deadline the outcome is unknown (MySQL may have
// committed); the COMMIT goes on in the background, and its connection is
// dropped when it fails. That error is an inventory.Unsettled, which says
// when the COMMIT has ended. An error from the COMMIT itself is
// inventory.ErrOutcomeUnknown when the connection broke (see commitLost).
// A context over before the COMMIT was sent is its own error: nothing was
// written (TestCommitNotSentByTheDeadlineIsATimeout).
func (l *Ledger) runTx(ctx context.Context, fn func(tx *gorm.DB) error) (err error) {
	tx := l.conn(ctx).Begin()
	if tx.Error != nil {
		return tx.Error
	}
	committing := false
	defer func() {
		if !committing {
			// fn failed or panicked: nothing to keep.
			tx.Rollback()
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		// Over before the COMMIT: database/sql would not send it, and
		// the deferred rollback ends the transaction. Nothing was written.
		return err
	}
	committing = true
	done := make(chan error, 1)
	settled := make(chan struct{})
	go func() {
		done <- tx.Commit().Error
		close(settled)
	}()
	select {
	case err := <-done:
		if errors.Is(err, sql.ErrTxDone) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			// database/sql refused the COMMIT, the context being over,
			// and rolled back: nothing was sent (the driver does not
			// watch a COMMIT, so no context cuts one on its way).
			return err
		}
		return commitLost(err)
	case <-ctx.Done():
		// Said as Unsettled: a lock held around the write must outlast
		// the COMMIT, or the next holder would read what it is changing.
		return inventory.NewUnsettled(fmt.Errorf("%w: no answer to the COMMIT by the deadline: %w", inventory.ErrOutcomeUnknown, ctx.Err()), settled)
	}
}

// Buyers lists the users who hold an order for the item.
func (l *Ledger) Buyers(ctx context.Context, id int64) ([]string, error) {
	users, err := l.statements.buyers(l.conn(ctx), id)
	if err != nil {
		return nil, translate(fmt.Errorf("buyers of %s %d: %w", l.table, id, err))
	}
	return users, nil
}

// OrderExists reports whether an order with this number was committed.
func (l *Ledger) OrderExists(ctx context.Context, no string) (bool, error) {
	err := l.statements.findOrder(l.conn(ctx), no).Error
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound):
		return false, nil
	case err != nil:
		return false, translate(fmt.Errorf("look up order %s: %w", no, err))
	}
	return true, nil
}

// FindOrder returns the written order with this number, whatever its
// status, or inventory.ErrOrderNotFound.
func (l *Ledger) FindOrder(ctx context.Context, no string) (inventory.Order, error) {
	o, err := l.statements.order(l.conn(ctx), no)
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return inventory.Order{}, fmt.Errorf("%s: %w", no, inventory.ErrOrderNotFound)
	}
	if err != nil {
		return inventory.Order{}, translate(fmt.Errorf("read order %s: %w", no, err))
	}
	return o, nil
}

// OrderOf returns the order the user holds for the item, whatever its
// status, or inventory.ErrOrderNotFound.
func (l *Ledger) OrderOf(ctx context.Context, id int64, user string) (inventory.Order, error) {
	o, err := l.statements.orderOf(l.conn(ctx), id, user)
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return inventory.Order{}, fmt.Errorf("%s %d, user %q: %w", l.table, id, user, inventory.ErrOrderNotFound)
	}
	if err != nil {
		return inventory.Order{}, translate(fmt.Errorf("read the order of %q for %s %d: %w", user, l.table, id, err))
	}
	return o, nil
}

// MarkFailed writes o as failed, taking no stock: the order that
// redis-stream accepted could not be written. It fails with
// inventory.ErrAlreadyPurchased when the order number (or the buyer) has a
// row already; then FindOrder says which fate won.
func (l *Ledger) MarkFailed(ctx context.Context, o inventory.Order) error {
	o.Status = inventory.StatusFailed
	return translate(l.statements.insertOrder(l.conn(ctx), o))
}

// payments returns the payment statements, or inventory.ErrInvalid for a
// kind of item that is free.
func (l *Ledger) payments() (paymentStatements, error) {
	p, ok := l.statements.(paymentStatements)
	if !ok {
		return nil, fmt.Errorf("%w: a coupon grab is free: there is nothing to pay", inventory.ErrInvalid)
	}
	return p, nil
}

// Pay marks the order paid, if it is confirmed and was created at or after
// since (its payment window is open), and returns it. Paying a paid order
// again returns it unchanged. It fails with inventory.ErrOrderNotFound,
// inventory.ErrOrderCancelled (cancelled, or its window closed),
// inventory.ErrOrderFailed, or inventory.ErrInvalid for coupon grabs.
func (l *Ledger) Pay(ctx context.Context, no string, since time.Time) (inventory.Order, error) {
	p, err := l.payments()
	if err != nil {
		return inventory.Order{}, err
	}
	res := p.pay(l.conn(ctx), no, since)
	if err := res.Error; err != nil {
		if lost := commitLost(err); errors.Is(lost, inventory.ErrOutcomeUnknown) {
			// The UPDATE was sent and its answer lost: it may have paid.
			return inventory.Order{}, fmt.Errorf("pay order %s: %w", no, lost)
		}
		return inventory.Order{}, translate(fmt.Errorf("pay order %s: %w", no, err))
	}
	// Read the row whether or not the UPDATE matched: it says what the
	// order is now, and a repeated payment is answered like the first.
	o, err := l.FindOrder(ctx, no)
	if err != nil && res.RowsAffected > 0 {
		// The order is paid: the read's failure must not say that
		// nothing was written. Its retry reads it.
		return inventory.Order{}, fmt.Errorf("%w: order %s was paid, and reading it back failed: %v", inventory.ErrOutcomeUnknown, no, err)
	}
	if err != nil {
		return o, err
	}
	switch o.Status {
	case inventory.StatusPaid:
		return o, nil
	case inventory.StatusCancelled:
		return o, fmt.Errorf("%s: %w", no, inventory.ErrOrderCancelled)
	case inventory.StatusFailed:
		return o, fmt.Errorf("%s: %w", no, inventory.ErrOrderFailed)
	}
	// Still confirmed: its window closed before the job cancelled it.
	return o, fmt.Errorf("%s: its payment window has closed: %w", no, inventory.ErrOrderCancelled)
}

// Unpaid lists up to limit confirmed orders created before cutoff, oldest
// first. Coupon batches have none.
func (l *Ledger) Unpaid(ctx context.Context, cutoff time.Time, limit int) ([]inventory.Order, error) {
	p, err := l.payments()
	if err != nil {
		return nil, nil
	}
	orders, err := p.unpaid(l.conn(ctx), cutoff.UTC(), limit)
	if err != nil {
		return nil, translate(fmt.Errorf("list unpaid orders: %w", err))
	}
	return orders, nil
}

// Cancel cancels o if it is still confirmed and was created before cutoff,
// and returns its units to the stock, in one transaction. gen, when not
// empty, records the units as owed to that generation of the Redis copy.
// It reports false when the order was no longer confirmed (paid meanwhile,
// or cancelled by another run): the conditional UPDATE is what makes two
// racing jobs return the units once.
func (l *Ledger) Cancel(ctx context.Context, o inventory.Order, cutoff time.Time, gen string) (bool, error) {
	p, err := l.payments()
	if err != nil {
		return false, err
	}
	var done bool
	err = l.tx(ctx, func(tx *gorm.DB) error {
		done = false
		res := p.cancel(tx, o.No, cutoff.UTC(), gen)
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		res = p.restore(tx, o.ItemID, o.Quantity)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return fmt.Errorf("%s %d: %w", l.table, o.ItemID, inventory.ErrNotFound)
		}
		done = true
		return nil
	})
	return done, err
}

// Owed lists up to limit cancelled orders whose units are still owed to
// the Redis copy of the stock.
func (l *Ledger) Owed(ctx context.Context, limit int) ([]inventory.Owed, error) {
	p, err := l.payments()
	if err != nil {
		return nil, nil
	}
	owed, err := p.owed(l.conn(ctx), limit)
	if err != nil {
		return nil, translate(fmt.Errorf("list owed units: %w", err))
	}
	return owed, nil
}

// ClearOwed records that the units of order no are no longer owed to
// generation gen of the Redis copy.
func (l *Ledger) ClearOwed(ctx context.Context, no, gen string) error {
	p, err := l.payments()
	if err != nil {
		return err
	}
	return translate(p.clearOwed(l.conn(ctx), no, gen).Error)
}
