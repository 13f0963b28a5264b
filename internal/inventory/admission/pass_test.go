package admission_test

import (
	"context"
	"testing"

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
