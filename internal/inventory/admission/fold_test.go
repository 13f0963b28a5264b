package admission_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestFoldedBuyPassesAFullLine: a buy whose Idempotency-Key claim took its
// units (inventory.Fold) holds them, so the crowd control lets it through
// a full line and past a remembered sell-out: turning it away would strand
// its units until the reconcile job gave them back. It keeps the order its
// claim took them for. A buyer without a fold is turned away as before.
func TestFoldedBuyPassesAFullLine(t *testing.T) {
	l := newGatedLine(t, admission.CrowdOptions{Queue: 1}, nil, "h1")
	l.hold("h1")
	l.bounced("the line is full", 1)
	o := inventory.Order{No: "O-folded", ItemID: 1, UserID: "folded", Quantity: 1, Stage: "s"}
	ctx, fold := context.Background(), inventory.NewFold(inventory.FoldSpec{Order: o})
	if err := fold.Took("took:0"); err != nil { // the claim took the units
		t.Fatal(err)
	}
	got, err := l.svc.BuyFolded(ctx, "s", inventory.Request{ItemID: 1, UserID: "folded", Quantity: 1}, fold)
	if err != nil || got.No != o.No {
		t.Fatalf("a folded buy at a full line: %+v %v, want order %s", got, err, o.No)
	}
	// Another buyer's request handed the fold does not take its order.
	if got, err := l.svc.BuyFolded(ctx, "s", inventory.Request{ItemID: 1, UserID: "other", Quantity: 1}, fold); !errors.As(err, new(*admission.Busy)) || got.No == o.No {
		t.Fatalf("another buyer handed the fold: %+v %v, want Busy", got, err)
	}
	l.let("h1")
}

// TestNoFoldWhereTheStageMustComeLater: the claim takes the units only
// where nothing must run between the claim and the stage's script. At
// redis-stream's replica durability (its WAIT follows the enqueue on one
// connection), the check stays read-only (no Fold); redis-atomic and
// redis-stream otherwise fold, behind a crowd that limits buyers' rates
// too (its gates pass before the claim: TestSaleRoundTrips in httpapi).
func TestNoFoldWhereTheStageMustComeLater(t *testing.T) {
	rdb := testenv.Redis(t)
	db := testenv.SQLite(t)
	stock := redisstage.NewRedisAtomic(rdb, db.Products(), testenv.Name("fold"), nil)
	limited := admission.NewCrowd(admission.CrowdOptions{Kind: "product", Admit: func(context.Context, inventory.Order) error { return nil }})
	plain := admission.NewCrowd(admission.CrowdOptions{Kind: "product"})
	for _, c := range []struct {
		name  string
		stage inventory.Stage
		folds bool
	}{
		{"redis-atomic", stock, true},
		{"redis-stream", redisstage.NewRedisStream(stock, redisstage.StreamOptions{}), true},
		{"redis-stream at fsync", redisstage.NewRedisStream(stock, redisstage.StreamOptions{Durability: redisstage.DurabilityFsync}), true},
		{"redis-atomic behind a crowd", plain.Wrap(stock), true},
		{"redis-atomic behind a limiter", limited.Wrap(stock), true},
		{"redis-stream behind a limiter", limited.Wrap(redisstage.NewRedisStream(stock, redisstage.StreamOptions{})), true},
		{"redis-stream at replica", redisstage.NewRedisStream(stock, redisstage.StreamOptions{Durability: redisstage.DurabilityReplica, ReplicaWait: time.Millisecond}), false},
	} {
		svc := inventory.NewService(db.Products(), map[string]inventory.Stage{"s": c.stage}, "fold-1", "O")
		rc, ok := svc.RefusalCheck(context.Background(), "s", inventory.Request{ItemID: 1, UserID: "u", Quantity: 1})
		if !ok {
			t.Fatalf("%s: no refusal check", c.name)
		}
		if folds := rc.Fold != nil; folds != c.folds {
			t.Errorf("%s: the claim takes the units: %v, want %v", c.name, folds, c.folds)
		}
	}
}
