package admission_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
)

// drawRig is a crowd with an opening draw over a stage that records who
// reached it. Its clock, the reference clock and each buyer's draw are set
// by the test, and holding records the wait instead of sleeping, so the
// draw's arithmetic is asserted with no timer in the way.
type drawRig struct {
	mu      sync.Mutex
	now     time.Time // this instance's clock
	ref     time.Time // the reference clock at the rig's start
	opens   time.Time // the item's opening (zero: always on sale)
	span    time.Duration
	u       float64 // the next buyer's draw
	reads   int     // reads of the opening
	held    map[string]time.Duration
	reached []string
	stage   inventory.Stage
}

func newDrawRig() *drawRig {
	r := &drawRig{held: map[string]time.Duration{}, span: time.Second}
	r.now = time.Unix(1_000, 0)
	r.ref = time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	r.opens = r.ref.Add(10 * time.Second)
	d := admission.NewDraw(admission.DrawOptions{
		Span: func() time.Duration { r.mu.Lock(); defer r.mu.Unlock(); return r.span },
		Opening: func(context.Context, int64) (time.Time, error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.reads++
			return r.opens, nil
		},
		RefNow: func(context.Context) (time.Time, error) { // runs with this instance's clock
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.ref.Add(r.now.Sub(time.Unix(1_000, 0))), nil
		},
		Now:  func() time.Time { r.mu.Lock(); defer r.mu.Unlock(); return r.now },
		Rand: func() float64 { r.mu.Lock(); defer r.mu.Unlock(); return r.u },
		Sleep: func(ctx context.Context, d time.Duration) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.held[userOf(ctx)] = d
			return ctx.Err()
		},
	})
	c := admission.NewCrowd(admission.CrowdOptions{Kind: "product", Epochs: &memEpochs{}, Draw: d})
	r.stage = c.Wrap(stageFunc(func(_ context.Context, o inventory.Order) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.reached = append(r.reached, o.UserID)
		return nil
	}))
	return r
}

type userKey struct{}

// stageFunc is a stage made of a function.
type stageFunc func(ctx context.Context, o inventory.Order) error

func (f stageFunc) Buy(ctx context.Context, o inventory.Order) error { return f(ctx, o) }

func userOf(ctx context.Context) string { s, _ := ctx.Value(userKey{}).(string); return s }

// buy sends user's buy at this instance's time opening+at, with draw u.
func (r *drawRig) buy(t *testing.T, user string, at time.Duration, u float64) error {
	t.Helper()
	r.mu.Lock()
	r.now = time.Unix(1_000, 0).Add(10*time.Second + at) // the opening is 10 s after the rig's start
	r.u = u
	r.mu.Unlock()
	return r.stage.Buy(context.WithValue(context.Background(), userKey{}, user), inventory.Order{ItemID: 1, UserID: user, Quantity: 1})
}

// TestDrawHoldsTheOpeningsBuyersForARandomPlace: with a 1 s draw, a
// buyer who came at the opening and drew 0.9 is let in at 1.9 s, one who
// came at 0.7 s and drew 0.1 at 1.1 s: the later arrival goes first. One
// who came in the second span waits for its end (2 s); one after it, or
// before the opening, is not held. With the span 0 nobody is held.
func TestDrawHoldsTheOpeningsBuyersForARandomPlace(t *testing.T) {
	r := newDrawRig()
	ms := time.Millisecond
	for _, c := range []struct {
		user string
		at   time.Duration // after the opening, on this instance's clock
		u    float64
		held time.Duration // -1: not held
	}{
		{"early", -500 * ms, 0.5, -1},
		{"a hair early", -50 * ms, 0.5, 1550 * ms}, // within drawEdge: held as at the opening
		{"first", 0, 0.9, 1900 * ms},
		{"later", 700 * ms, 0.1, 400 * ms},
		{"second-span", 1500 * ms, 0.3, 500 * ms},
		{"after", 2000 * ms, 0.3, -1},
	} {
		if err := r.buy(t, c.user, c.at, c.u); err != nil {
			t.Fatalf("%s: %v", c.user, err)
		}
		got, ok := r.held[c.user]
		switch {
		case c.held < 0 && ok:
			t.Errorf("%s (at %v) was held %v; want not held", c.user, c.at, got)
		case c.held >= 0 && got != c.held:
			t.Errorf("%s (at %v, draw %.1f) held %v; want %v", c.user, c.at, c.u, got, c.held)
		}
	}
	// "first" came 0.7 s earlier than "later", yet is let in later:
	// at 0 + 1.9 s against 0.7 + 0.4 = 1.1 s.
	if r.reads != 1 {
		t.Errorf("the opening was read %d times under one epoch; want once", r.reads)
	}
	r.mu.Lock()
	r.span, r.held = 0, map[string]time.Duration{}
	r.mu.Unlock()
	if err := r.buy(t, "no-draw", 100*ms, 0.9); err != nil || len(r.held) != 0 {
		t.Fatalf("with no draw set: %v, held %v; want straight through", err, r.held)
	}
}

// TestDrawOfAnAlwaysOpenItemHoldsNobody: an item with no opening has no
// draw to hold anyone for.
func TestDrawOfAnAlwaysOpenItemHoldsNobody(t *testing.T) {
	r := newDrawRig()
	r.opens = time.Time{}
	if err := r.buy(t, "a", 0, 0.5); err != nil || len(r.held) != 0 || len(r.reached) != 1 {
		t.Fatalf("%v, held %v, reached %v; want straight through to the stage", err, r.held, r.reached)
	}
}

// TestDrawBuyerWhoLeavesWhileHeldIsNotServed: a buyer whose request ends
// while held never reaches the stage.
func TestDrawBuyerWhoLeavesWhileHeldIsNotServed(t *testing.T) {
	r := newDrawRig()
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), userKey{}, "gone"))
	cancel()
	r.mu.Lock()
	r.now = time.Unix(1_010, 0) // the opening
	r.mu.Unlock()
	err := r.stage.Buy(ctx, inventory.Order{ItemID: 1, UserID: "gone", Quantity: 1})
	if !errors.Is(err, context.Canceled) || len(r.reached) != 0 {
		t.Fatalf("%v, reached %v; want the request's end and no buy", err, r.reached)
	}
}

// TestDrawOrderIsIndependentOfArrival: 2,000 buyers arrive one after the
// other through the draw's first span, each with a real random draw. The
// order they are let in must not follow the order they came: of the first
// half to arrive, about half are in the first half let in (a binomial
// count; outside 40-60% has a chance below one in 10^18 for a fair draw,
// where arrival order would give 100%).
func TestDrawOrderIsIndependentOfArrival(t *testing.T) {
	const n = 2000
	span := time.Second
	var releases [n]time.Duration
	now := time.Unix(0, 0)
	var mu sync.Mutex
	d := admission.NewDraw(admission.DrawOptions{
		Span:    func() time.Duration { return span },
		Opening: func(context.Context, int64) (time.Time, error) { return time.Unix(100, 0), nil },
		RefNow:  func(context.Context) (time.Time, error) { return time.Unix(100, 0), nil }, // read at the opening
		Now:     func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
		Sleep: func(ctx context.Context, wait time.Duration) error {
			i := ctx.Value(userKey{}).(int)
			releases[i] = span*time.Duration(i)/n + wait // arrival + hold, from the opening
			return nil
		},
	})
	c := admission.NewCrowd(admission.CrowdOptions{Kind: "product", Epochs: &memEpochs{}, Draw: d})
	stage := c.Wrap(stageFunc(func(context.Context, inventory.Order) error { return nil }))
	start := time.Unix(0, 0) // the opening on this clock (read when the reference said it was the opening)
	for i := range n {
		mu.Lock()
		now = start.Add(span * time.Duration(i) / n)
		mu.Unlock()
		if err := stage.Buy(context.WithValue(context.Background(), userKey{}, i), inventory.Order{ItemID: 1, UserID: "u", Quantity: 1}); err != nil {
			t.Fatal(err)
		}
	}
	sorted := releases
	slices.Sort(sorted[:])
	median := sorted[n/2]
	early := 0
	for i := range n / 2 {
		if releases[i] < median {
			early++
		}
		if releases[i] < span || releases[i] >= 2*span {
			t.Fatalf("buyer %d let in at %v after the opening; want within the draw's second span", i, releases[i])
		}
	}
	if share := float64(early) / (n / 2); share < 0.4 || share > 0.6 {
		t.Fatalf("%.0f%% of the first half to arrive were let in among the first half; want about 50%% (arrival order would be 100%%)", 100*share)
	}
}

// TestDrawHeldBuyerJudgedByTheEpochOfItsRelease: while a buyer is held,
// another finds the item sold out (remembered under the epoch of then),
// and a reset brings units back (a new epoch). The held buyer must reach
// the stage, not hear the stale sell-out of the epoch it arrived under.
func TestDrawHeldBuyerJudgedByTheEpochOfItsRelease(t *testing.T) {
	epochs := &memEpochs{}
	var stage inventory.Stage
	var reached []string
	opens := time.Unix(100, 0)
	now := opens.Add(200 * time.Millisecond) // in the draw's first span
	d := admission.NewDraw(admission.DrawOptions{
		Span:    func() time.Duration { return time.Second },
		Opening: func(context.Context, int64) (time.Time, error) { return opens, nil },
		RefNow:  func(context.Context) (time.Time, error) { return now, nil },
		Now:     func() time.Time { return now },
		Sleep: func(ctx context.Context, _ time.Duration) error {
			if userOf(ctx) != "held" {
				return nil
			}
			// While "held" waits: a buyer finds it sold out, then a reset.
			if err := stage.Buy(context.WithValue(ctx, userKey{}, "finder"), inventory.Order{ItemID: 1, UserID: "finder", Quantity: 1}); !errors.Is(err, inventory.ErrSoldOut) {
				t.Errorf("the finder: %v; want sold out", err)
			}
			return epochs.Bump(ctx, "product:1")
		},
	})
	c := admission.NewCrowd(admission.CrowdOptions{Kind: "product", Epochs: epochs, Draw: d})
	stage = c.Wrap(stageFunc(func(_ context.Context, o inventory.Order) error {
		reached = append(reached, o.UserID)
		if o.UserID == "finder" {
			return inventory.ErrSoldOut
		}
		return nil
	}))
	err := stage.Buy(context.WithValue(context.Background(), userKey{}, "held"), inventory.Order{ItemID: 1, UserID: "held", Quantity: 1})
	if err != nil || !slices.Equal(reached, []string{"finder", "held"}) {
		t.Fatalf("the held buyer after a reset: %v, stage reached by %v; want it to reach the stage", err, reached)
	}
}
