package admission_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
)

// TestCrowdLetsPassHoldersPastTheCap: a waiting room's pass holder
// (inventory.WithPass) is not turned away by the per-item cap, which
// still bounces a buyer without a pass; the pass holder counts inside
// while it is there and leaves the line as it found it.
func TestCrowdLetsPassHoldersPastTheCap(t *testing.T) {
	l := newGatedLine(t, admission.CrowdOptions{Queue: 1}, nil, "h1")
	l.hold("h1")
	l.bounced("a buyer without a pass, the line full", 1)
	ctx := inventory.WithPass(context.Background())
	if _, err := l.svc.Buy(ctx, "s", inventory.Request{ItemID: 1, UserID: "pass-holder", Quantity: 1}); err != nil {
		t.Fatalf("a pass holder, the line full: %v", err)
	}
	l.bounced("a buyer without a pass, after the pass holder left", 1)
	l.let("h1")
	if err := buy(t, l.svc, "after", 1); err != nil {
		t.Fatalf("the line empty again: %v", err)
	}
}

// TestDrawDoesNotHoldPassHolders: the room's own draw placed its pass
// holders; the instance's opening draw lets them straight through while
// it holds a buyer without a pass who comes at the same instant.
func TestDrawDoesNotHoldPassHolders(t *testing.T) {
	r := newDrawRig()
	if err := r.buy(t, "no-pass", 0, 0.9); err != nil {
		t.Fatal(err)
	}
	if _, held := r.held["no-pass"]; !held {
		t.Fatal("a buyer without a pass at the opening was not held")
	}
	r.mu.Lock()
	r.now = time.Unix(1_000, 0).Add(10 * time.Second)
	r.mu.Unlock()
	ctx := inventory.WithPass(context.WithValue(context.Background(), userKey{}, "pass-holder"))
	if err := r.stage.Buy(ctx, inventory.Order{ItemID: 1, UserID: "pass-holder", Quantity: 1}); err != nil {
		t.Fatal(err)
	}
	if d, held := r.held["pass-holder"]; held {
		t.Fatalf("a pass holder at the opening was held %v", d)
	}
}
