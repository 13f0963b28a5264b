package admission_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
)

// TestDrawSlowReferenceReadLetsNobodySkip: the reference clock is read at
// the start of a round trip that takes 300 ms to come back (a loaded
// instance or database). The draw must not place the opening later than
// it is: a buyer who comes 150 ms after the opening, by the reference
// clock the stage sells on, must be held like everyone else of the first
// span, not sold to at once in arrival order.
func TestDrawSlowReferenceReadLetsNobodySkip(t *testing.T) {
	var mu sync.Mutex
	base := time.Unix(1_000, 0) // this instance's clock
	refBase := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	opens := refBase.Add(10 * time.Second)
	now := base
	ref := func() time.Time { return refBase.Add(now.Sub(base)) } // mu held
	held := map[string]time.Duration{}
	var sold []string
	d := admission.NewDraw(admission.DrawOptions{
		Span:    func() time.Duration { return time.Second },
		Opening: func(context.Context, int64) (time.Time, error) { return opens, nil },
		RefNow: func(context.Context) (time.Time, error) {
			mu.Lock()
			defer mu.Unlock()
			r := ref()                            // read as the query runs...
			now = now.Add(300 * time.Millisecond) // ...and heard 300 ms later
			return r, nil
		},
		Now:  func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
		Rand: func() float64 { return 0.5 },
		Sleep: func(ctx context.Context, wait time.Duration) error {
			mu.Lock()
			defer mu.Unlock()
			held[userOf(ctx)] = wait
			return nil
		},
	})
	c := admission.NewCrowd(admission.CrowdOptions{Kind: "product", Epochs: &memEpochs{}, Draw: d,
		Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	stage := c.Wrap(stageFunc(func(ctx context.Context, o inventory.Order) error {
		mu.Lock()
		defer mu.Unlock()
		if r := ref(); r.Before(opens) { // the stage's window, on the reference clock
			return &inventory.NotOpen{ItemID: o.ItemID, Wait: opens.Sub(r)}
		}
		sold = append(sold, o.UserID)
		return nil
	}))
	buy := func(user string, at time.Duration) error { // at: after the opening, on this instance's clock
		mu.Lock()
		now = base.Add(10*time.Second + at)
		mu.Unlock()
		return stage.Buy(context.WithValue(context.Background(), userKey{}, user), inventory.Order{ItemID: 1, UserID: user, Quantity: 1})
	}
	// The first buyer, a second early, has the opening read and is told
	// to wait.
	if err := buy("early", -time.Second); !errors.Is(err, inventory.ErrSaleNotOpen) {
		t.Fatalf("early: %v; want not open", err)
	}
	if err := buy("script", 150*time.Millisecond); err != nil {
		t.Fatalf("script: %v", err)
	}
	if _, ok := held["script"]; !ok {
		t.Fatalf("a buyer 150 ms after the opening (by the reference clock) was not held: sold to %v at once, ahead of the draw", sold)
	}
}
