package store

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// table names the columns of one kind of item and its orders. Products and
// coupon batches have the same shape under different names.
type table struct {
	items, stock, initial, price string // item table and columns
	orders, orderNo, itemID      string // order table and columns
}

var (
	productTable = table{"products", "stock", "initial_stock", "price_cents", "orders", "order_no", "product_id"}
	couponTable  = table{"coupon_batches", "remaining", "total", "0", "coupon_grabs", "grab_no", "batch_id"}
)

// Ledger is an inventory.Store over one kind of item.
type Ledger struct {
	db *DB
	t  table
}

var _ inventory.Store = (*Ledger)(nil)

// Products returns the ledger of products and their orders.
func (d *DB) Products() *Ledger { return &Ledger{db: d, t: productTable} }

// Coupons returns the ledger of coupon batches and their grabs.
func (d *DB) Coupons() *Ledger { return &Ledger{db: d, t: couponTable} }

type itemRow struct {
	ID           int64
	Name         string
	PriceCents   int64
	InitialStock int
	Stock        int
	FenceToken   int64
}

func (l *Ledger) selectItems() string {
	t := l.t
	return fmt.Sprintf("SELECT id, name, %s AS price_cents, %s AS initial_stock, %s AS stock, fence_token FROM %s",
		t.price, t.initial, t.stock, t.items)
}

func (r itemRow) item() inventory.Item {
	return inventory.Item{ID: r.ID, Name: r.Name, PriceCents: r.PriceCents, InitialStock: r.InitialStock, Stock: r.Stock, FenceToken: r.FenceToken}
}

// List returns every item, by id.
func (l *Ledger) List(ctx context.Context) ([]inventory.Item, error) {
	var rows []itemRow
	if err := l.db.gdb.WithContext(ctx).Raw(l.selectItems() + " ORDER BY id").Scan(&rows).Error; err != nil {
		return nil, translate(fmt.Errorf("list %s: %w", l.t.items, err))
	}
	items := make([]inventory.Item, len(rows))
	for i, r := range rows {
		items[i] = r.item()
	}
	return items, nil
}

// Get returns one item or inventory.ErrNotFound.
func (l *Ledger) Get(ctx context.Context, id int64) (inventory.Item, error) {
	var rows []itemRow
	if err := l.db.gdb.WithContext(ctx).Raw(l.selectItems()+" WHERE id = ?", id).Scan(&rows).Error; err != nil {
		return inventory.Item{}, translate(fmt.Errorf("get %s %d: %w", l.t.items, id, err))
	}
	if len(rows) == 0 {
		return inventory.Item{}, fmt.Errorf("%s %d: %w", l.t.items, id, inventory.ErrNotFound)
	}
	return rows[0].item(), nil
}

// Audit reads stock and order totals of one item in a single statement, so
// that the numbers come from one consistent snapshot.
func (l *Ledger) Audit(ctx context.Context, id int64) (inventory.Audit, error) {
	t := l.t
	q := fmt.Sprintf(`SELECT i.%s AS initial_stock, i.%s AS stock,
		COALESCE(SUM(o.quantity), 0) AS sold, COUNT(o.id) AS orders
		FROM %s i LEFT JOIN %s o ON o.%s = i.id
		WHERE i.id = ? GROUP BY i.id, i.%s, i.%s`,
		t.initial, t.stock, t.items, t.orders, t.itemID, t.initial, t.stock)
	var rows []struct {
		InitialStock int
		Stock        int
		Sold         int
		Orders       int
	}
	if err := l.db.gdb.WithContext(ctx).Raw(q, id).Scan(&rows).Error; err != nil {
		return inventory.Audit{}, translate(fmt.Errorf("audit %s %d: %w", t.items, id, err))
	}
	if len(rows) == 0 {
		return inventory.Audit{}, fmt.Errorf("%s %d: %w", t.items, id, inventory.ErrNotFound)
	}
	r := rows[0]
	return inventory.Audit{ItemID: id, InitialStock: r.InitialStock, Stock: r.Stock, Sold: r.Sold, Orders: r.Orders}, nil
}

// Reset deletes the item's orders and sets initial stock and stock to n.
// The fencing token is kept: tokens must only grow.
func (l *Ledger) Reset(ctx context.Context, id int64, n int) error {
	t := l.t
	return l.tx(ctx, func(tx *gorm.DB) error {
		res := tx.Exec(fmt.Sprintf("UPDATE %s SET %s = ?, %s = ? WHERE id = ?", t.items, t.initial, t.stock), n, n, id)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return fmt.Errorf("%s %d: %w", t.items, id, inventory.ErrNotFound)
		}
		return tx.Exec(fmt.Sprintf("DELETE FROM %s WHERE %s = ?", t.orders, t.itemID), id).Error
	})
}

// ReadStock reads the stock in its own statement, outside any transaction.
func (l *Ledger) ReadStock(ctx context.Context, id int64) (int, error) {
	var stock []int
	err := l.db.gdb.WithContext(ctx).Raw(fmt.Sprintf("SELECT %s FROM %s WHERE id = ?", l.t.stock, l.t.items), id).Scan(&stock).Error
	if err != nil {
		return 0, translate(fmt.Errorf("read stock of %s %d: %w", l.t.items, id, err))
	}
	if len(stock) == 0 {
		return 0, fmt.Errorf("%s %d: %w", l.t.items, id, inventory.ErrNotFound)
	}
	return stock[0], nil
}

// Fence claims the item for a lock holder with the given token. It fails
// with inventory.ErrLockLost when a newer (or the same) token is recorded.
func (l *Ledger) Fence(ctx context.Context, id int64, token int64) error {
	res := l.db.gdb.WithContext(ctx).Exec(fmt.Sprintf("UPDATE %s SET fence_token = ? WHERE id = ? AND fence_token < ?", l.t.items), token, id, token)
	if res.Error != nil {
		return translate(fmt.Errorf("fence %s %d: %w", l.t.items, id, res.Error))
	}
	if res.RowsAffected == 0 {
		return l.missingOr(ctx, id, fmt.Errorf("%s %d: token %d is stale: %w", l.t.items, id, token, inventory.ErrLockLost))
	}
	return nil
}

// WriteComputed inserts o and writes newStock in one transaction. With a
// token, the write needs the item's fence to still be that token.
func (l *Ledger) WriteComputed(ctx context.Context, o inventory.Order, newStock int, token int64) error {
	t := l.t
	return l.tx(ctx, func(tx *gorm.DB) error {
		if err := l.insertOrder(tx, o); err != nil {
			return err
		}
		var res *gorm.DB
		if token > 0 {
			res = tx.Exec(fmt.Sprintf("UPDATE %s SET %s = ? WHERE id = ? AND fence_token <= ?", t.items, t.stock), newStock, o.ItemID, token)
		} else {
			res = tx.Exec(fmt.Sprintf("UPDATE %s SET %s = ? WHERE id = ?", t.items, t.stock), newStock, o.ItemID)
		}
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			if token > 0 {
				return fmt.Errorf("%s %d: write with token %d fenced off: %w", t.items, o.ItemID, token, inventory.ErrLockLost)
			}
			return fmt.Errorf("%s %d: %w", t.items, o.ItemID, inventory.ErrNotFound)
		}
		return nil
	})
}

// Deduct inserts o and decrements the stock only if enough is left.
func (l *Ledger) Deduct(ctx context.Context, o inventory.Order) error {
	t := l.t
	err := l.tx(ctx, func(tx *gorm.DB) error {
		// Insert first: a repeat buyer fails on the unique key without
		// touching the hot row, and the row lock the UPDATE takes is held
		// only for the rest of this short transaction.
		if err := l.insertOrder(tx, o); err != nil {
			return err
		}
		res := tx.Exec(fmt.Sprintf("UPDATE %s SET %s = %s - ? WHERE id = ? AND %s >= ?", t.items, t.stock, t.stock, t.stock), o.Quantity, o.ItemID, o.Quantity)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return errSoldOutOrMissing
		}
		return nil
	})
	if errors.Is(err, errSoldOutOrMissing) {
		return l.missingOr(ctx, o.ItemID, fmt.Errorf("%s %d: %w", t.items, o.ItemID, inventory.ErrSoldOut))
	}
	return err
}

var errSoldOutOrMissing = errors.New("no row matched")

func (l *Ledger) insertOrder(tx *gorm.DB, o inventory.Order) error {
	t := l.t
	return tx.Exec(fmt.Sprintf("INSERT INTO %s (%s, %s, user_id, quantity, stage, instance, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)", t.orders, t.orderNo, t.itemID),
		o.No, o.ItemID, o.UserID, o.Quantity, o.Stage, o.Instance, o.CreatedAt).Error
}

// missingOr returns ErrNotFound if the item does not exist, else err.
func (l *Ledger) missingOr(ctx context.Context, id int64, err error) error {
	if _, gerr := l.ReadStock(ctx, id); errors.Is(gerr, inventory.ErrNotFound) {
		return gerr
	}
	return err
}

// tx runs fn in a transaction, again (up to 3 times) when MySQL picked it
// as a deadlock victim, and translates the final error.
func (l *Ledger) tx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		err = l.db.gdb.WithContext(ctx).Transaction(fn)
		if !retryable(err) {
			break
		}
	}
	return translate(err)
}

// Buyers lists the users who hold an order for the item.
func (l *Ledger) Buyers(ctx context.Context, id int64) ([]string, error) {
	var users []string
	q := fmt.Sprintf("SELECT user_id FROM %s WHERE %s = ?", l.t.orders, l.t.itemID)
	if err := l.db.gdb.WithContext(ctx).Raw(q, id).Scan(&users).Error; err != nil {
		return nil, translate(fmt.Errorf("buyers of %s %d: %w", l.t.items, id, err))
	}
	return users, nil
}

// OrderExists reports whether an order with this number was committed.
func (l *Ledger) OrderExists(ctx context.Context, no string) (bool, error) {
	var n []int64
	q := fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE %s = ?", l.t.orders, l.t.orderNo)
	if err := l.db.gdb.WithContext(ctx).Raw(q, no).Scan(&n).Error; err != nil {
		return false, translate(fmt.Errorf("look up order %s: %w", no, err))
	}
	return len(n) == 1 && n[0] > 0, nil
}
