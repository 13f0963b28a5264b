package admission_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
)

// TestCrowdRemembersTheWindowOnlyAsLongAsTheReferenceSaid walks the
// crowd's memory of the sale window on a clock the test moves (and which
// is two hours off the wall: only the durations it measures count). A
// stage's "not open, 1 s to go" is repeated from memory for 1 s after the
// buy was sent, less the reference clocks' 2 ms bound on their error (the
// stage's clock may have read up to that early), and not a moment longer:
// the next buyer reaches the stage, which decides. A sell-out of a sale
// that closes in 500 ms is repeated for 498 ms; then the stage says
// "closed", which memory repeats until a reset.
func TestCrowdRemembersTheWindowOnlyAsLongAsTheReferenceSaid(t *testing.T) {
	var mu sync.Mutex
	now := time.Now().Add(2 * time.Hour)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	var answer error
	stage := &stubStage{next: func(inventory.Order) error { return answer }}
	crowd := admission.NewCrowd(admission.CrowdOptions{Epochs: &memEpochs{}, Kind: "product", Now: clock})
	svc := inventory.NewService(resetStore{}, map[string]inventory.Stage{"s": crowd.Wrap(stage)}, "a", "O").WithCrowd(crowd)
	n := 0
	expect := func(what string, want error, calls int64) error {
		t.Helper()
		n++
		err := buy(t, svc, fmt.Sprint("u", n), 1)
		if !errors.Is(err, want) && !(want == nil && err == nil) {
			t.Fatalf("%s: %v, want %v", what, err, want)
		}
		if got := stage.calls.Load(); got != calls {
			t.Fatalf("%s: the stage was asked %d times, want %d", what, got, calls)
		}
		return err
	}

	answer = &inventory.NotOpen{ItemID: 1, Wait: time.Second}
	expect("the first early buyer", inventory.ErrSaleNotOpen, 1)
	advance(997 * time.Millisecond)
	err := expect("997 ms later", inventory.ErrSaleNotOpen, 1)
	var no *inventory.NotOpen
	if !errors.As(err, &no) || no.Wait != time.Millisecond {
		t.Fatalf("from memory, 1 ms before the earliest opening: %v, want a wait of 1ms", err)
	}
	advance(time.Millisecond)
	answer = nil
	expect("998 ms later, the opening may have come", nil, 2)

	answer = inventory.SoldOutAt(inventory.WindowAt{Closes: true, ClosesIn: 500 * time.Millisecond}, inventory.ErrSoldOut)
	expect("the last unit gone", inventory.ErrSoldOut, 3)
	advance(497 * time.Millisecond)
	expect("sold out, 1 ms before the earliest closing", inventory.ErrSoldOut, 3)
	advance(time.Millisecond)
	answer = fmt.Errorf("item 1: %w", inventory.ErrSaleClosed)
	expect("498 ms later, the closing may have come", inventory.ErrSaleClosed, 4)
	advance(time.Hour)
	expect("closed, from memory", inventory.ErrSaleClosed, 4)

	if err := svc.Reset(context.Background(), 1, 5); err != nil {
		t.Fatal(err)
	}
	answer = nil
	expect("after a reset", nil, 5)
}
