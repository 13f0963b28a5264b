package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// fleetOfTwo is two instances' crowd controls over one shared epoch store,
// each wrapping its own stage under the name "s", with what instance a
// announces handed to b as the fleet would (with a lease's trust), and
// kept for the test.
type fleetOfTwo struct {
	epochs       *memEpochs
	stageA       *stubStage
	stageB       *stubStage
	a, b         *inventory.Service
	crowdB       *inventory.Crowd
	mu           sync.Mutex
	announced    []inventory.SoldOut
	announcedByB []inventory.SoldOut
	now          time.Time
}

func newFleetOfTwo(aAnswers error) *fleetOfTwo {
	f := &fleetOfTwo{epochs: &memEpochs{}, now: time.Unix(1_000_000, 0)}
	clock := func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }
	f.stageA = &stubStage{next: func(inventory.Order) error { return aAnswers }}
	f.stageB = &stubStage{next: func(inventory.Order) error { return nil }}
	crowdA := inventory.NewCrowd(inventory.CrowdOptions{Epochs: f.epochs, Kind: "product", Now: clock, Announce: func(n inventory.SoldOut) {
		f.mu.Lock()
		f.announced = append(f.announced, n)
		f.mu.Unlock()
	}})
	f.crowdB = inventory.NewCrowd(inventory.CrowdOptions{Epochs: f.epochs, Kind: "product", Now: clock, Announce: func(n inventory.SoldOut) {
		f.mu.Lock()
		f.announcedByB = append(f.announcedByB, n)
		f.mu.Unlock()
	}})
	f.a = inventory.NewService(resetStore{}, map[string]inventory.Stage{"s": crowdA.WrapShared("s", f.stageA)}, "a", "O").WithCrowd(crowdA)
	f.b = inventory.NewService(resetStore{}, map[string]inventory.Stage{"s": f.crowdB.WrapShared("s", f.stageB)}, "b", "O").WithCrowd(f.crowdB)
	return f
}

// tell hands b every announcement a made so far, as heard with trust.
func (f *fleetOfTwo) tell(trust time.Duration) {
	f.mu.Lock()
	got := f.announced
	f.announced = nil
	f.mu.Unlock()
	for _, n := range got {
		n.Trust = trust
		f.crowdB.Heard(n)
	}
}

func (f *fleetOfTwo) advance(d time.Duration) { f.mu.Lock(); f.now = f.now.Add(d); f.mu.Unlock() }

// TestSellOutFoundOnOneInstanceIsAnsweredOnAnother: instance a's stage
// finds the item sold out, for two buyers inside it at once; a announces
// it once; once b hears it, b's buyers are answered from memory with b's
// stage never asked, until the trust runs out; then b's stage is asked
// again. What b only heard, it does not announce.
func TestSellOutFoundOnOneInstanceIsAnsweredOnAnother(t *testing.T) {
	f := newFleetOfTwo(inventory.ErrSoldOut)
	inside := make(chan struct{})
	var once sync.Once
	var arrived sync.WaitGroup
	arrived.Add(2)
	f.stageA.next = func(inventory.Order) error {
		arrived.Done()
		once.Do(func() { go func() { arrived.Wait(); close(inside) }() })
		<-inside // both buyers are inside before either hears sold out
		return inventory.ErrSoldOut
	}
	var both sync.WaitGroup
	for i := range 2 {
		both.Go(func() {
			if err := buy(t, f.a, fmt.Sprint("a-inside-", i), 1); !errors.Is(err, inventory.ErrSoldOut) {
				t.Errorf("a's buyer inside %d: %v, want sold out", i, err)
			}
		})
	}
	both.Wait()
	for i := range 5 {
		if err := buy(t, f.a, fmt.Sprint("a-", i), 1); !errors.Is(err, inventory.ErrSoldOut) {
			t.Fatalf("a's buyer %d: %v, want sold out", i, err)
		}
	}
	f.mu.Lock()
	got := append([]inventory.SoldOut(nil), f.announced...)
	f.mu.Unlock()
	if len(got) != 1 || got[0].Item != "product:1" || got[0].Stage != "s" || got[0].Epoch != "0" || got[0].MinQty != 1 || got[0].Closes != 0 {
		t.Fatalf("a announced %+v; want one sell-out of product:1 under stage s, epoch 0, 1 unit, no closing", got)
	}
	f.tell(time.Second)
	for i := range 5 {
		if err := buy(t, f.b, fmt.Sprint("b-", i), 1); !errors.Is(err, inventory.ErrSoldOut) {
			t.Fatalf("b's buyer %d after hearing: %v, want sold out from memory", i, err)
		}
	}
	if n := f.stageB.calls.Load(); n != 0 {
		t.Fatalf("b's stage was asked %d times after b heard the sell-out; want 0", n)
	}
	f.advance(time.Second)
	if err := buy(t, f.b, "b-after-trust", 1); err != nil {
		t.Fatalf("b's buyer once the trust ran out: %v; want b's own stage's answer (it sells)", err)
	}
	if n := f.stageB.calls.Load(); n != 1 {
		t.Fatalf("b's stage asked %d times once the trust ran out; want 1", n)
	}
	if len(f.announcedByB) != 0 {
		t.Fatalf("b announced %+v: what it only heard is not its news", f.announcedByB)
	}
}

// TestSellOutHeardUnderAnOldEpochNeverCounts: a sell-out found before a
// reset and heard after it (an announcement slow on the way) is under the
// old epoch: b's buyers of the new stock reach the stage.
func TestSellOutHeardUnderAnOldEpochNeverCounts(t *testing.T) {
	f := newFleetOfTwo(inventory.ErrSoldOut)
	if err := buy(t, f.a, "a-1", 1); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("a's buyer: %v, want sold out", err)
	}
	if err := f.b.Reset(context.Background(), 1, 5); err != nil {
		t.Fatal(err)
	}
	f.tell(time.Hour)
	if err := buy(t, f.b, "b-1", 1); err != nil {
		t.Fatalf("b's buyer after the reset: %v; want the stage's sale", err)
	}
	if n := f.stageB.calls.Load(); n != 1 {
		t.Fatalf("b's stage asked %d times; want 1", n)
	}
}

// TestHeardSellOutIsForItsStageAndKindOnly: each stage remembers its own
// sell-outs (stages can see stock differently), and a crowd holds one kind
// of item: a sell-out announced for another stage, another kind or no
// units at all is not remembered.
func TestHeardSellOutIsForItsStageAndKindOnly(t *testing.T) {
	f := newFleetOfTwo(nil)
	for _, n := range []inventory.SoldOut{
		{Item: "product:1", Stage: "other", Epoch: "0", MinQty: 1, Trust: time.Hour},
		{Item: "coupon:1", Stage: "s", Epoch: "0", MinQty: 1, Trust: time.Hour},
		{Item: "product:x", Stage: "s", Epoch: "0", MinQty: 1, Trust: time.Hour},
		{Item: "product:1", Stage: "s", Epoch: "0", MinQty: 0, Trust: time.Hour},
		{Item: "product:1", Stage: "s", Epoch: "0", MinQty: 1, Trust: 0},
	} {
		f.crowdB.Heard(n)
		before := f.stageB.calls.Load()
		if err := buy(t, f.b, fmt.Sprint("b-", before), 1); err != nil {
			t.Fatalf("after hearing %+v: %v; want the stage's sale", n, err)
		}
		if f.stageB.calls.Load() != before+1 {
			t.Fatalf("after hearing %+v the stage was not asked", n)
		}
	}
	// A sell-out for 3 units or more leaves a buyer of 2 to the stage.
	f.crowdB.Heard(inventory.SoldOut{Item: "product:1", Stage: "s", Epoch: "0", MinQty: 3, Trust: time.Hour})
	if err := buy(t, f.b, "b-two", 2); err != nil {
		t.Fatalf("a buyer of 2 when 3 cannot be served: %v; want the stage's sale", err)
	}
	if err := buy(t, f.b, "b-three", 3); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("a buyer of 3: %v; want sold out from memory", err)
	}
}

// TestSellOutForNowIsNotAnnounced: units reserved and not yet written may
// come back; a sell-out "for now" is neither remembered nor announced.
func TestSellOutForNowIsNotAnnounced(t *testing.T) {
	f := newFleetOfTwo(inventory.RefusalError("sold-out-for-now"))
	if err := buy(t, f.a, "a-1", 1); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("a's buyer: %v, want sold out (for now)", err)
	}
	if err := buy(t, f.a, "a-2", 1); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("a's next buyer: %v, want sold out (for now)", err)
	}
	if n := f.stageA.calls.Load(); n != 2 {
		t.Fatalf("a's stage asked %d times; want 2 (nothing remembered)", n)
	}
	if len(f.announced) != 0 {
		t.Fatalf("a announced %+v for a sell-out for now", f.announced)
	}
}
