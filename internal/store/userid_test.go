package store_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// lookalikes are buyers that differ only in case, accent or a trailing
// space. A user id is an opaque name: Redis (the buyers set, the
// Idempotency-Key records) and SQLite compare it byte for byte, and so must
// MySQL, whose default collations would make the first four one buyer
// (utf8mb4_general_ci on MariaDB, utf8mb4_0900_ai_ci on MySQL 8), and whose
// utf8mb4_bin (as MariaDB's default) would make "alice " "alice".
var lookalikes = []string{"alice", "ALICE", "Alice", "alicé", "alice "}

// TestUserIDsAreExact: buyers whose ids differ only in case, accent or
// padding are different buyers on both engines, through the lone sale
// (Deduct) and the group's (DeductAll); each finds its own order
// (OrderOf), and a true repeat is still refused.
func TestUserIDsAreExact(t *testing.T) {
	for _, b := range testenv.Backends() {
		for _, k := range kinds {
			t.Run(b.Name+"/"+k.name, func(t *testing.T) {
				ctx := context.Background()
				l := k.ledger(b.Open(t))
				if err := l.Reset(ctx, 1, 10); err != nil {
					t.Fatal(err)
				}
				nos := map[string]string{}
				for i, u := range lookalikes {
					nos[u] = fmt.Sprintf("x-%d", i)
				}
				for _, u := range lookalikes[:2] {
					if err := l.Deduct(ctx, order(nos[u], u, 1)); err != nil {
						t.Fatalf("Deduct for %q after %q: %v", u, lookalikes[0], err)
					}
				}
				var group []inventory.Order
				for _, u := range lookalikes[2:] {
					group = append(group, order(nos[u], u, 1))
				}
				if err := l.DeductAll(ctx, group); err != nil {
					t.Fatalf("DeductAll for %q: %v", lookalikes[2:], err)
				}
				if got, err := l.ReadStock(ctx, 1); err != nil || got != 10-len(lookalikes) {
					t.Fatalf("ReadStock = %d, %v; want %d", got, err, 10-len(lookalikes))
				}
				buyers, err := l.Buyers(ctx, 1)
				slices.Sort(buyers)
				want := slices.Sorted(slices.Values(lookalikes))
				if err != nil || !slices.Equal(buyers, want) {
					t.Fatalf("Buyers = %q, %v; want %q", buyers, err, want)
				}
				for _, u := range lookalikes {
					if o, err := l.OrderOf(ctx, 1, u); err != nil || o.No != nos[u] || o.UserID != u {
						t.Errorf("OrderOf(1, %q) = order %s of %q, %v; want its own, %s", u, o.No, o.UserID, err, nos[u])
					}
				}
				if err := l.Deduct(ctx, order("x-again", "ALICE", 1)); !errors.Is(err, inventory.ErrAlreadyPurchased) {
					t.Fatalf("Deduct by a true repeat buyer: %v, want ErrAlreadyPurchased", err)
				}
			})
		}
	}
}
