package store_test

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// A transaction whose context ended after its last statement and before
// its COMMIT was sent wrote nothing: database/sql refuses the COMMIT and
// rolls the transaction back. Its error must say so (the context's error:
// a timeout, or a cancellation), never that the outcome is unknown, which
// the API now answers ahead of timeout.
func TestCommitNotSentByTheDeadlineIsATimeout(t *testing.T) {
	db := testenv.MySQL(t)
	ledger := db.Products()
	bg := context.Background()
	items, err := ledger.List(bg)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) == 0 {
		t.Fatal("the test database has no product")
	}
	id := items[0].ID
	before, err := ledger.ReadStock(bg, id)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cut := context.WithCancel(bg)
	defer cut()
	err = store.RunTx(ctx, ledger, func(tx *gorm.DB) error {
		if err := tx.Exec("UPDATE products SET stock = stock - 1 WHERE id = ?", id).Error; err != nil {
			return err
		}
		cut() // the request ends once the transaction's work is done
		<-ctx.Done()
		return nil
	})
	if errors.Is(err, inventory.ErrOutcomeUnknown) || !errors.Is(err, context.Canceled) {
		t.Errorf("a transaction whose COMMIT was never sent failed with %v, want the context's error and not %v", err, inventory.ErrOutcomeUnknown)
	}
	after, err := ledger.ReadStock(bg, id)
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("stock %d before, %d after a transaction that was not committed", before, after)
	}
}
