package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
)

// catalogueFake is a catalog the admin API can write, in memory: it
// records the sessions it was asked to apply.
type catalogueFake struct {
	inventory.Catalog // not called
	mu                sync.Mutex
	sessions          [][]inventory.SessionItem
	puts              []inventory.Listing
}

func (f *catalogueFake) Put(_ context.Context, l inventory.Listing) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.puts = append(f.puts, l)
	return len(f.puts) == 1, nil
}
func (f *catalogueFake) Archive(context.Context, int64) error { return nil }
func (f *catalogueFake) Page(context.Context, inventory.PageQuery) ([]inventory.Item, error) {
	return nil, nil
}
func (f *catalogueFake) ResetSession(_ context.Context, items []inventory.SessionItem, _ inventory.SaleWindow) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sessions = append(f.sessions, items)
	return nil
}

// leaseEpochs are epochs whose Settle, like a lease's wait, returns only
// once every item of the session waits in it: a session that waited out
// one item's lease before the next item's would wait forever.
type leaseEpochs struct {
	mu      sync.Mutex
	bumped  map[string]bool
	waiting int
	all     int
	full    chan struct{}
}

func (e *leaseEpochs) Epoch(context.Context, string) (string, error) { return "e", nil }
func (e *leaseEpochs) Bump(_ context.Context, item string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.bumped[item] = true
	return nil
}
func (e *leaseEpochs) Settle(ctx context.Context, item string) error {
	e.mu.Lock()
	if !e.bumped[item] {
		e.mu.Unlock()
		return errors.New("settled before its bump")
	}
	if e.waiting++; e.waiting == e.all {
		close(e.full)
	}
	e.mu.Unlock()
	select {
	case <-e.full:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func TestSessionWaitsOutTheLeaseOnceForAllItsItems(t *testing.T) {
	const n = 200
	epochs := &leaseEpochs{bumped: map[string]bool{}, all: n, full: make(chan struct{})}
	store := &catalogueFake{}
	svc := inventory.NewService(store, nil, "i1", "O").WithCrowd(admission.NewCrowd(admission.CrowdOptions{Epochs: epochs}))
	items := make([]inventory.SessionItem, n)
	for i := range items {
		items[i] = inventory.SessionItem{ID: int64(i + 1), Stock: 10}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opens := time.Now().Add(time.Hour)
	if err := svc.ScheduleSession(ctx, items, inventory.SaleWindow{OpensAt: opens, ClosesAt: opens.Add(time.Hour)}); err != nil {
		t.Fatalf("the session's waits did not overlap: %v", err)
	}
	if len(store.sessions) != 1 || len(store.sessions[0]) != n {
		t.Fatalf("the store got %d sessions, want one of %d items", len(store.sessions), n)
	}
	if len(epochs.bumped) != n {
		t.Fatalf("%d items announced restocked, want %d", len(epochs.bumped), n)
	}
}

func TestBadSessionIsRefusedNamingTheFieldWithNothingApplied(t *testing.T) {
	opens := time.Now().Add(time.Hour)
	good := inventory.SaleWindow{OpensAt: opens, ClosesAt: opens.Add(time.Hour)}
	many := make([]inventory.SessionItem, inventory.MaxSessionItems+1)
	for i := range many {
		many[i] = inventory.SessionItem{ID: int64(i + 1), Stock: 1}
	}
	for _, tc := range []struct {
		name  string
		items []inventory.SessionItem
		w     inventory.SaleWindow
		field string
	}{
		{"no items", nil, good, "items"},
		{"too many items", many, good, "items"},
		{"negative stock of one item", []inventory.SessionItem{{ID: 1, Stock: 5}, {ID: 2, Stock: -1}}, good, "items[1].stock"},
		{"a bad id", []inventory.SessionItem{{ID: 0, Stock: 5}}, good, "items[0].id"},
		{"an item twice", []inventory.SessionItem{{ID: 3, Stock: 5}, {ID: 3, Stock: 5}}, good, "items[1].id"},
		{"close before open", []inventory.SessionItem{{ID: 1, Stock: 5}}, inventory.SaleWindow{OpensAt: opens, ClosesAt: opens.Add(-time.Minute)}, "closes_at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &catalogueFake{}
			svc := inventory.NewService(store, nil, "i1", "O")
			err := svc.ScheduleSession(context.Background(), tc.items, tc.w)
			if !errors.Is(err, inventory.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("got %v, want ErrInvalid naming %s", err, tc.field)
			}
			if len(store.sessions) != 0 {
				t.Fatal("a refused session reached the store")
			}
		})
	}
}

func TestBadListingIsRefusedNamingTheField(t *testing.T) {
	for _, tc := range []struct {
		name  string
		l     inventory.Listing
		field string
	}{
		{"negative stock", inventory.Listing{ID: 1, Name: "a", Stock: -1}, "stock"},
		{"negative price", inventory.Listing{ID: 1, Name: "a", PriceCents: -1}, "price_cents"},
		{"empty name", inventory.Listing{ID: 1, Name: "", Stock: 1}, "name"},
		{"name over 128 characters", inventory.Listing{ID: 1, Name: strings.Repeat("é", 129), Stock: 1}, "name"},
		{"control character in the name", inventory.Listing{ID: 1, Name: "a\x07b", Stock: 1}, "name"},
		{"bad id", inventory.Listing{ID: -4, Name: "a", Stock: 1}, "id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &catalogueFake{}
			_, err := inventory.NewService(store, nil, "i1", "O").Put(context.Background(), tc.l)
			if !errors.Is(err, inventory.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("got %v, want ErrInvalid naming %s", err, tc.field)
			}
			if len(store.puts) != 0 {
				t.Fatal("a refused listing reached the store")
			}
		})
	}
	if err := (inventory.Listing{ID: 1, Name: strings.Repeat("é", 128), Stock: 0}).Validate(); err != nil {
		t.Fatalf("128 characters (256 bytes) is a valid name: %v", err)
	}
}

// copyStage is a stage that keeps a copy of each item (a Resetter): its
// Reset records the item, after calling during, if set.
type copyStage struct {
	mu     sync.Mutex
	reset  map[int64]bool
	during func(ctx context.Context, id int64) error
}

func (s *copyStage) Buy(context.Context, inventory.Order) error { return errors.New("not sold here") }
func (s *copyStage) Reset(ctx context.Context, id int64, _ int) error {
	if s.during != nil {
		if err := s.during(ctx, id); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err // a Redis call on a context that is over
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reset[id] = true
	return nil
}

// TestSessionReloadsEveryCopyOnceCommitted: the request of a session may
// end (its deadline, the admin's client leaving) while the copies of its
// items are reloaded, after the transaction committed. The reloads go on:
// cut off, the items left were on sale in the database under the new
// window and stock, and in their Redis copies under the old ones, and the
// admin heard 503 "nothing was written". A 1,000-item session on
// `seckill serve` took 3.8 to 4.0 s of its 4 s deadline, reloading one
// item after another, and was cut off.
func TestSessionReloadsEveryCopyOnceCommitted(t *testing.T) {
	const n = 50
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stage := &copyStage{reset: map[int64]bool{}}
	stage.during = func(_ context.Context, id int64) error {
		if id == 1 {
			cancel() // the request ends while its items are reloaded
		}
		return nil
	}
	svc := inventory.NewService(&catalogueFake{}, map[string]inventory.Stage{"copy": stage}, "i1", "O")
	items := make([]inventory.SessionItem, n)
	for i := range items {
		items[i] = inventory.SessionItem{ID: int64(i + 1), Stock: 10}
	}
	if err := svc.ScheduleSession(ctx, items, inventory.SaleWindow{}); err != nil {
		t.Fatalf("a committed session answered %v", err)
	}
	if len(stage.reset) != n {
		t.Fatalf("%d of the %d items' copies reloaded", len(stage.reset), n)
	}
}

// TestSessionReloadsItsItemsSideBySide: a session's copies are reloaded
// several items at once, not one after another (a round trip or more per
// item and stage: 1,000 items took most of a request's deadline). The
// reload of item 1 waits until another item's reload has begun.
func TestSessionReloadsItsItemsSideBySide(t *testing.T) {
	const n = 20
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	other := make(chan struct{})
	var once sync.Once
	stage := &copyStage{reset: map[int64]bool{}}
	stage.during = func(_ context.Context, id int64) error {
		if id != 1 {
			once.Do(func() { close(other) })
			return nil
		}
		select {
		case <-other:
			return nil
		case <-ctx.Done(): // the test's, not the reload's: that one goes on
			return errors.New("no other item was reloaded while item 1 was")
		}
	}
	svc := inventory.NewService(&catalogueFake{}, map[string]inventory.Stage{"copy": stage}, "i1", "O")
	items := make([]inventory.SessionItem, n)
	for i := range items {
		items[i] = inventory.SessionItem{ID: int64(i + 1), Stock: 10}
	}
	if err := svc.ScheduleSession(ctx, items, inventory.SaleWindow{}); err != nil {
		t.Fatal(err)
	}
}

// committedResetFake is a store whose Reset commits and then lets the
// request end (cancel), as a deadline passing on the way back would.
type committedResetFake struct {
	*catalogueFake
	cancel context.CancelFunc
}

func (f committedResetFake) Reset(context.Context, int64, int) error {
	f.cancel()
	return nil
}

// TestResetReloadsTheCopyOnceCommitted: a one-item reset whose request
// ends after the database committed the new stock still reloads the
// item's copy, as a session does. Cut off, the copy kept the old stock
// while the database had the new, and the admin heard 503 "nothing was
// written".
func TestResetReloadsTheCopyOnceCommitted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stage := &copyStage{reset: map[int64]bool{}}
	svc := inventory.NewService(committedResetFake{&catalogueFake{}, cancel}, map[string]inventory.Stage{"copy": stage}, "i1", "O")
	if err := svc.Reset(ctx, 7, 10); err != nil {
		t.Fatalf("a committed reset answered %v", err)
	}
	if !stage.reset[7] {
		t.Fatal("the item's copy was not reloaded")
	}
}

// TestReloadsPastTheCommitStillEnd: the reloads and reset hooks that run
// past a reset's commit are not cut short by the request's end, but they
// must still end. A copy's reload reads the item (and its buyers) from
// MySQL, and a read on a context that has no deadline waits as long as
// MySQL stays silent (a blackhole, a paused server: the DSN sets no read
// timeout), the admin unanswered and the goroutine held for good. Through
// a relay that held MySQL's reply to the reload's read, a reset under a
// 2 s deadline was still waiting 12 s later (it ended at 2 s before the
// reloads went on past the commit). Each reload and hook is handed a
// deadline, no earlier than the request's own.
func TestReloadsPastTheCommitStillEnd(t *testing.T) {
	requests := []struct {
		name     string
		deadline bool
	}{{"a request without a deadline", false}, {"a request with a deadline", true}}
	for _, r := range requests {
		t.Run(r.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			if r.deadline {
				ctx, cancel = context.WithTimeout(context.Background(), time.Hour)
			}
			defer cancel()
			want, _ := ctx.Deadline()
			check := func(what string, ctx context.Context) error {
				d, ok := ctx.Deadline()
				switch {
				case !ok:
					return fmt.Errorf("%s runs on a context with no deadline: a MySQL gone silent holds it for good", what)
				case d.Before(want):
					return fmt.Errorf("%s must end at %v, before the request's own deadline %v", what, d, want)
				}
				return nil
			}
			stage := &copyStage{reset: map[int64]bool{}}
			stage.during = func(ctx context.Context, id int64) error { return check("the reload of the item's copy", ctx) }
			svc := inventory.NewService(committedResetFake{&catalogueFake{}, func() {}}, map[string]inventory.Stage{"copy": stage}, "i1", "O").
				OnReset(func(ctx context.Context, id int64) error { return check("a reset hook", ctx) })
			if err := svc.Reset(ctx, 7, 10); err != nil {
				t.Fatal(err)
			}
			if err := svc.ScheduleSession(ctx, []inventory.SessionItem{{ID: 1, Stock: 1}, {ID: 2, Stock: 2}}, inventory.SaleWindow{}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestFailedReloadPastTheCommitIsNotNothingWritten: a reset or a session
// whose database write committed and whose copy reload then failed (Redis
// down) answers ErrRestockIncomplete, not the stage's ErrUnavailable,
// whose answer says nothing was written.
func TestFailedReloadPastTheCommitIsNotNothingWritten(t *testing.T) {
	down := fmt.Errorf("%w: redis is down", inventory.ErrUnavailable)
	stage := &copyStage{reset: map[int64]bool{}}
	stage.during = func(context.Context, int64) error { return down }
	ctx := context.Background()
	fake := &catalogueFake{}
	svc := inventory.NewService(committedResetFake{fake, func() {}}, map[string]inventory.Stage{"copy": stage}, "i1", "O")
	for name, err := range map[string]error{
		"reset":   svc.Reset(ctx, 7, 10),
		"session": svc.ScheduleSession(ctx, []inventory.SessionItem{{ID: 1, Stock: 5}, {ID: 2, Stock: 5}}, inventory.SaleWindow{}),
	} {
		if !errors.Is(err, inventory.ErrRestockIncomplete) || errors.Is(err, inventory.ErrUnavailable) {
			t.Errorf("%s whose reload failed after its commit: %v; want ErrRestockIncomplete, not ErrUnavailable", name, err)
		}
	}
	if len(fake.sessions) != 1 {
		t.Fatalf("%d sessions written, want 1", len(fake.sessions))
	}
}
