package store_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestMigrateUpgradesAnOldDatabase: a database made by the first schema
// (001 and 002 only), with an order in it, is upgraded in place by three
// Migrates that run at once, as three instances starting together do; its
// order becomes a confirmed one written when it was created; its buyer "u"
// is not "U"; each change is made once, by one of the three; and a fourth
// Migrate changes nothing (it runs no ALTER TABLE).
func TestMigrateUpgradesAnOldDatabase(t *testing.T) {
	backends := []struct {
		name string
		open func(t *testing.T) *store.DB
	}{
		{"sqlite", func(t *testing.T) *store.DB {
			db, err := store.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "old.db"))
			if err != nil {
				t.Fatal(err)
			}
			return db
		}},
		{"mysql", func(t *testing.T) *store.DB {
			db, err := store.OpenMySQL(context.Background(), testenv.MySQLDSN(t), store.Pool{})
			if err != nil {
				t.Fatal(err)
			}
			return db
		}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			db := b.open(t)
			t.Cleanup(func() { _ = db.Close() })
			if err := store.ApplyFiles(ctx, db, "001_schema.sql", "002_seed.sql"); err != nil {
				t.Fatal(err)
			}
			created := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
			if err := db.Exec(ctx, "INSERT INTO orders (order_no, product_id, user_id, quantity, stage, created_at) VALUES ('old-1', 1, 'u', 2, 'db-atomic', ?)", created); err != nil {
				t.Fatal(err)
			}
			if err := db.Exec(ctx, "UPDATE products SET stock = stock - 2 WHERE id = 1"); err != nil {
				t.Fatal(err)
			}
			w := store.RecordWire(db)
			var wg sync.WaitGroup
			errs := make([]error, 3)
			for i := range errs {
				wg.Add(1)
				go func() { defer wg.Done(); errs[i] = db.Migrate(ctx) }()
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("migrate %d of 3 at once: %v", i+1, err)
				}
			}
			// They took turns: each change was made once, by one of them.
			made := map[string]int{}
			for _, line := range w.Take() {
				if strings.HasPrefix(line, "ALTER TABLE") || strings.HasPrefix(line, "CREATE INDEX") {
					made[line]++
				}
			}
			if len(made) == 0 {
				t.Fatal("three migrations of an old database made no change")
			}
			for line, n := range made {
				if n != 1 {
					t.Errorf("three migrations at once ran %q %d times, want once", line, n)
				}
			}
			if err := db.Migrate(ctx); err != nil {
				t.Fatalf("migrating an upgraded database again: %v", err)
			}
			for _, line := range w.Take() {
				if strings.Contains(line, "ALTER TABLE") {
					t.Errorf("migrating an upgraded database again ran %q", line)
				}
			}
			o, err := db.Products().FindOrder(ctx, "old-1")
			if err != nil {
				t.Fatal(err)
			}
			if o.Status != inventory.StatusConfirmed || !o.WrittenAt.Equal(created) || o.Quantity != 2 {
				t.Fatalf("the old order after the upgrade: %+v; want confirmed, written at %s", o, created)
			}
			a, err := db.Products().Audit(ctx, 1)
			if err != nil || a.Sold != 2 || a.Orders != 1 || !a.Conserved() {
				t.Fatalf("Audit = %+v, %v; want the old order counted, conserved", a, err)
			}
			// The old buyer "u" is not "U" (004_exact_user_ids.sql).
			if err := db.Products().Deduct(ctx, order("new-1", "U", 1)); err != nil {
				t.Fatalf("a buy by U next to u's old order: %v", err)
			}
			// The old item is on sale for good (006_sale_window.sql), and
			// takes a window that the database's clock enforces.
			if it, err := db.Products().Get(ctx, 1); err != nil || it.Window != (inventory.SaleWindow{}) {
				t.Fatalf("the old item's window after the upgrade: %+v, %v; want always open", it.Window, err)
			}
			if err := db.Products().DeductInWindow(ctx, order("new-2", "v", 1)); err != nil {
				t.Fatalf("a buy in the old item's window: %v", err)
			}
			now, err := db.Products().Now(ctx)
			if err != nil {
				t.Fatal(err)
			}
			closed := inventory.SaleWindow{ClosesAt: now.Add(-time.Minute).Truncate(time.Microsecond)}
			if err := db.Products().ResetSale(ctx, 1, 5, closed); err != nil {
				t.Fatal(err)
			}
			if it, err := db.Products().Get(ctx, 1); err != nil || !it.Window.ClosesAt.Equal(closed.ClosesAt) || !it.Window.OpensAt.IsZero() {
				t.Fatalf("the window read back: %+v, %v; want %+v", it.Window, err, closed)
			}
			if err := db.Products().DeductInWindow(ctx, order("new-3", "w", 1)); !errors.Is(err, inventory.ErrSaleClosed) {
				t.Fatalf("a buy after the closing: %v, want closed", err)
			}
		})
	}
}

// TestOrderLifecycle walks an order through every status on both engines:
// pay within the window (twice), pay too late, cancel (twice: the second
// finds nothing), units owed to the Redis copy and cleared, failed orders,
// and the audit that counts live orders only.
func TestOrderLifecycle(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			db := b.Open(t)
			l := db.Products()
			mustErr := func(want, err error, what string) {
				t.Helper()
				if !errors.Is(err, want) {
					t.Fatalf("%s: got %v, want %v", what, err, want)
				}
			}
			if err := l.Reset(ctx, 1, 10); err != nil {
				t.Fatal(err)
			}
			t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
			for i, u := range []string{"a", "b", "c"} {
				o := order("l-"+u, u, 1)
				o.CreatedAt = t0.Add(time.Duration(i) * time.Millisecond)
				if err := l.Deduct(ctx, o); err != nil {
					t.Fatal(err)
				}
			}
			if o, err := l.FindOrder(ctx, "l-a"); err != nil || o.Status != inventory.StatusConfirmed || o.WrittenAt.IsZero() || o.UserID != "a" {
				t.Fatalf("FindOrder(l-a) = %+v, %v; want it confirmed", o, err)
			}
			_, err := l.FindOrder(ctx, "nope")
			mustErr(inventory.ErrOrderNotFound, err, "FindOrder(nope)")

			open, closed := t0.Add(-time.Minute), t0.Add(time.Second) // payment windows: open, closed
			for i := 0; i < 2; i++ {
				if o, err := l.Pay(ctx, "l-a", open); err != nil || o.Status != inventory.StatusPaid {
					t.Fatalf("Pay(l-a) #%d = %+v, %v; want paid", i+1, o, err)
				}
			}
			_, err = l.Pay(ctx, "l-b", closed)
			mustErr(inventory.ErrOrderCancelled, err, "Pay after the window closed")
			_, err = l.Pay(ctx, "nope", open)
			mustErr(inventory.ErrOrderNotFound, err, "Pay(nope)")

			unpaid, err := l.Unpaid(ctx, closed, 10)
			if err != nil || len(unpaid) != 2 || unpaid[0].No != "l-b" || unpaid[1].No != "l-c" {
				t.Fatalf("Unpaid = %+v, %v; want l-b and l-c", unpaid, err)
			}
			for i, want := range []bool{true, false} {
				done, err := l.Cancel(ctx, unpaid[0], closed, "gen-1")
				if err != nil || done != want {
					t.Fatalf("Cancel(l-b) #%d = %v, %v; want %v", i+1, done, err, want)
				}
			}
			if done, err := l.Cancel(ctx, unpaid[1], closed, ""); err != nil || !done {
				t.Fatalf("Cancel(l-c) = %v, %v", done, err)
			}
			if done, err := l.Cancel(ctx, inventory.Order{No: "l-a", ItemID: 1, Quantity: 1}, closed, ""); err != nil || done {
				t.Fatalf("Cancel of a paid order = %v, %v; want nothing done", done, err)
			}
			_, err = l.Pay(ctx, "l-b", open)
			mustErr(inventory.ErrOrderCancelled, err, "Pay of a cancelled order")

			owed, err := l.Owed(ctx, 10)
			if err != nil || len(owed) != 1 || owed[0].No != "l-b" || owed[0].Gen != "gen-1" {
				t.Fatalf("Owed = %+v, %v; want l-b owed to gen-1", owed, err)
			}
			if err := l.ClearOwed(ctx, "l-b", "gen-1"); err != nil {
				t.Fatal(err)
			}
			if owed, err := l.Owed(ctx, 10); err != nil || len(owed) != 0 {
				t.Fatalf("Owed after ClearOwed = %+v, %v", owed, err)
			}

			failed := order("l-d", "d", 1)
			if err := l.MarkFailed(ctx, failed); err != nil {
				t.Fatal(err)
			}
			mustErr(inventory.ErrAlreadyPurchased, l.MarkFailed(ctx, failed), "MarkFailed twice")
			mustErr(inventory.ErrAlreadyPurchased, l.Deduct(ctx, failed), "Deduct of a failed order")
			_, err = l.Pay(ctx, "l-d", open)
			mustErr(inventory.ErrOrderFailed, err, "Pay of a failed order")

			a, err := l.Audit(ctx, 1)
			want := inventory.Audit{ItemID: 1, InitialStock: 10, Stock: 9, Sold: 1, Orders: 1, Paid: 1, Cancelled: 2, CancelledOrders: 2, Failed: 1}
			if err != nil || a != want || !a.Conserved() {
				t.Fatalf("Audit = %+v, %v; want %+v, conserved", a, err, want)
			}

			c := db.Coupons()
			_, err = c.Pay(ctx, "x", open)
			mustErr(inventory.ErrInvalid, err, "Pay of a coupon grab")
			if got, err := c.Unpaid(ctx, closed, 10); err != nil || len(got) != 0 {
				t.Fatalf("coupons Unpaid = %v, %v; want none", got, err)
			}
			if err := c.MarkFailed(ctx, order("c-1", "u", 1)); err != nil {
				t.Fatal(err)
			}
			if o, err := c.FindOrder(ctx, "c-1"); err != nil || o.Status != inventory.StatusFailed {
				t.Fatalf("coupon FindOrder = %+v, %v; want failed", o, err)
			}
		})
	}
}

// TestDeductAll: a batch of orders is written in one transaction with one
// multi-row INSERT and one guarded UPDATE (on MySQL, sent as one batch of
// statements: sale.go), and all or none: a batch the stock cannot cover, or
// that repeats an order, leaves nothing behind.
func TestDeductAll(t *testing.T) {
	for _, b := range testenv.Backends() {
		for _, k := range kinds {
			t.Run(b.Name+"/"+k.name, func(t *testing.T) {
				ctx := context.Background()
				db := b.Open(t)
				l := k.ledger(db)
				if err := l.Reset(ctx, 1, 5); err != nil {
					t.Fatal(err)
				}
				batch := func(prefix string, n int) []inventory.Order {
					var out []inventory.Order
					for i := 0; i < n; i++ {
						out = append(out, order(prefix+itoa(i), prefix+itoa(i), 1))
					}
					return out
				}
				wire := store.RecordWire(db)
				if err := l.DeductAll(ctx, batch("a", 3)); err != nil {
					t.Fatal(err)
				}
				want := []string{"BEGIN", "INSERT", "UPDATE", "COMMIT"}
				if db.Dialect() == store.MySQL {
					want = []string{oneBatch}
				}
				if got := trips(wire.Take()); !slices.Equal(got, want) {
					t.Errorf("a batch of 3 sent %v, want %v", got, want)
				}
				if err := l.DeductAll(ctx, batch("b", 3)); !errors.Is(err, inventory.ErrSoldOut) {
					t.Fatalf("3 more on 2 left: %v, want ErrSoldOut", err)
				}
				dup := append(batch("c", 1), order("a0", "z", 1))
				if err := l.DeductAll(ctx, dup); !errors.Is(err, inventory.ErrAlreadyPurchased) {
					t.Fatalf("a batch repeating an order: %v, want ErrAlreadyPurchased", err)
				}
				if err := l.DeductAll(ctx, []inventory.Order{order("m1", "m1", 1), order("m2", "m2", 2)}); !errors.Is(err, inventory.ErrInvalid) {
					t.Fatalf("a batch of two items: %v, want ErrInvalid", err)
				}
				a, err := l.Audit(ctx, 1)
				if err != nil || a.Sold != 3 || a.Stock != 2 || a.Orders != 3 || !a.Conserved() {
					t.Fatalf("Audit = %+v, %v; want only the first batch written", a, err)
				}
			})
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestCancelNeverRaisesStockAboveInitial: an oversold sale (every buyer of
// unlocked read 3 and wrote 2: five orders, one unit gone) has a gap of four
// orders that never took a unit. Cancelling them closes the gap first and
// gives back only what really left the stock: the stock climbs back to 3,
// never above. It used to give back one unit per order: 2 + 5 = 7 of 3.
func TestCancelNeverRaisesStockAboveInitial(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			l := b.Open(t).Products()
			if err := l.Reset(ctx, 1, 3); err != nil {
				t.Fatal(err)
			}
			t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
			for i := range 5 {
				o := order(fmt.Sprint("over-", i), fmt.Sprint("buyer-", i), 1)
				o.CreatedAt = t0.Add(time.Duration(i) * time.Millisecond)
				if err := l.WriteComputed(ctx, o, 2, 0); err != nil {
					t.Fatal(err)
				}
			}
			closed := t0.Add(time.Second)
			unpaid, err := l.Unpaid(ctx, closed, 10)
			if err != nil || len(unpaid) != 5 {
				t.Fatalf("Unpaid = %d orders, %v; want 5", len(unpaid), err)
			}
			for i, o := range unpaid {
				if done, err := l.Cancel(ctx, o, closed, ""); err != nil || !done {
					t.Fatalf("Cancel(%s) = %v, %v", o.No, done, err)
				}
				stock, err := l.ReadStock(ctx, 1)
				if err != nil {
					t.Fatal(err)
				}
				// Four orders never took a unit: the first four cancels
				// close that gap, the fifth gives the one unit back.
				want := 2
				if i == 4 {
					want = 3
				}
				if stock != want {
					t.Fatalf("after %d cancels the stock is %d; want %d (initial 3)", i+1, stock, want)
				}
			}
			a, err := l.Audit(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if a.Stock > a.InitialStock {
				t.Fatalf("audit after every cancel: %+v; stock above its initial amount", a)
			}
		})
	}
}
