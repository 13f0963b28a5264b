package store_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestDeductAcross: orders of two items are written in one transaction
// (on MySQL one batch), all or none: when one item's stock is short, the
// other item keeps its units and neither gets an order; a repeated order
// or an unknown item leaves nothing behind either.
func TestDeductAcross(t *testing.T) {
	for _, b := range testenv.Backends() {
		for _, k := range kinds {
			t.Run(b.Name+"/"+k.name, func(t *testing.T) {
				ctx := context.Background()
				db := b.Open(t)
				l := k.ledger(db)
				if _, err := l.Put(ctx, inventory.Listing{ID: 2, Name: "second", Stock: 3}); err != nil {
					t.Fatal(err)
				}
				for _, id := range []int64{1, 2} {
					if err := l.Reset(ctx, id, 3); err != nil {
						t.Fatal(err)
					}
				}
				books := func(id int64, sold int) {
					t.Helper()
					a, err := l.Audit(ctx, id)
					if err != nil || a.Sold != sold || a.Orders != sold || a.Stock != 3-sold || !a.Conserved() {
						t.Fatalf("item %d: Audit = %+v, %v; want %d sold", id, a, err, sold)
					}
				}
				wire := store.RecordWire(db)
				if err := l.DeductAcross(ctx, []inventory.Order{order("a1", "a1", 2), order("a2", "a2", 1), order("a3", "a3", 2)}); err != nil {
					t.Fatal(err)
				}
				want := []string{"BEGIN", "INSERT", "UPDATE", "UPDATE", "COMMIT"}
				if db.Dialect() == store.MySQL {
					want = []string{"START INSERT UPDATE UPDATE SET UPDATE DELETE COMMIT"}
				}
				if got := trips(wire.Take()); !slices.Equal(got, want) {
					t.Errorf("a group of two items sent %v, want %v", got, want)
				}
				books(1, 1)
				books(2, 2)
				// Item 2 has 1 left: a group taking 2 of it and 1 of item 1
				// is refused whole, item 1's decrement taken back.
				short := []inventory.Order{order("b1", "b1", 1), order("b2", "b2", 2), order("b3", "b3", 2)}
				if err := l.DeductAcross(ctx, short); !errors.Is(err, inventory.ErrSoldOut) {
					t.Fatalf("a group item 2 cannot cover: %v, want ErrSoldOut", err)
				}
				if err := l.DeductAcross(ctx, []inventory.Order{order("c1", "c1", 1), order("a3", "z", 2)}); !errors.Is(err, inventory.ErrAlreadyPurchased) {
					t.Fatalf("a group repeating an order: %v, want ErrAlreadyPurchased", err)
				}
				if err := l.DeductAcross(ctx, []inventory.Order{order("d1", "d1", 1), order("d2", "d2", 99)}); !errors.Is(err, inventory.ErrNotFound) {
					t.Fatalf("a group with an unknown item: %v, want ErrNotFound", err)
				}
				books(1, 1)
				books(2, 2)
			})
		}
	}
}

// TestCrossItemGroupsDoNotDeadlock: two groups of the same two products,
// whose orders arrived in opposite item order, run at once on MySQL. A
// third session holds both rows while both groups send their batch, so
// that both wait for the rows together; then it lets go. Each group
// locks the rows in ascending id order, so one waits behind the other:
// both commit, each in its first batch. Locking them in arrival order,
// each took one row and waited for the other's: InnoDB killed one as a
// deadlock victim, and its batch was sent again.
func TestCrossItemGroupsDoNotDeadlock(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	ctx := context.Background()
	db := openMySQL(t, dsn, store.Pool{MaxConns: 4})
	l := db.Products()
	for _, id := range []int64{1, 2} {
		if err := l.Reset(ctx, id, 10); err != nil {
			t.Fatal(err)
		}
	}
	admin, holder := otherSession(t, dsn)
	if err := holder.QueryRow("SELECT COUNT(*) FROM products WHERE id IN (1, 2) FOR UPDATE").Scan(new(int)); err != nil {
		t.Fatal(err)
	}
	wire := store.RecordWire(db)
	groups := [][]inventory.Order{
		{order("x2", "x2", 2), order("x1", "x1", 1)},
		{order("y1", "y1", 1), order("y2", "y2", 2)},
	}
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Go(func() { errs[i] = l.DeductAcross(ctx, g) })
	}
	waitServer(t, admin, "both groups to wait for the held rows", func(n int64) bool { return n == 2 },
		"SELECT COUNT(*) FROM information_schema.innodb_trx t JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id "+
			"WHERE t.trx_state = 'LOCK WAIT' AND p.db = DATABASE()")
	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("group %d: %v", i, err)
		}
	}
	if got := trips(wire.Take()); len(got) != 2 {
		t.Errorf("the two groups sent %d batches, want 2 (a deadlock victim sends its batch again): %v", len(got), got)
	}
	for _, id := range []int64{1, 2} {
		if a, err := l.Audit(ctx, id); err != nil || a.Sold != 2 || !a.Conserved() {
			t.Errorf("product %d: Audit = %+v, %v; want 2 sold", id, a, err)
		}
	}
}
