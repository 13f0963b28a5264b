package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"gorm.io/gorm"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// The catalogue's writes and pages (inventory.CatalogueStore): items
// created or replaced by id, archived into archived_<table>
// (sql/*/009_archive.sql), restocked many at once in a session, read a
// page at a time, and loaded in bulk for a test catalogue.

var _ inventory.CatalogueStore = (*Ledger)(nil)

// catalogueColumns are the names one kind of item keeps its facts under.
type catalogueColumns struct {
	table, archive   string
	initial, stock   string
	price            bool   // products have a price; coupon batches are free
	orders, orderKey string // the orders' table and its item column
}

func (l *Ledger) columns() catalogueColumns {
	if _, ok := l.statements.(couponStatements); ok {
		return catalogueColumns{table: "coupon_batches", archive: "archived_coupon_batches", initial: "total", stock: "remaining", orders: "coupon_grabs", orderKey: "batch_id"}
	}
	return catalogueColumns{table: "products", archive: "archived_products", initial: "initial_stock", stock: "stock", price: true, orders: "orders", orderKey: "product_id"}
}

// described are the columns an item is described by, in the order of the
// archive table: name, the price (products), initial stock, stock.
func (c catalogueColumns) described() string {
	if c.price {
		return "name, price_cents, " + c.initial + ", " + c.stock
	}
	return "name, " + c.initial + ", " + c.stock
}

// Put creates the item, or replaces its name, price and stock, keeping
// its orders and window: its initial stock moves by as much as its stock,
// so that initial stock - stock (what its orders hold) is unchanged. The
// fence moves on, as with every write of the stock outside the fleet's
// lock. It returns inventory.ErrArchived for an archived id.
func (l *Ledger) Put(ctx context.Context, it inventory.Listing) (created bool, err error) {
	c := l.columns()
	for attempt := 0; attempt < 2; attempt++ {
		err = l.tx(ctx, func(tx *gorm.DB) error {
			created = false
			var archived int64
			if err := tx.Raw("SELECT COUNT(*) FROM "+c.archive+" WHERE id = ?", it.ID).Scan(&archived).Error; err != nil {
				return err
			}
			if archived > 0 {
				return fmt.Errorf("%s %d: %w", c.table, it.ID, inventory.ErrArchived)
			}
			set, args := "name = ?, ", []any{it.Name}
			if c.price {
				set, args = set+"price_cents = ?, ", append(args, it.PriceCents)
			}
			// initial first: MySQL assigns left to right, with the values
			// already assigned; SQLite with the old ones. Both read the
			// old stock here.
			set += c.initial + " = " + c.initial + " - " + c.stock + " + ?, " + c.stock + " = ?, fence_token = " + fenceMovedOn
			res := tx.Exec("UPDATE "+c.table+" SET "+set+" WHERE id = ?", append(args, it.Stock, it.Stock, it.ID)...)
			if res.Error != nil || res.RowsAffected > 0 {
				return res.Error
			}
			created = true
			values := []any{it.ID, it.Name}
			if c.price {
				values = append(values, it.PriceCents)
			}
			values = append(values, it.Stock, it.Stock)
			return tx.Exec("INSERT INTO "+c.table+" (id, "+c.described()+") VALUES (?"+strings.Repeat(", ?", len(values)-1)+")", values...).Error
		})
		if !errors.Is(err, gorm.ErrDuplicatedKey) {
			break // else another Put created it in between: replace it
		}
	}
	if err != nil {
		return false, translate(fmt.Errorf("put %s %d: %w", c.table, it.ID, err))
	}
	return created, nil
}

// Archive moves the item to the archive table, in one transaction; its
// orders stay. Every statement of the stages reads the item from its
// table, so buyers find no item from then on. It returns
// inventory.ErrNotFound for an id that was never an item, and nil for one
// archived already.
func (l *Ledger) Archive(ctx context.Context, id int64) error {
	c := l.columns()
	err := l.tx(ctx, func(tx *gorm.DB) error {
		cols := "id, " + c.described() + ", opens_at, closes_at"
		res := tx.Exec("INSERT INTO "+c.archive+" ("+cols+") SELECT "+cols+" FROM "+c.table+" WHERE id = ?", id)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			var archived int64
			if err := tx.Raw("SELECT COUNT(*) FROM "+c.archive+" WHERE id = ?", id).Scan(&archived).Error; err != nil {
				return err
			}
			if archived > 0 {
				return nil
			}
			return fmt.Errorf("%s %d: %w", c.table, id, inventory.ErrNotFound)
		}
		return tx.Exec("DELETE FROM "+c.table+" WHERE id = ?", id).Error
	})
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		return nil // archived by another request in between
	}
	return translate(err)
}

// ResetSession is ResetSale of every item in one transaction: an item
// that does not exist fails it with inventory.ErrInvalid naming the item
// (and wrapping inventory.ErrNotFound), and nothing is written.
func (l *Ledger) ResetSession(ctx context.Context, items []inventory.SessionItem, w inventory.SaleWindow) error {
	c := l.columns()
	ids := make([]int64, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	return l.tx(ctx, func(tx *gorm.DB) error {
		for i, it := range items {
			res := l.statements.restock(tx, it.ID, it.Stock, w)
			if res.Error != nil {
				return res.Error
			}
			if res.RowsAffected == 0 {
				return fmt.Errorf("%w: items[%d].id %d: no such item in %s: %w", inventory.ErrInvalid, i, it.ID, c.table, inventory.ErrNotFound)
			}
		}
		return tx.Exec("DELETE FROM "+c.orders+" WHERE "+c.orderKey+" IN ?", ids).Error
	})
}

// Page reads up to q.Limit items with an id above q.After, by id, in
// q.State by the database's clock (see inventory.SaleStates). The id is
// the key: a walk page after page meets every item that exists throughout
// it once, whatever is created meanwhile.
func (l *Ledger) Page(ctx context.Context, q inventory.PageQuery) ([]inventory.Item, error) {
	c := l.columns()
	tx := l.conn(ctx).Where("id > ?", q.After).Order("id").Limit(q.Limit)
	if q.State != "" {
		cond, err := stateCondition(clock{l.db.dialect}, c.stock, q.State)
		if err != nil {
			return nil, err
		}
		tx = tx.Where(cond)
	}
	var items []inventory.Item
	var err error
	if c.price {
		var rows []Product
		err = tx.Find(&rows).Error
		items = toItems(rows)
	} else {
		var rows []CouponBatch
		err = tx.Find(&rows).Error
		items = toItems(rows)
	}
	if err != nil {
		return nil, translate(fmt.Errorf("page of %s: %w", c.table, err))
	}
	return items, nil
}

// stateCondition is the SQL condition of a sale state by clock c.
func stateCondition(c clock, stock, state string) (string, error) {
	opened := "(opens_at IS NULL OR " + c.at("opens_at") + " <= " + c.now() + ")"
	switch state {
	case inventory.StateScheduled:
		return "opens_at IS NOT NULL AND " + c.at("opens_at") + " > " + c.now(), nil
	case inventory.StateOpen:
		return c.inWindow() + " AND " + stock + " > 0", nil
	case inventory.StateSoldOut:
		return c.inWindow() + " AND " + stock + " <= 0", nil
	case inventory.StateClosed:
		return opened + " AND closes_at IS NOT NULL AND " + c.at("closes_at") + " <= " + c.now(), nil
	}
	return "", fmt.Errorf("%w: state must be one of %v", inventory.ErrInvalid, inventory.SaleStates)
}

// loadBatch is how many rows one INSERT of LoadCatalogue carries.
const loadBatch = 1000

// LoadCatalogue makes items 1 to n exist, each missing one created with
// stock units (and, for products, a price of 100 cents), always on sale,
// in multi-row INSERTs of loadBatch rows: a test catalogue for the lab and
// for trying the service. Existing and archived ids are left as they are.
// It returns how many items it created.
func (l *Ledger) LoadCatalogue(ctx context.Context, n, stock int) (created int, err error) {
	// One transaction: SQLite syncs its file once, not once per batch.
	err = l.conn(ctx).Transaction(func(tx *gorm.DB) error {
		created, err = l.loadCatalogue(tx, n, stock)
		return err
	})
	return created, err
}

func (l *Ledger) loadCatalogue(tx *gorm.DB, n, stock int) (int, error) {
	c := l.columns()
	created := 0
	for first := 1; first <= n; first += loadBatch {
		last := min(first+loadBatch-1, n)
		var taken []int64
		err := tx.Raw("SELECT id FROM "+c.table+" WHERE id BETWEEN ? AND ? UNION SELECT id FROM "+c.archive+" WHERE id BETWEEN ? AND ?",
			first, last, first, last).Scan(&taken).Error
		if err != nil {
			return created, translate(fmt.Errorf("load %s: %w", c.table, err))
		}
		skip := make(map[int64]bool, len(taken))
		for _, id := range taken {
			skip[id] = true
		}
		var rows []string
		var args []any
		for id := int64(first); id <= int64(last); id++ {
			if skip[id] {
				continue
			}
			if c.price {
				rows, args = append(rows, "(?, ?, ?, ?, ?)"), append(args, id, "item "+strconv.FormatInt(id, 10), 100, stock, stock)
			} else {
				rows, args = append(rows, "(?, ?, ?, ?)"), append(args, id, "batch "+strconv.FormatInt(id, 10), stock, stock)
			}
		}
		if len(rows) == 0 {
			continue
		}
		res := tx.Exec("INSERT INTO "+c.table+" (id, "+c.described()+") VALUES "+strings.Join(rows, ", "), args...)
		if res.Error != nil {
			return created, translate(fmt.Errorf("load %s: %w", c.table, res.Error))
		}
		created += int(res.RowsAffected)
	}
	return created, nil
}
