package redisstage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
)

// fakeRows is a batchDeducter that records what it was asked to write. The
// first write waits for release, so that the test can queue sales behind
// it; deductAll, when set, answers a group, and single answers one order.
type fakeRows struct {
	entered chan string // the order number of each write as it starts
	release chan struct{}

	mu     sync.Mutex
	writes [][]string // order numbers, per transaction
	ctxs   []context.Context
	first  bool

	deductAll func(ctx context.Context, orders []inventory.Order) error
	single    func(o inventory.Order) error
}

func newFakeRows() *fakeRows {
	return &fakeRows{entered: make(chan string, 100), release: make(chan struct{})}
}

func (f *fakeRows) hold(ctx context.Context, nos []string) {
	f.mu.Lock()
	f.writes = append(f.writes, nos)
	f.ctxs = append(f.ctxs, ctx)
	wait := !f.first
	f.first = true
	f.mu.Unlock()
	f.entered <- nos[0]
	if wait {
		<-f.release
	}
}

func (f *fakeRows) Deduct(ctx context.Context, o inventory.Order) error {
	f.hold(ctx, []string{o.No})
	if f.single != nil {
		return f.single(o)
	}
	return nil
}

func (f *fakeRows) DeductAll(ctx context.Context, orders []inventory.Order) error {
	nos := make([]string, len(orders))
	for i, o := range orders {
		nos[i] = o.No
	}
	f.hold(ctx, nos)
	if f.deductAll != nil {
		return f.deductAll(ctx, orders)
	}
	return nil
}

func (f *fakeRows) written() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.writes)
}

// queued waits until n sales of item 1 wait behind the write in progress.
func queued(t *testing.T, g *groupCommit, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		g.mu.Lock()
		got := 0
		if l := g.lanes[1]; l != nil {
			got = len(l.waiting)
		}
		g.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sales waiting, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// sell starts a sale and returns where its answer arrives.
func sell(g *groupCommit, ctx context.Context, no, user string) <-chan error {
	out := make(chan error, 1)
	go func() { out <- g.Deduct(ctx, inventory.Order{ItemID: 1, No: no, UserID: user, Quantity: 1}) }()
	return out
}

// behindAWrite starts a first sale, waits until its write holds the row,
// and queues one sale per name behind it.
func behindAWrite(t *testing.T, g *groupCommit, f *fakeRows, ctxs map[string]context.Context, names ...string) (first <-chan error, rest map[string]<-chan error) {
	t.Helper()
	first = sell(g, context.Background(), "first", "u-first")
	<-f.entered
	rest = map[string]<-chan error{}
	for i, n := range names {
		ctx := ctxs[n]
		if ctx == nil {
			ctx = context.Background()
		}
		rest[n] = sell(g, ctx, n, "u-"+n)
		queued(t, g, i+1)
	}
	return first, rest
}

// TestSalesBehindAWriteShareOneTransaction: while the first sale's write
// holds the row, ten more arrive. They are written together, in one
// transaction, once the first is done, and every one of them is answered.
func TestSalesBehindAWriteShareOneTransaction(t *testing.T) {
	f := newFakeRows()
	g := newGroupCommit(f)
	var names []string
	for i := range 10 {
		names = append(names, fmt.Sprintf("o%d", i))
	}
	first, rest := behindAWrite(t, g, f, nil, names...)
	close(f.release)
	if err := <-first; err != nil {
		t.Fatalf("first sale: %v", err)
	}
	for _, n := range names {
		if err := <-rest[n]; err != nil {
			t.Errorf("sale %s: %v", n, err)
		}
	}
	want := [][]string{{"first"}, names}
	if got := f.written(); !slices.EqualFunc(got, want, slices.Equal[[]string]) {
		t.Fatalf("transactions %v, want %v", got, want)
	}
}

// TestRefusedGroupWritesEachSaleAlone: the group is refused because one
// buyer already has a row. Each sale is then written alone: the repeat
// buyer is told so, the others are sold.
func TestRefusedGroupWritesEachSaleAlone(t *testing.T) {
	f := newFakeRows()
	f.deductAll = func(context.Context, []inventory.Order) error {
		return fmt.Errorf("batch: %w", inventory.ErrAlreadyPurchased)
	}
	f.single = func(o inventory.Order) error {
		if o.No == "dup" {
			return inventory.ErrAlreadyPurchased
		}
		return nil
	}
	g := newGroupCommit(f)
	first, rest := behindAWrite(t, g, f, nil, "a", "dup", "b")
	close(f.release)
	if err := <-first; err != nil {
		t.Fatalf("first sale: %v", err)
	}
	for n, want := range map[string]error{"a": nil, "dup": inventory.ErrAlreadyPurchased, "b": nil} {
		if err := <-rest[n]; !errors.Is(err, want) || (want == nil && err != nil) {
			t.Errorf("sale %s: %v, want %v", n, err, want)
		}
	}
	want := [][]string{{"first"}, {"a", "dup", "b"}, {"a"}, {"dup"}, {"b"}}
	if got := f.written(); !slices.EqualFunc(got, want, slices.Equal[[]string]) {
		t.Fatalf("transactions %v, want %v", got, want)
	}
}

// TestGroupThatMayPassFailsEveryMember: the database is unavailable for
// the group. Every member hears so (and gives its unit back), and none is
// tried again alone.
func TestGroupThatMayPassFailsEveryMember(t *testing.T) {
	f := newFakeRows()
	f.deductAll = func(context.Context, []inventory.Order) error {
		return fmt.Errorf("%w: connection refused", inventory.ErrUnavailable)
	}
	g := newGroupCommit(f)
	first, rest := behindAWrite(t, g, f, nil, "a", "b")
	close(f.release)
	<-first
	for _, n := range []string{"a", "b"} {
		if err := <-rest[n]; !errors.Is(err, inventory.ErrUnavailable) {
			t.Errorf("sale %s: %v, want ErrUnavailable", n, err)
		}
	}
	if got := f.written(); len(got) != 2 {
		t.Fatalf("transactions %v, want the first sale's and the group's only", got)
	}
}

// TestWaitingSaleLeavesWhenItsRequestEnds: a sale still waiting for its
// turn is answered with its context's error as soon as its request ends,
// while the write ahead of it still holds the row, and it is never
// written.
func TestWaitingSaleLeavesWhenItsRequestEnds(t *testing.T) {
	f := newFakeRows()
	g := newGroupCommit(f)
	gone, cancel := context.WithCancel(context.Background())
	first, rest := behindAWrite(t, g, f, map[string]context.Context{"gone": gone}, "gone", "stays")
	cancel()
	if err := <-rest["gone"]; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled sale: %v, want context.Canceled", err)
	}
	close(f.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-rest["stays"]; err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"first"}, {"stays"}}
	if got := f.written(); !slices.EqualFunc(got, want, slices.Equal[[]string]) {
		t.Fatalf("transactions %v, want %v: the cancelled sale must not be written", got, want)
	}
}

// TestTakenSaleWaitsForItsAnswer: once a group is being written, a member
// whose request is cancelled still gets the group's answer (here: sold),
// never a bare cancellation that would leave it unsure whether its order
// committed. The group is written under a context no member cancels, with
// the earliest member deadline.
func TestTakenSaleWaitsForItsAnswer(t *testing.T) {
	f := newFakeRows()
	inGroup := make(chan struct{})
	groupGo := make(chan struct{})
	var seen error // the group context's error once a member was cancelled
	f.deductAll = func(ctx context.Context, _ []inventory.Order) error {
		close(inGroup)
		<-groupGo
		seen = ctx.Err()
		return nil
	}
	g := newGroupCommit(f)
	cancelled, cancel := context.WithCancel(context.Background())
	soon := time.Now().Add(writeCap / 2)
	early, cancelEarly := context.WithDeadline(context.Background(), soon)
	defer cancelEarly()
	late, cancelLate := context.WithDeadline(context.Background(), soon.Add(time.Second))
	defer cancelLate()
	ctxs := map[string]context.Context{"cancelled": cancelled, "early": early, "late": late}
	first, rest := behindAWrite(t, g, f, ctxs, "cancelled", "early", "late")
	close(f.release)
	<-first
	<-inGroup
	cancel()
	f.mu.Lock()
	gctx := f.ctxs[1]
	f.mu.Unlock()
	if d, ok := gctx.Deadline(); !ok || !d.Equal(soon) {
		t.Errorf("group deadline %v (%v), want the earliest member's %v", d, ok, soon)
	}
	close(groupGo)
	for _, n := range []string{"cancelled", "early", "late"} {
		if err := <-rest[n]; err != nil {
			t.Errorf("sale %s: %v, want sold (the group committed)", n, err)
		}
	}
	if seen != nil {
		t.Errorf("a member's cancellation reached the group's write: %v", seen)
	}
}
