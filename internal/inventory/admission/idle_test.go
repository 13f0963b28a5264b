package admission_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// idleRig is one instance's crowd for one kind, with a sold-out memory,
// an opening draw and a line, over a stage the test scripts, on a clock
// the test moves: nothing in it waits on a timer.
type idleRig struct {
	mu     sync.Mutex
	now    time.Time
	u      float64                  // the next buyer's draw
	opens  time.Time                // every item's opening (zero: always on sale)
	reads  int                      // reads of an opening
	held   map[string]time.Duration // how long the draw held each buyer
	answer func(o inventory.Order) error
	calls  int // buys that reached the stage
	// reading, when set, runs in each read of an opening, before it
	// answers, without r.mu.
	reading func()

	crowd *admission.Crowd
	stage inventory.Stage
}

const idleAfter = 2 * time.Minute

func newIdleRig(epochs admission.Epochs, answer func(o inventory.Order) error) *idleRig {
	r := &idleRig{now: time.Unix(1_000, 0), held: map[string]time.Duration{}, answer: answer}
	clock := func() time.Time { r.mu.Lock(); defer r.mu.Unlock(); return r.now }
	d := admission.NewDraw(admission.DrawOptions{
		Span: func() time.Duration { return time.Second },
		Opening: func(context.Context, int64) (time.Time, error) {
			r.mu.Lock()
			r.reads++
			f := r.reading
			r.mu.Unlock()
			if f != nil {
				f()
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.opens, nil
		},
		RefNow: func(context.Context) (time.Time, error) { return clock(), nil }, // the reference clock is this one
		Now:    clock,
		Rand:   func() float64 { r.mu.Lock(); defer r.mu.Unlock(); return r.u },
		Sleep: func(ctx context.Context, d time.Duration) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.held[userOf(ctx)] = d
			return nil
		},
	})
	r.crowd = admission.NewCrowd(admission.CrowdOptions{Kind: "product", Epochs: epochs, Draw: d, Now: clock, IdleAfter: idleAfter,
		Queue: 4, QueueMax: 8, Within: time.Second})
	r.stage = r.crowd.Wrap(stageFunc(func(_ context.Context, o inventory.Order) error {
		r.mu.Lock()
		r.calls++
		f := r.answer
		r.mu.Unlock()
		return f(o)
	}))
	return r
}

func (r *idleRig) advance(d time.Duration) { r.mu.Lock(); r.now = r.now.Add(d); r.mu.Unlock() }

func (r *idleRig) stageCalls() int { r.mu.Lock(); defer r.mu.Unlock(); return r.calls }

func (r *idleRig) buy(user string, id int64, u float64) error {
	r.mu.Lock()
	r.u = u
	r.mu.Unlock()
	return r.stage.Buy(context.WithValue(context.Background(), userKey{}, user), inventory.Order{ItemID: id, UserID: user, Quantity: 1})
}

// TestIdleItemsLeaveNothingBehind: 10,000 items each bought once (a third
// sold out, a third not open yet, a third sold, every one placed by the
// draw) leave 10,000 and more entries in the crowd; none of them is
// dropped one tick before the items have been idle IdleAfter, and all of
// them are at IdleAfter.
func TestIdleItemsLeaveNothingBehind(t *testing.T) {
	r := newIdleRig(&memEpochs{}, func(o inventory.Order) error {
		switch o.ItemID % 3 {
		case 0:
			return inventory.ErrSoldOut
		case 1:
			return &inventory.NotOpen{ItemID: o.ItemID, Wait: time.Hour}
		}
		return nil
	})
	const items = 10_000
	for id := int64(1); id <= items; id++ {
		_ = r.buy(fmt.Sprint("u", id), id, 0.5)
	}
	touched := r.crowd.Tracked()
	if touched < items {
		t.Fatalf("after %d items were bought once the crowd tracks %d entries; the rig remembers nothing", items, touched)
	}
	r.advance(idleAfter - time.Nanosecond)
	r.crowd.DropIdle()
	if n := r.crowd.Tracked(); n != touched {
		t.Fatalf("items idle for less than IdleAfter: %d entries left of %d, want all kept", n, touched)
	}
	r.advance(time.Nanosecond)
	r.crowd.DropIdle()
	if n := r.crowd.Tracked(); n != 0 {
		t.Fatalf("%d items idle for IdleAfter: %d per-item entries left of %d, want 0", items, n, touched)
	}
}

// TestSellOutAnsweredFromMemoryIsNotIdle: a post-sale crowd that keeps
// hearing "sold out" from memory keeps the mark, however long the wave:
// the cheap answer never lapses during a sale.
func TestSellOutAnsweredFromMemoryIsNotIdle(t *testing.T) {
	r := newIdleRig(&memEpochs{}, func(inventory.Order) error { return inventory.ErrSoldOut })
	if err := r.buy("first", 1, 0); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("first buyer: %v, want sold out", err)
	}
	for i := range 10 {
		r.advance(idleAfter / 2)
		r.crowd.DropIdle()
		if err := r.buy(fmt.Sprint("late", i), 1, 0); !errors.Is(err, inventory.ErrRememberedSoldOut) {
			t.Fatalf("late buyer %d, %v after the sell-out: %v, want sold out from memory", i, time.Duration(i+1)*idleAfter/2, err)
		}
	}
	if n := r.stageCalls(); n != 1 {
		t.Fatalf("the stage was asked %d times, want 1: the post-sale wave must cost no round trip", n)
	}
}

// saleStage answers like a stage with stock units from the rig's opening
// on: not open before it, sold out once they are gone.
func saleStage(r *idleRig, stock int) func(o inventory.Order) error {
	return func(o inventory.Order) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		switch {
		case r.now.Before(r.opens):
			return &inventory.NotOpen{ItemID: o.ItemID, Wait: r.opens.Sub(r.now)}
		case stock == 0:
			return inventory.ErrSoldOut
		}
		stock--
		return nil
	}
}

// opening runs one item's opening on r, its buyers coming at the given
// times after it with the given draws: what each heard and how long the
// draw held it, and the stage calls and reads of the opening it cost.
func opening(r *idleRig) []string {
	calls, reads := r.stageCalls(), r.reads
	var got []string
	at := time.Duration(0)
	for i, b := range []struct {
		at time.Duration
		u  float64
	}{{0, 0.9}, {300 * time.Millisecond, 0.1}, {700 * time.Millisecond, 0.5}, {1500 * time.Millisecond, 0.3}, {2500 * time.Millisecond, 0}, {3 * time.Second, 0}, {4 * time.Second, 0}} {
		r.advance(b.at - at)
		at = b.at
		user := fmt.Sprint("buyer", i)
		err := r.buy(user, 7, b.u)
		got = append(got, fmt.Sprintf("%s at %v: %s, held %v", user, b.at, outcome(err), r.held[user]))
	}
	return append(got, fmt.Sprintf("stage calls %d, opening reads %d", r.stageCalls()-calls, r.reads-reads))
}

// outcome names an answer the way a buyer tells them apart.
func outcome(err error) string {
	switch {
	case err == nil:
		return "bought"
	case errors.Is(err, inventory.ErrRememberedSoldOut):
		return "sold out (memory)"
	case errors.Is(err, inventory.ErrSoldOut):
		return "sold out (stage)"
	case errors.Is(err, inventory.ErrSaleNotOpen):
		return "not open"
	}
	return err.Error()
}

// TestItemBackFromIdleIsAFreshItem: an item whose buyers came an hour
// before its opening (the instance learnt its opening and that it was not
// open yet), then went idle and was dropped, sells at its opening exactly
// as on an instance that never saw it: the same answers, the same draw
// (each buyer held as long), one read of the opening, the stage asked as
// often, and the sell-out answered from memory after.
func TestItemBackFromIdleIsAFreshItem(t *testing.T) {
	fresh := newIdleRig(&memEpochs{}, nil)
	fresh.answer, fresh.opens = saleStage(fresh, 2), fresh.now.Add(time.Hour)
	fresh.advance(time.Hour)
	want := opening(fresh)

	back := newIdleRig(&memEpochs{}, nil)
	back.answer, back.opens = saleStage(back, 2), back.now.Add(time.Hour)
	for _, u := range []string{"early", "early again"} {
		if err := back.buy(u, 7, 0); !errors.Is(err, inventory.ErrSaleNotOpen) {
			t.Fatalf("%s, an hour before the opening: %v, want not open", u, err)
		}
	}
	if back.crowd.Tracked() == 0 {
		t.Fatal("the early buyers left nothing to drop: the test proves nothing")
	}
	back.advance(time.Hour)
	back.crowd.DropIdle()
	if n := back.crowd.Tracked(); n != 0 {
		t.Fatalf("after an idle hour %d entries are left", n)
	}
	got := opening(back)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("back from idle: %s\n           fresh: %s", got[i], want[i])
		}
	}
	if r := back.buy("after", 7, 0); !errors.Is(r, inventory.ErrRememberedSoldOut) {
		t.Errorf("after the sell-out: %v, want sold out from memory", r)
	}
}

// TestDropIdleBesideABuyerOfTheSameItem (run it with -race): DropIdle and
// buyers of the item it is dropping, forced to overlap.
//   - A buyer answered from memory while DropIdle is under way (held at
//     its start) touches the mark: it is kept, and the next buyer still
//     hears sold out from memory.
//   - A read of the opening under way (after a reset) while DropIdle
//     drops the old one: the new opening is kept, and the draw holds the
//     next buyer by it without reading again.
//   - A buyer inside the stage while DropIdle drops everything the item
//     had: its line is kept (never idle with a buyer inside), the sell-out
//     it brings back is remembered, and the line is empty after it.
func TestDropIdleBesideABuyerOfTheSameItem(t *testing.T) {
	t.Run("answered from memory", dropIdleBesideAnAnswerFromMemory)
	t.Run("reading the opening", dropIdleBesideAReadOfTheOpening)
	t.Run("inside the stage", dropIdleBesideABuyerInsideTheStage)
}

func dropIdleBesideAnAnswerFromMemory(t *testing.T) {
	r := newIdleRig(&memEpochs{}, func(inventory.Order) error { return inventory.ErrSoldOut })
	if err := r.buy("first", 1, 0); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatal(err)
	}
	r.advance(idleAfter)
	paused, resume := make(chan struct{}), make(chan struct{})
	r.crowd.SetBeforeDrop(func() { close(paused); <-resume })
	done := make(chan struct{})
	go func() { defer close(done); r.crowd.DropIdle() }()
	<-paused
	if err := r.buy("during", 1, 0); !errors.Is(err, inventory.ErrRememberedSoldOut) {
		t.Fatalf("buyer during DropIdle: %v, want sold out from memory", err)
	}
	close(resume)
	<-done
	if err := r.buy("after", 1, 0); !errors.Is(err, inventory.ErrRememberedSoldOut) {
		t.Fatalf("buyer after DropIdle: %v, want sold out from memory (the mark was touched)", err)
	}
	if n := r.stageCalls(); n != 1 {
		t.Fatalf("stage calls %d, want 1", n)
	}
}

func dropIdleBesideAReadOfTheOpening(t *testing.T) {
	epochs := &memEpochs{}
	r := newIdleRig(epochs, func(inventory.Order) error { return nil })
	if err := r.buy("long ago", 1, 0); err != nil { // the draw remembers the opening (none)
		t.Fatal(err)
	}
	// A reset gives the item a new epoch and an opening a second away,
	// long after: the old mark is idle, and the next buyer reads anew.
	if err := epochs.Bump(context.Background(), "product:1"); err != nil {
		t.Fatal(err)
	}
	r.advance(idleAfter)
	r.opens = r.now.Add(time.Second)
	reading, release := make(chan struct{}), make(chan struct{})
	r.reading = func() { close(reading); <-release }
	done := make(chan error)
	go func() { done <- r.buy("early", 1, 0.5) }() // a second before the opening
	<-reading
	r.crowd.DropIdle() // drops the old mark while the new one is being read
	r.mu.Lock()
	r.reading = nil
	r.mu.Unlock()
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("early buyer: %v", err)
	}
	r.advance(time.Second + 200*time.Millisecond) // within the draw's first span
	if err := r.buy("in the draw", 1, 0.5); err != nil {
		t.Fatalf("buyer in the draw: %v", err)
	}
	if r.reads != 2 || r.held["in the draw"] != 1300*time.Millisecond {
		t.Fatalf("%d reads of the opening (want 2: one per epoch), buyer in the draw held %v (want 1.3s)", r.reads, r.held["in the draw"])
	}
}

func dropIdleBesideABuyerInsideTheStage(t *testing.T) {
	inside, release := make(chan struct{}), make(chan struct{})
	r := newIdleRig(&memEpochs{}, func(o inventory.Order) error {
		if o.UserID == "slow" {
			close(inside)
			<-release
		}
		return inventory.ErrSoldOut
	})
	r.opens = r.now // the draw has an opening to remember
	r.advance(time.Hour)
	done := make(chan error)
	go func() { done <- r.buy("slow", 1, 0) }()
	<-inside
	r.advance(idleAfter)
	r.crowd.DropIdle()
	if n := r.crowd.Tracked(); n == 0 {
		t.Fatal("DropIdle dropped the line of an item with a buyer inside")
	}
	close(release)
	if err := <-done; !errors.Is(err, inventory.ErrSoldOut) || errors.Is(err, inventory.ErrRememberedSoldOut) {
		t.Fatalf("the buyer inside: %v, want sold out from the stage", err)
	}
	if err := r.buy("next", 1, 0); !errors.Is(err, inventory.ErrRememberedSoldOut) {
		t.Fatalf("next buyer: %v, want sold out from memory (learnt after the drop)", err)
	}
	r.advance(idleAfter)
	r.crowd.DropIdle()
	if n := r.crowd.Tracked(); n != 0 {
		t.Fatalf("%d entries left once the item went idle again", n)
	}
}

// TestUpkeepOfAnIdleCrowdSendsNothing: the crowd's upkeep as serve runs
// it every lease (RetryRestocks, then DropIdle) over RedisEpochs, after
// 1,000 items were each refused once: it sends no Redis command, and once
// the items have been idle IdleAfter it leaves no entry, the epochs
// included.
func TestUpkeepOfAnIdleCrowdSendsNothing(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.StartRedis(t).Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	sent := &admission.CommandCounter{}
	rdb.AddHook(sent)
	epochs := admission.NewRedisEpochs(rdb, rdb, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() { defer close(watched); epochs.Watch(ctx) }()
	t.Cleanup(func() { cancel(); <-watched })
	for !epochs.Subscribed() {
		time.Sleep(time.Millisecond) // poll until the subscription is confirmed
	}
	r := newIdleRig(epochs, func(inventory.Order) error { return inventory.ErrSoldOut })
	epochs.SetClock(func() time.Time { r.mu.Lock(); defer r.mu.Unlock(); return r.now })
	for id := int64(1); id <= 1000; id++ {
		if err := r.buy(fmt.Sprint("u", id), id, 0); !errors.Is(err, inventory.ErrSoldOut) {
			t.Fatalf("item %d: %v, want sold out", id, err)
		}
	}
	if n := r.crowd.Tracked(); n < 2000 {
		t.Fatalf("1,000 items refused once left %d entries, want a sell-out and an epoch each at least", n)
	}
	before := sent.Sent()
	for range 3 {
		r.advance(idleAfter / 2)
		if err := r.crowd.RetryRestocks(ctx); err != nil {
			t.Fatal(err)
		}
		r.crowd.DropIdle()
	}
	if n := sent.Sent() - before; n != 0 {
		t.Fatalf("the upkeep of an idle crowd sent %d Redis commands, want 0", n)
	}
	if n := r.crowd.Tracked(); n != 0 {
		t.Fatalf("after the items were idle IdleAfter: %d entries left, want 0", n)
	}
}
