package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// TestPayWhoseReadIsLostIsNotNothingWritten: a payment's UPDATE commits
// (the order is paid) and the read of the order that follows it gets no
// answer by the deadline. Its error must not say that nothing was
// written (unavailable, or a timeout that "bought nothing"): the order is
// paid. On three serve, a KILL of the pool's MySQL connections during the
// payments answered one payment 503 unavailable ("nothing was written")
// whose order was paid.
func TestPayWhoseReadIsLostIsNotNothingWritten(t *testing.T) {
	r, l := throughHolder(t)
	ctx := context.Background()
	if err := l.WriteComputed(ctx, order("pay-read", "pay-buyer", 1), 9, 0); err != nil {
		t.Fatal(err)
	}
	// The read after the UPDATE: a SELECT naming the order.
	h := r.arm(t, func(q string) bool {
		return strings.HasPrefix(strings.ToUpper(strings.TrimSpace(q)), "SELECT") && strings.Contains(q, "pay-read")
	}, false)
	err := endsWhileHeld(t, h, nil, "the payment", func(ctx context.Context) error {
		_, err := l.Pay(ctx, "pay-read", time.Time{})
		return err
	})
	h.free()
	o, ferr := l.FindOrder(ctx, "pay-read")
	if ferr != nil || o.Status != inventory.StatusPaid {
		t.Fatalf("the order after the payment: %+v %v; want paid (the UPDATE committed)", o, ferr)
	}
	if !errors.Is(err, inventory.ErrOutcomeUnknown) {
		t.Fatalf("the payment whose read was lost: %v; want ErrOutcomeUnknown (the order was paid)", err)
	}
}
