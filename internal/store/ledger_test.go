package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// kinds are the two ledgers, each with the seeded row 1 and the number of
// seeded rows (sql/*/002_seed.sql).
var kinds = []struct {
	name   string
	ledger func(*store.DB) *store.Ledger
	first  inventory.Item
	rows   int
}{
	{"products", (*store.DB).Products, inventory.Item{ID: 1, Name: "Flash-sale phone", PriceCents: 199900, InitialStock: 100, Stock: 100}, 2},
	{"coupons", (*store.DB).Coupons, inventory.Item{ID: 1, Name: "100 off 500", InitialStock: 100, Stock: 100}, 1},
}

const missing = 999 // an id no seed uses

func order(no, user string, item int64) inventory.Order {
	return inventory.Order{No: no, ItemID: item, UserID: user, Quantity: 1, Stage: "test", Instance: "t1", CreatedAt: time.Now().UTC()}
}

// TestLedger walks every Ledger method through its success and failure
// paths, on both engines and both kinds of item: the answers (and the
// sentinel errors) are what the stages and the HTTP layer rely on.
func TestLedger(t *testing.T) {
	for _, b := range testenv.Backends() {
		for _, k := range kinds {
			t.Run(b.Name+"/"+k.name, func(t *testing.T) {
				ctx := context.Background()
				l := k.ledger(b.Open(t))
				mustErr := func(want error, err error, what string) {
					t.Helper()
					if !errors.Is(err, want) {
						t.Fatalf("%s: got %v, want %v", what, err, want)
					}
				}
				stock := func(want int) {
					t.Helper()
					got, err := l.ReadStock(ctx, 1)
					if err != nil || got != want {
						t.Fatalf("ReadStock = %d, %v; want %d", got, err, want)
					}
				}
				audit := func(want inventory.Audit) {
					t.Helper()
					got, err := l.Audit(ctx, 1)
					if err != nil || got != want {
						t.Fatalf("Audit = %+v, %v; want %+v", got, err, want)
					}
				}

				items, err := l.List(ctx)
				if err != nil || len(items) != k.rows || items[0] != k.first {
					t.Fatalf("List = %+v, %v; want %d rows starting with %+v", items, err, k.rows, k.first)
				}
				if it, err := l.Get(ctx, 1); err != nil || it != k.first {
					t.Fatalf("Get(1) = %+v, %v; want %+v", it, err, k.first)
				}
				_, err = l.Get(ctx, missing)
				mustErr(inventory.ErrNotFound, err, "Get(missing)")
				_, err = l.ReadStock(ctx, missing)
				mustErr(inventory.ErrNotFound, err, "ReadStock(missing)")
				_, err = l.Audit(ctx, missing)
				mustErr(inventory.ErrNotFound, err, "Audit(missing)")
				mustErr(inventory.ErrNotFound, l.Reset(ctx, missing, 1), "Reset(missing)")
				audit(inventory.Audit{ItemID: 1, InitialStock: 100, Stock: 100})

				// Deduct: the db-atomic path.
				if err := l.Reset(ctx, 1, 3); err != nil {
					t.Fatal(err)
				}
				for _, u := range []string{"a", "b", "c"} {
					if err := l.Deduct(ctx, order("d-"+u, u, 1)); err != nil {
						t.Fatalf("Deduct for %s: %v", u, err)
					}
				}
				stock(0)
				mustErr(inventory.ErrSoldOut, l.Deduct(ctx, order("d-d", "d", 1)), "Deduct when sold out")
				mustErr(inventory.ErrAlreadyPurchased, l.Deduct(ctx, order("d-a2", "a", 1)), "Deduct by a repeat buyer")
				mustErr(inventory.ErrAlreadyPurchased, l.Deduct(ctx, order("d-a", "e", 1)), "Deduct with a used order number")
				mustErr(inventory.ErrNotFound, l.Deduct(ctx, order("d-m", "a", missing)), "Deduct(missing)")
				audit(inventory.Audit{ItemID: 1, InitialStock: 3, Stock: 0, Sold: 3, Orders: 3})
				buyers, err := l.Buyers(ctx, 1)
				slices.Sort(buyers)
				if err != nil || !slices.Equal(buyers, []string{"a", "b", "c"}) {
					t.Fatalf("Buyers = %v, %v; want [a b c]", buyers, err)
				}
				for no, want := range map[string]bool{"d-a": true, "d-c": true, "d-d": false, "d-a2": false, "nope": false} {
					if got, err := l.OrderExists(ctx, no); err != nil || got != want {
						t.Fatalf("OrderExists(%s) = %v, %v; want %v", no, got, err, want)
					}
				}

				// Fence and WriteComputed: the lock stages' path.
				mustErr(inventory.ErrNotFound, l.Fence(ctx, missing, 5), "Fence(missing)")
				if err := l.Fence(ctx, 1, 10); err != nil {
					t.Fatalf("Fence(10): %v", err)
				}
				mustErr(inventory.ErrLockLost, l.Fence(ctx, 1, 10), "Fence with the recorded token")
				mustErr(inventory.ErrLockLost, l.Fence(ctx, 1, 9), "Fence with an older token")
				if err := l.Reset(ctx, 1, 5); err != nil {
					t.Fatal(err)
				}
				audit(inventory.Audit{ItemID: 1, InitialStock: 5, Stock: 5})
				// A reset moves the fence one on: the holder of token 10,
				// which read before it, writes nothing.
				if it, err := l.Get(ctx, 1); err != nil || it.FenceToken != 11 {
					t.Fatalf("after Reset: fence token %d, %v; want 11", it.FenceToken, err)
				}
				mustErr(inventory.ErrLockLost, l.WriteComputed(ctx, order("w-x", "x", 1), 4, 10), "WriteComputed with the token before a reset")
				if err := l.Fence(ctx, 1, 12); err != nil {
					t.Fatalf("Fence(12): %v", err)
				}
				if err := l.WriteComputed(ctx, order("w-a", "a", 1), 4, 12); err != nil {
					t.Fatalf("WriteComputed with the current token: %v", err)
				}
				mustErr(inventory.ErrLockLost, l.WriteComputed(ctx, order("w-b", "b", 1), 3, 11), "WriteComputed with an older token")
				stock(4)
				if err := l.WriteComputed(ctx, order("w-c", "c", 1), 2, 0); err != nil {
					t.Fatalf("WriteComputed without a token: %v", err)
				}
				stock(2) // the naive write sets what it was told, not 4-1
				// and, holding no lock the fleet shares, moves the fence on
				if it, err := l.Get(ctx, 1); err != nil || it.FenceToken != 13 {
					t.Fatalf("after a write without a token: fence token %d, %v; want 13", it.FenceToken, err)
				}
				mustErr(inventory.ErrAlreadyPurchased, l.WriteComputed(ctx, order("w-a2", "a", 1), 1, 0), "WriteComputed by a repeat buyer")
				mustErr(inventory.ErrSoldOut, l.WriteComputed(ctx, order("w-d", "d", 1), -1, 0), "WriteComputed of a negative stock")
				mustErr(inventory.ErrNotFound, l.WriteComputed(ctx, order("w-m", "a", missing), 1, 0), "WriteComputed(missing)")
				stock(2)
				// The refused writes left no order behind.
				audit(inventory.Audit{ItemID: 1, InitialStock: 5, Stock: 2, Sold: 2, Orders: 2})
				for _, no := range []string{"w-b", "w-a2", "w-d", "w-m"} {
					if ok, err := l.OrderExists(ctx, no); err != nil || ok {
						t.Fatalf("OrderExists(%s) = %v, %v after a refused write", no, ok, err)
					}
				}

				// FenceAndRead: the claim and the read of a holder with a token.
				if _, err := l.FenceAndRead(ctx, missing, 50); !errors.Is(err, inventory.ErrNotFound) {
					t.Fatalf("FenceAndRead(missing) = %v, want ErrNotFound", err)
				}
				if n, err := l.FenceAndRead(ctx, 1, 14); err != nil || n != 2 {
					t.Fatalf("FenceAndRead with a newer token = %d, %v; want 2", n, err)
				}
				for token, which := range map[int64]string{14: "the recorded token", 9: "an older token"} {
					if n, err := l.FenceAndRead(ctx, 1, token); !errors.Is(err, inventory.ErrLockLost) {
						t.Fatalf("FenceAndRead with %s = %d, %v; want ErrLockLost", which, n, err)
					}
				}
				mustErr(inventory.ErrLockLost, l.WriteComputed(ctx, order("w-e", "e", 1), 1, 13), "WriteComputed with the token FenceAndRead overtook")
				if it, err := l.Get(ctx, 1); err != nil || it.FenceToken != 14 {
					t.Fatalf("after FenceAndRead: fence token %d, %v; want 14", it.FenceToken, err)
				}
				stock(2)
			})
		}
	}
}

// TestStatementsPerPurchase counts what one purchase sends to the
// database: Deduct and WriteComputed run once per buyer, so a statement
// more is a round trip more for every buyer of a flash sale. On MySQL a
// Deduct and a fenced WriteComputed are each one batch (sale.go), one line
// of the record, one round trip, and so is FenceAndRead; an unfenced
// WriteComputed stays a transaction of separate statements.
// The INSERT is a plain one: an INSERT ... RETURNING is a query with a
// result set.
func TestStatementsPerPurchase(t *testing.T) {
	inTx := []string{"BEGIN", "INSERT", "UPDATE", "COMMIT"}
	for _, b := range testenv.Backends() {
		for _, k := range kinds {
			t.Run(b.Name+"/"+k.name, func(t *testing.T) {
				ctx := context.Background()
				db := b.Open(t)
				l := k.ledger(db)
				wire := store.RecordWire(db)
				deduct, fencedWrite, fenceRead := inTx, inTx, []string{"UPDATE", "SELECT"}
				if db.Dialect() == store.MySQL {
					deduct, fencedWrite, fenceRead = []string{oneBatch}, []string{oneBatch}, []string{"UPDATE SELECT"}
				}
				steps := []struct {
					name string
					run  func() error
					want []string // each round trip's statement verbs, in order
				}{
					{"Deduct", func() error { return l.Deduct(ctx, order("s-1", "a", 1)) }, deduct},
					{"Fence", func() error { return l.Fence(ctx, 1, 7) }, []string{"UPDATE"}},
					{"ReadStock", func() error { _, err := l.ReadStock(ctx, 1); return err }, []string{"SELECT"}},
					{"FenceAndRead", func() error { _, err := l.FenceAndRead(ctx, 1, 8); return err }, fenceRead},
					{"WriteComputed", func() error { return l.WriteComputed(ctx, order("s-2", "b", 1), 98, 8) }, fencedWrite},
					{"WriteComputed unfenced", func() error { return l.WriteComputed(ctx, order("s-3", "c", 1), 97, 0) }, inTx},
				}
				for _, s := range steps {
					wire.Take()
					if err := s.run(); err != nil {
						t.Fatalf("%s: %v", s.name, err)
					}
					lines := wire.Take()
					if got := trips(lines); !slices.Equal(got, s.want) || strings.Contains(strings.Join(lines, "\n"), "RETURNING") {
						t.Errorf("%s sent %v, want %v:\n%s", s.name, got, s.want, strings.Join(lines, "\n"))
					}
				}
				if got := fmt.Sprint(wire.Take()); got != "[]" {
					t.Fatalf("unexpected statements after the steps: %s", got)
				}
			})
		}
	}
}

// oneBatch is the verbs of a sale sent as one batch (sale.go).
const oneBatch = "START INSERT UPDATE SET DELETE COMMIT"

// trips turns the record of a Wire into one entry per round trip: the
// verbs of the statements it sent, space-separated.
func trips(lines []string) []string {
	var out []string
	for _, line := range lines {
		var verbs []string
		for _, stmt := range strings.Split(line, ";\n") {
			verbs = append(verbs, strings.ToUpper(strings.Fields(stmt)[0]))
		}
		out = append(out, strings.Join(verbs, " "))
	}
	return out
}

// TestLockWaitIsRetried: a purchase whose row lock wait times out (MySQL
// error 1205) runs again instead of failing the buyer. Another session
// holds the row until the store has given its first attempt up.
func TestLockWaitIsRetried(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	ctx := context.Background()
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	db := openMySQL(t, dsn+sep+"innodb_lock_wait_timeout=1", store.Pool{})
	tx, stock := holdRow(t, dsn)

	wire := store.RecordWire(db)
	done := make(chan error, 1)
	go func() { done <- db.Products().Deduct(ctx, order("r-1", "a", 1)) }()
	// Hold the row until the first attempt has timed out and rolled back.
	for !wire.Seen("ROLLBACK") {
		select {
		case err := <-done:
			t.Fatalf("Deduct returned %v while the row was still locked", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Deduct after a lock wait timeout: %v, want it retried and done", err)
	}
	got := trips(wire.Take())
	if i := slices.Index(got, "ROLLBACK"); i < 0 || !slices.Equal(got[i+1:], []string{oneBatch}) {
		t.Fatalf("want a rolled back attempt, then one batch that commits; got %v", got)
	}
	a, err := db.Products().Audit(ctx, 1)
	if err != nil || a.Orders != 1 || a.Stock != stock-1 || !a.Conserved() {
		t.Fatalf("Audit = %+v, %v; want one order and stock %d", a, err, stock-1)
	}
}

// TestOrderOf finds the order a buyer holds for an item, on both engines and
// both kinds, and ErrOrderNotFound for a buyer (or an item) without one.
func TestOrderOf(t *testing.T) {
	for _, b := range testenv.Backends() {
		for _, k := range kinds {
			t.Run(b.Name+"/"+k.name, func(t *testing.T) {
				ctx := context.Background()
				l := k.ledger(b.Open(t))
				o := order("of-1", "holder", 1)
				if err := l.Deduct(ctx, o); err != nil {
					t.Fatal(err)
				}
				got, err := l.OrderOf(ctx, 1, "holder")
				if err != nil || got.No != o.No || got.UserID != "holder" || got.Quantity != 1 || got.Status != inventory.StatusConfirmed {
					t.Fatalf("OrderOf(1, holder) = %+v, %v; want order %s, confirmed", got, err, o.No)
				}
				for _, c := range []struct {
					item int64
					user string
				}{{1, "nobody"}, {missing, "holder"}} {
					if _, err := l.OrderOf(ctx, c.item, c.user); !errors.Is(err, inventory.ErrOrderNotFound) {
						t.Errorf("OrderOf(%d, %s): %v, want ErrOrderNotFound", c.item, c.user, err)
					}
				}
			})
		}
	}
}
