package redisstage

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// acrossGate is a Ledger that writes sales of several items in one group
// (one lane for all items), whose first write waits for release, and
// which records each write's order numbers.
type acrossGate struct {
	*store.Ledger
	entered chan struct{}
	release chan struct{}
	// acrossErr, when set, answers every DeductAcross instead of the
	// database, which is not asked.
	acrossErr error

	mu     sync.Mutex
	writes []string // "one", "all" or "across", then the order numbers
}

func (a *acrossGate) GroupWriters() int { return 1 }

func (a *acrossGate) enter(kind string, orders ...inventory.Order) {
	a.mu.Lock()
	first := len(a.writes) == 0
	line := kind
	for _, o := range orders {
		line += " " + o.No
	}
	a.writes = append(a.writes, line)
	a.mu.Unlock()
	if first {
		a.entered <- struct{}{}
		<-a.release
	}
}

func (a *acrossGate) Deduct(ctx context.Context, o inventory.Order) error {
	a.enter("one", o)
	return a.Ledger.Deduct(ctx, o)
}

func (a *acrossGate) DeductAll(ctx context.Context, orders []inventory.Order) error {
	a.enter("all", orders...)
	return a.Ledger.DeductAll(ctx, orders)
}

func (a *acrossGate) DeductAcross(ctx context.Context, orders []inventory.Order) error {
	a.enter("across", orders...)
	if a.acrossErr != nil {
		return a.acrossErr
	}
	return a.Ledger.DeductAcross(ctx, orders)
}

// acrossSales queues, behind a held first sale of product 1, sales of
// products 1 and 2 (named item-user), releases the first and returns every
// sale's answer and the writes the store was asked for. Product 2 has
// stock2 units, product 1 ten.
func acrossSales(t *testing.T, db *store.DB, stock2 int, acrossErr error, names ...string) (map[string]error, []string) {
	t.Helper()
	ctx := context.Background()
	l := db.Products()
	if err := l.Reset(ctx, 1, 10); err != nil {
		t.Fatal(err)
	}
	if err := l.Reset(ctx, 2, stock2); err != nil {
		t.Fatal(err)
	}
	gate := &acrossGate{Ledger: l, entered: make(chan struct{}), release: make(chan struct{}), acrossErr: acrossErr}
	g := newGroupCommit(gate)
	answers := map[string]chan error{}
	sell := func(name string, item int64) {
		out := make(chan error, 1)
		answers[name] = out
		o := inventory.Order{No: "GX-" + name, ItemID: item, UserID: name, Quantity: 1, Stage: "test", Instance: "t1", CreatedAt: time.Now().UTC()}
		go func() { out <- g.Deduct(ctx, o) }()
	}
	sell("1-first", 1)
	<-gate.entered
	for i, n := range names {
		sell(n, int64(n[0]-'0'))
		queued(t, g, i+1) // product 1's lane, which product 2 shares
	}
	close(gate.release)
	got := map[string]error{}
	for n, out := range answers {
		got[n] = <-out
	}
	return got, gate.writes
}

// TestSalesOfTwoItemsShareOneTransaction: sales of two products that wait
// behind a write go in together, in one DeductAcross, and all are sold.
func TestSalesOfTwoItemsShareOneTransaction(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			db := b.Open(t)
			got, writes := acrossSales(t, db, 5, nil, "1-a", "2-b", "2-c")
			for n, err := range got {
				if err != nil {
					t.Errorf("sale %s: %v", n, err)
				}
			}
			want := []string{"one GX-1-first", "across GX-1-a GX-2-b GX-2-c"}
			if !slices.Equal(writes, want) {
				t.Errorf("writes %q, want %q", writes, want)
			}
			soldOf(t, db, 1, 2)
			soldOf(t, db, 2, 2)
		})
	}
}

// TestShortItemSendsItsGroupAlone: product 2 has one unit for two waiting
// sales, so the group is refused; each member is then written alone, and
// product 1's sale is sold as well as the first of product 2's.
func TestShortItemSendsItsGroupAlone(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			db := b.Open(t)
			got, writes := acrossSales(t, db, 1, nil, "2-b", "1-a", "2-c")
			for n, want := range map[string]error{"1-first": nil, "1-a": nil, "2-b": nil, "2-c": inventory.ErrSoldOut} {
				if err := got[n]; !errors.Is(err, want) || (want == nil && err != nil) {
					t.Errorf("sale %s: %v, want %v", n, err, want)
				}
			}
			want := []string{"one GX-1-first", "across GX-2-b GX-1-a GX-2-c", "one GX-2-b", "one GX-1-a", "one GX-2-c"}
			if !slices.Equal(writes, want) {
				t.Errorf("writes %q, want %q", writes, want)
			}
			soldOf(t, db, 1, 2)
			soldOf(t, db, 2, 1)
		})
	}
}

// TestCrossItemGroupThatMayPassFailsEveryMember: a group of two products'
// sales fails for a reason that may pass (the database is unavailable):
// every member of both products fails with it, and neither product has
// an order of the group.
func TestCrossItemGroupThatMayPassFailsEveryMember(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			db := b.Open(t)
			got, writes := acrossSales(t, db, 5, inventory.ErrUnavailable, "2-b", "1-a")
			for n, want := range map[string]error{"1-first": nil, "1-a": inventory.ErrUnavailable, "2-b": inventory.ErrUnavailable} {
				if err := got[n]; !errors.Is(err, want) || (want == nil && err != nil) {
					t.Errorf("sale %s: %v, want %v", n, err, want)
				}
			}
			want := []string{"one GX-1-first", "across GX-2-b GX-1-a"}
			if !slices.Equal(writes, want) {
				t.Errorf("writes %q, want %q", writes, want)
			}
			soldOf(t, db, 1, 1)
			soldOf(t, db, 2, 0)
		})
	}
}

// soldOf checks that product id has sold orders, and balanced books.
func soldOf(t *testing.T, db *store.DB, id int64, sold int) {
	t.Helper()
	a, err := db.Products().Audit(context.Background(), id)
	if err != nil || a.Sold != sold || a.Orders != sold || !a.Conserved() {
		t.Errorf("product %d: Audit = %+v, %v; want %d sold, conserved", id, a, err, sold)
	}
}
