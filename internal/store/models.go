package store

import (
	"database/sql/driver"
	"fmt"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// The gorm models of seckill's four tables. The schema files in sql/mysql
// and sql/sqlite own the tables (gorm never migrates them), and
// TestModelsMatchSchema checks every field against the columns of both
// engines. The items' created_at and updated_at are left to the database's
// defaults and are not mapped, so gorm never writes them.

// Product is a row of products: something sold from a limited stock.
type Product struct {
	ID           int64
	Name         string
	PriceCents   int64
	InitialStock int
	Stock        int
	FenceToken   int64     // the fence: the newest token that claimed the row, or past it, moved on by each writer of the stock without the lock (fencedOff)
	OpensAt      NullStamp // when the sale opens (UTC); NULL: always open
	ClosesAt     NullStamp // when the sale closes (UTC); NULL: never
	LastSale     string    // the mark of the last batch that took units or wrote the stock, or of the last claim (sale.go, FenceAndRead)
}

// TableName names the table for gorm.
func (Product) TableName() string { return "products" }

func (p Product) item() inventory.Item {
	return inventory.Item{ID: p.ID, Name: p.Name, PriceCents: p.PriceCents, InitialStock: p.InitialStock, Stock: p.Stock, FenceToken: p.FenceToken,
		Window: inventory.SaleWindow{OpensAt: p.OpensAt.UTC(), ClosesAt: p.ClosesAt.UTC()}}
}

// Order is a row of orders: one buyer's purchase of a product. The schema
// allows one order per (product, user), whatever its status, and unique
// order numbers.
type Order struct {
	ID        int64
	OrderNo   string
	ProductID int64
	UserID    string
	Quantity  int
	Stage     string
	Instance  string
	CreatedAt Stamp
	Status    string // confirmed, paid, cancelled or failed
	WrittenAt Stamp  // when the row was written
	CopyGen   string // Redis copy generation a cancelled order's units are owed to; "" for none
}

// TableName names the table for gorm.
func (Order) TableName() string { return "orders" }

func newOrder(o inventory.Order) *Order {
	return &Order{OrderNo: o.No, ProductID: o.ItemID, UserID: o.UserID, Quantity: o.Quantity, Stage: o.Stage, Instance: o.Instance, CreatedAt: Stamp{o.CreatedAt},
		Status: rowStatus(o), WrittenAt: Stamp{writtenAt(o)}}
}

func (r Order) order() inventory.Order {
	return inventory.Order{No: r.OrderNo, ItemID: r.ProductID, UserID: r.UserID, Quantity: r.Quantity, Stage: r.Stage, Instance: r.Instance,
		CreatedAt: r.CreatedAt.UTC(), Status: r.Status, WrittenAt: r.WrittenAt.UTC()}
}

// rowStatus is the status an order is written with: failed when the
// writer says so, else confirmed (a row is never pending: pending means
// not written yet).
func rowStatus(o inventory.Order) string {
	if o.Status == inventory.StatusFailed {
		return inventory.StatusFailed
	}
	return inventory.StatusConfirmed
}

func writtenAt(o inventory.Order) time.Time {
	if o.WrittenAt.IsZero() {
		return time.Now().UTC()
	}
	return o.WrittenAt.UTC()
}

// CouponBatch is a row of coupon_batches: a limited number of free
// coupons. Its remaining coupons are its stock.
type CouponBatch struct {
	ID         int64
	Name       string
	Total      int
	Remaining  int
	FenceToken int64     // the fence, as Product.FenceToken
	OpensAt    NullStamp // when the sale opens (UTC); NULL: always open
	ClosesAt   NullStamp // when the sale closes (UTC); NULL: never
	LastSale   string    // the mark of the last batch that took units or wrote the stock, or of the last claim (sale.go, FenceAndRead)
}

// TableName names the table for gorm.
func (CouponBatch) TableName() string { return "coupon_batches" }

func (b CouponBatch) item() inventory.Item {
	return inventory.Item{ID: b.ID, Name: b.Name, InitialStock: b.Total, Stock: b.Remaining, FenceToken: b.FenceToken,
		Window: inventory.SaleWindow{OpensAt: b.OpensAt.UTC(), ClosesAt: b.ClosesAt.UTC()}}
}

// CouponGrab is a row of coupon_grabs: one user's coupon from a batch. The
// schema allows one grab per (batch, user), of quantity 1. Coupons are
// free, so a grab is confirmed (or failed), never paid or cancelled.
type CouponGrab struct {
	ID        int64
	GrabNo    string
	BatchID   int64
	UserID    string
	Quantity  int
	Stage     string
	Instance  string
	CreatedAt Stamp
	Status    string // confirmed or failed
	WrittenAt Stamp  // when the row was written
}

// TableName names the table for gorm.
func (CouponGrab) TableName() string { return "coupon_grabs" }

func newCouponGrab(o inventory.Order) *CouponGrab {
	return &CouponGrab{GrabNo: o.No, BatchID: o.ItemID, UserID: o.UserID, Quantity: o.Quantity, Stage: o.Stage, Instance: o.Instance, CreatedAt: Stamp{o.CreatedAt},
		Status: rowStatus(o), WrittenAt: Stamp{writtenAt(o)}}
}

func (g CouponGrab) order() inventory.Order {
	return inventory.Order{No: g.GrabNo, ItemID: g.BatchID, UserID: g.UserID, Quantity: g.Quantity, Stage: g.Stage, Instance: g.Instance,
		CreatedAt: g.CreatedAt.UTC(), Status: g.Status, WrittenAt: g.WrittenAt.UTC()}
}

// toItems converts the rows of either item model.
func toItems[M interface{ item() inventory.Item }](rows []M) []inventory.Item {
	out := make([]inventory.Item, len(rows))
	for i, r := range rows {
		out[i] = r.item()
	}
	return out
}

// Stamp is a timestamp column. MySQL hands it over as a time.Time; the
// embedded SQLite keeps timestamps in TEXT columns and hands them over as
// the text it was given, which Stamp parses.
type Stamp struct{ time.Time }

// stampLayouts are the texts SQLite holds: what the driver writes for a
// time.Time, what the schema's defaults write, and the migration's
// placeholder.
var stampLayouts = []string{"2006-01-02 15:04:05.999999999-07:00", time.RFC3339Nano, "2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999"}

// Scan reads a time.Time or its text.
func (s *Stamp) Scan(v any) error {
	switch v := v.(type) {
	case time.Time:
		s.Time = v
		return nil
	case string:
		return s.parse(v)
	case []byte:
		return s.parse(string(v))
	case nil:
		s.Time = time.Time{}
		return nil
	}
	return fmt.Errorf("store: cannot read a timestamp from %T", v)
}

func (s *Stamp) parse(text string) error {
	for _, layout := range stampLayouts {
		if t, err := time.Parse(layout, text); err == nil {
			s.Time = t.UTC()
			return nil
		}
	}
	return fmt.Errorf("store: %q is not a timestamp", text)
}

// Value writes the time.Time, which both drivers store in their own way.
func (s Stamp) Value() (driver.Value, error) { return s.Time, nil }

// NullStamp is a timestamp column that may be NULL: the zero time reads
// from NULL and writes NULL.
type NullStamp struct{ Stamp }

// UTC returns the time in UTC, or the zero time for NULL.
func (s NullStamp) UTC() time.Time {
	if s.IsZero() {
		return time.Time{}
	}
	return s.Time.UTC()
}

// Value writes NULL for the zero time.
func (s NullStamp) Value() (driver.Value, error) {
	if s.IsZero() {
		return nil, nil
	}
	return s.Time.UTC(), nil
}
