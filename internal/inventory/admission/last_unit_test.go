package admission_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestLastUnitSoldIsRemembered: behind the crowd control, a lock stage's
// buy that takes the last unit makes the sell-out known at once. Before,
// the instance learnt it only when a later buyer took the lock and read 0:
// in between, the line stayed full of late buyers and newcomers heard 503
// overloaded after the sell-out (make lab's post-sale-503 on redlock). With
// two units, the second sale is the last: the next buyer must be answered
// from memory, never reaching the stage; the first sale leaves a unit and
// must not be taken for a sell-out.
func TestLastUnitSoldIsRemembered(t *testing.T) {
	ctx := context.Background()
	db := testenv.SQLite(t)
	if err := db.Products().Reset(ctx, 1, 2); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reasons []string
	crowd := admission.NewCrowd(admission.CrowdOptions{Kind: "product", Epochs: &memEpochs{}, Refused: func(r string) {
		mu.Lock()
		defer mu.Unlock()
		reasons = append(reasons, r)
	}})
	stage := crowd.Wrap(inventory.NewLocalMutex(db.Products(), "product", inventory.SectionOptions{}))
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{"guarded": stage}, "a", "O")
	buy := func(user string, qty int) error {
		_, err := svc.Buy(ctx, "guarded", inventory.Request{ItemID: 1, UserID: user, Quantity: qty})
		return err
	}
	if err := buy("u0", 1); err != nil {
		t.Fatal(err)
	}
	// One unit left: a buyer of two is refused by the stage itself, not
	// from a memory that took the first sale for the last.
	if err := buy("two", 2); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("a buyer of 2 with 1 left: %v; want sold out", err)
	}
	if err := buy("u1", 1); err != nil {
		t.Fatalf("the last unit: %v", err)
	}
	if err := buy("late", 1); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("the buyer after the last unit: %v; want sold out", err)
	}
	want := []string{admission.RefusedSoldOut, admission.RefusedRemembered}
	if !slices.Equal(reasons, want) {
		t.Fatalf("refusals %v; want %v: the buyer of two by the stage, the late buyer from memory", reasons, want)
	}
}
