package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

func countRows(t *testing.T, db *store.DB, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.Raw(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPutTwiceLeavesOneItemInTheSameState(t *testing.T) {
	ctx := context.Background()
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			db := b.Open(t)
			l := inventory.Listing{ID: 501, Name: "Kettle", PriceCents: 2500, Stock: 30}
			for i, want := range []bool{true, false} {
				created, err := db.Products().Put(ctx, l)
				if err != nil || created != want {
					t.Fatalf("put %d: created %v, %v; want created %v", i+1, created, err, want)
				}
			}
			it, err := db.Products().Get(ctx, 501)
			if err != nil {
				t.Fatal(err)
			}
			if it.Name != "Kettle" || it.PriceCents != 2500 || it.Stock != 30 || it.InitialStock != 30 {
				t.Fatalf("after two puts: %+v", it)
			}
			if n := countRows(t, db, "SELECT COUNT(*) FROM products WHERE id = 501"); n != 1 {
				t.Fatalf("%d rows of id 501, want 1", n)
			}
			c := inventory.Listing{ID: 502, Name: "Weekend 10 off", Stock: 5}
			for range 2 {
				if _, err := db.Coupons().Put(ctx, c); err != nil {
					t.Fatal(err)
				}
			}
			if cb, err := db.Coupons().Get(ctx, 502); err != nil || cb.Stock != 5 || cb.InitialStock != 5 || cb.Name != c.Name {
				t.Fatalf("coupon batch after two puts: %+v, %v", cb, err)
			}
		})
	}
}

func TestPutOfASoldItemKeepsItsOrdersAndItsAudit(t *testing.T) {
	ctx := context.Background()
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			db := b.Open(t)
			p := db.Products()
			if err := p.Deduct(ctx, inventory.Order{No: "O-put-1", ItemID: 1, UserID: "ann", Quantity: 3, Stage: "db-atomic", CreatedAt: time.Now()}); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Put(ctx, inventory.Listing{ID: 1, Name: "Phone, renamed", PriceCents: 1, Stock: 40}); err != nil {
				t.Fatal(err)
			}
			a, err := p.Audit(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if a.Stock != 40 || a.Sold != 3 || !a.Conserved() {
				t.Fatalf("after the put: %+v (want stock 40, 3 sold, conserved)", a)
			}
		})
	}
}

func TestArchivedItemIsGoneAndItsOrdersStay(t *testing.T) {
	ctx := context.Background()
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			db := b.Open(t)
			p := db.Products()
			if err := p.Deduct(ctx, inventory.Order{No: "O-arch-1", ItemID: 2, UserID: "bob", Quantity: 1, Stage: "db-atomic", CreatedAt: time.Now()}); err != nil {
				t.Fatal(err)
			}
			for range 2 { // archiving twice is archiving once
				if err := p.Archive(ctx, 2); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := p.Get(ctx, 2); !errors.Is(err, inventory.ErrNotFound) {
				t.Fatalf("get of an archived item: %v, want ErrNotFound", err)
			}
			err := p.Deduct(ctx, inventory.Order{No: "O-arch-2", ItemID: 2, UserID: "cy", Quantity: 1, Stage: "db-atomic", CreatedAt: time.Now()})
			if !errors.Is(err, inventory.ErrNotFound) {
				t.Fatalf("a buy of an archived item: %v, want ErrNotFound", err)
			}
			if o, err := p.FindOrder(ctx, "O-arch-1"); err != nil || o.ItemID != 2 {
				t.Fatalf("the archived item's order: %+v, %v", o, err)
			}
			if _, err := p.Put(ctx, inventory.Listing{ID: 2, Name: "again", Stock: 1}); !errors.Is(err, inventory.ErrArchived) {
				t.Fatalf("a put of an archived id: %v, want ErrArchived", err)
			}
			if err := p.Archive(ctx, 999); !errors.Is(err, inventory.ErrNotFound) {
				t.Fatalf("archive of no item: %v, want ErrNotFound", err)
			}
			page, err := p.Page(ctx, inventory.PageQuery{Limit: 50})
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range page {
				if it.ID == 2 {
					t.Fatal("the list holds the archived item")
				}
			}
		})
	}
}

func TestSessionWithAMissingItemWritesNothing(t *testing.T) {
	ctx := context.Background()
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			db := b.Open(t)
			p := db.Products()
			if err := p.Deduct(ctx, inventory.Order{No: "O-sess-1", ItemID: 1, UserID: "dee", Quantity: 1, Stage: "db-atomic", CreatedAt: time.Now()}); err != nil {
				t.Fatal(err)
			}
			opens := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
			w := inventory.SaleWindow{OpensAt: opens, ClosesAt: opens.Add(time.Hour)}
			err := p.ResetSession(ctx, []inventory.SessionItem{{ID: 1, Stock: 7}, {ID: 777, Stock: 7}}, w)
			if !errors.Is(err, inventory.ErrInvalid) || !errors.Is(err, inventory.ErrNotFound) {
				t.Fatalf("a session with a missing item: %v, want ErrInvalid and ErrNotFound", err)
			}
			if it, _ := p.Get(ctx, 1); it.Stock != 99 || !it.Window.OpensAt.IsZero() {
				t.Fatalf("item 1 changed by a failed session: %+v", it)
			}
			if _, err := p.FindOrder(ctx, "O-sess-1"); err != nil {
				t.Fatalf("a failed session deleted an order: %v", err)
			}
			if err := p.ResetSession(ctx, []inventory.SessionItem{{ID: 1, Stock: 7}, {ID: 2, Stock: 8}}, w); err != nil {
				t.Fatal(err)
			}
			for id, stock := range map[int64]int{1: 7, 2: 8} {
				it, err := p.Get(ctx, id)
				if err != nil || it.Stock != stock || it.InitialStock != stock || !it.Window.OpensAt.Equal(opens) {
					t.Fatalf("item %d after the session: %+v, %v", id, it, err)
				}
			}
			if _, err := p.FindOrder(ctx, "O-sess-1"); !errors.Is(err, inventory.ErrOrderNotFound) {
				t.Fatalf("the session kept an order of before: %v", err)
			}
		})
	}
}

// TestPageWalkMeetsEveryItemOnceWhileItemsAreCreated walks the catalogue
// two items a page, and creates items between the fetches (one just behind
// the cursor, one far ahead): every item that existed at the start is met
// exactly once, and no item twice.
func TestPageWalkMeetsEveryItemOnceWhileItemsAreCreated(t *testing.T) {
	ctx := context.Background()
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			db := b.Open(t)
			p := db.Products()
			start := []int64{1, 2} // the seed's
			for id := int64(10); id <= 90; id += 10 {
				if _, err := p.Put(ctx, inventory.Listing{ID: id, Name: "old", Stock: 1}); err != nil {
					t.Fatal(err)
				}
				start = append(start, id)
			}
			seen := map[int64]int{}
			var after int64
			next := int64(1000)
			for fetch := 0; ; fetch++ {
				page, err := p.Page(ctx, inventory.PageQuery{After: after, Limit: 2})
				if err != nil {
					t.Fatal(err)
				}
				if len(page) == 0 {
					break
				}
				for _, it := range page {
					seen[it.ID]++
					after = it.ID
				}
				if fetch > 100 {
					t.Fatal("the walk does not end")
				}
				if fetch >= 5 {
					continue
				}
				// Between this fetch and the next: an item ahead of
				// the cursor (next) and one just behind it (after-1, a
				// gap between the old ids).
				for _, id := range []int64{next, after - 1} {
					if _, err := p.Put(ctx, inventory.Listing{ID: id, Name: "new", Stock: 1}); err != nil {
						t.Fatal(err)
					}
				}
				next++
			}
			for _, id := range start {
				if seen[id] != 1 {
					t.Errorf("item %d met %d times, want once", id, seen[id])
				}
			}
			for id, n := range seen {
				if n != 1 {
					t.Errorf("item %d met %d times", id, n)
				}
			}
		})
	}
}

func TestPageFiltersBySaleState(t *testing.T) {
	ctx := context.Background()
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			db := b.Open(t)
			p := db.Products()
			now := time.Now().UTC()
			for _, s := range []struct {
				id    int64
				stock int
				w     inventory.SaleWindow
			}{
				{1, 5, inventory.SaleWindow{OpensAt: now.Add(time.Hour)}},                                // scheduled
				{2, 5, inventory.SaleWindow{}},                                                           // open
				{3, 0, inventory.SaleWindow{OpensAt: now.Add(-time.Hour), ClosesAt: now.Add(time.Hour)}}, // sold-out
				{4, 5, inventory.SaleWindow{OpensAt: now.Add(-2 * time.Hour), ClosesAt: now.Add(-time.Hour)}},
			} {
				if s.id > 2 {
					if _, err := p.Put(ctx, inventory.Listing{ID: s.id, Name: "x", Stock: s.stock}); err != nil {
						t.Fatal(err)
					}
				}
				if err := p.ResetSale(ctx, s.id, s.stock, s.w); err != nil {
					t.Fatal(err)
				}
			}
			for state, want := range map[string]int64{inventory.StateScheduled: 1, inventory.StateOpen: 2, inventory.StateSoldOut: 3, inventory.StateClosed: 4} {
				page, err := p.Page(ctx, inventory.PageQuery{Limit: 10, State: state})
				if err != nil {
					t.Fatal(err)
				}
				if len(page) != 1 || page[0].ID != want {
					t.Errorf("state %s: %d items (first %+v), want item %d alone", state, len(page), page, want)
				}
			}
		})
	}
}

func TestLoadCatalogueCreatesTheMissingItemsOnly(t *testing.T) {
	ctx := context.Background()
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			db := b.Open(t)
			n, err := db.Products().LoadCatalogue(ctx, 2500, 10)
			if err != nil || n != 2498 { // ids 1 and 2 are the seed's
				t.Fatalf("created %d, %v; want 2498", n, err)
			}
			if n, err := db.Products().LoadCatalogue(ctx, 2500, 10); err != nil || n != 0 {
				t.Fatalf("a second load created %d, %v; want 0", n, err)
			}
			if c := countRows(t, db, "SELECT COUNT(*) FROM products"); c != 2500 {
				t.Fatalf("%d products, want 2500", c)
			}
			if it, _ := db.Products().Get(ctx, 1); it.Name != "Flash-sale phone" {
				t.Fatalf("the load replaced a seed item: %+v", it)
			}
		})
	}
}

// TestFilteredWalkMeetsNoItemTwice walks the open items three a page while
// items change state between the fetches (one behind the cursor closes and
// opens again, one ahead sells out): no item is met twice, and the items
// that stayed open throughout are met once.
func TestFilteredWalkMeetsNoItemTwice(t *testing.T) {
	ctx := context.Background()
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			db := b.Open(t)
			p := db.Products()
			if _, err := p.LoadCatalogue(ctx, 20, 5); err != nil {
				t.Fatal(err)
			}
			past := inventory.SaleWindow{OpensAt: time.Now().Add(-2 * time.Hour), ClosesAt: time.Now().Add(-time.Hour)}
			touched := map[int64]bool{}
			seen := map[int64]int{}
			var after int64
			for fetch := 0; fetch < 50; fetch++ {
				page, err := p.Page(ctx, inventory.PageQuery{After: after, Limit: 3, State: inventory.StateOpen})
				if err != nil {
					t.Fatal(err)
				}
				if len(page) == 0 {
					break
				}
				for _, it := range page {
					seen[it.ID]++
					after = it.ID
				}
				behind, ahead := after-1, after+2
				for _, step := range []struct {
					id    int64
					stock int
					w     inventory.SaleWindow
				}{{behind, 5, past}, {behind, 5, inventory.SaleWindow{}}, {ahead, 0, inventory.SaleWindow{}}} {
					if step.id < 1 || step.id > 20 {
						continue
					}
					if err := p.ResetSale(ctx, step.id, step.stock, step.w); err != nil {
						t.Fatal(err)
					}
					touched[step.id] = true
				}
			}
			for id := int64(1); id <= 20; id++ {
				switch {
				case seen[id] > 1:
					t.Errorf("item %d met %d times, want at most once", id, seen[id])
				case !touched[id] && seen[id] != 1:
					t.Errorf("item %d, open throughout, met %d times, want once", id, seen[id])
				}
			}
		})
	}
}
