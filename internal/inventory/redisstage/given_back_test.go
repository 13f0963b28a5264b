package redisstage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestRedisAtomicLogsTheUnitsItGivesBack forces a refusal while a unit is
// in flight: with one unit in stock, A reserves it and its database write
// is held; B is told sold out; A's write fails, so the unit goes back and C
// buys it. B was refused before the last order, yet with nothing on the
// shelf: the give-back log the audit shows (and the lab nets out of
// refused-with-stock) must hold that unit, reserved before B's refusal and
// given back after it. A reset clears the log.
func TestRedisAtomicLogsTheUnitsItGivesBack(t *testing.T) {
	ctx := context.Background()
	db := testenv.SQLite(t)
	held := &heldStore{Ledger: db.Products(), hold: map[string]chan error{}, entered: make(chan string, 1)}
	stage := redisstage.NewRedisAtomic(testenv.Redis(t), held, testenv.Name("gb-"), nil)
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{inventory.StageRedisAtomic: stage}, "a", "O").WithGiveBackLog(stage)
	const id = 1
	if err := svc.Reset(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	buy := func(user string) error {
		_, err := svc.Buy(ctx, inventory.StageRedisAtomic, inventory.Request{ItemID: id, UserID: user, Quantity: 1})
		return err
	}
	release := held.holdUser("a")
	aDone := make(chan error, 1)
	go func() { aDone <- buy("a") }()
	<-held.entered // A holds the one unit, its write not done
	if g, err := svc.GivenBack(ctx, id); err != nil || len(g) != 0 {
		t.Fatalf("given back before anything went back: %+v, %v", g, err)
	}
	if err := buy("b"); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("B, while A's unit is in flight: %v; want sold out", err)
	}
	bRefused := time.Now()
	writeFailed := errors.New("the write failed")
	release <- writeFailed
	if err := <-aDone; !errors.Is(err, writeFailed) {
		t.Fatalf("A: %v; want its write's error", err)
	}
	if err := buy("c"); err != nil {
		t.Fatalf("C, after A's unit came back: %v", err)
	}
	g, err := svc.GivenBack(ctx, id)
	if err != nil || len(g) != 1 || g[0].Units != 1 {
		t.Fatalf("given back: %+v, %v; want one entry of 1 unit", g, err)
	}
	// Both stamps are whole ms on this machine's clock (Redis's TIME).
	ms := time.Millisecond
	if g[0].ReservedAt.After(bRefused) || g[0].At.Add(ms).Before(bRefused) {
		t.Fatalf("A's unit away from %v to %v; B was refused at %v, which must fall inside", g[0].ReservedAt, g[0].At, bRefused)
	}
	if err := svc.Reset(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	if g, err := svc.GivenBack(ctx, id); err != nil || len(g) != 0 {
		t.Fatalf("given back after a reset: %+v, %v; want none", g, err)
	}
}
