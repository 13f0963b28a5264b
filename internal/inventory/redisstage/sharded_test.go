package redisstage_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// Attacks on redis-sharded (stage_redis_sharded.go). Each forces the state
// it needs: buyers chosen by their home bucket, a database write held until
// the test lets it go. None depends on timing.

const shardedBuckets = 4

// shardedEnv is one product, reset, sold by a redis-sharded stage over a
// Redis namespace of its own.
type shardedEnv struct {
	t     *testing.T
	rdb   *redis.Client
	db    *store.DB
	held  *heldStore
	stage *redisstage.RedisSharded
	svc   *inventory.Service
	id    int64
}

func newShardedEnv(t *testing.T, db *store.DB, stock int) *shardedEnv {
	t.Helper()
	e := &shardedEnv{t: t, rdb: testenv.Redis(t), db: db, id: 1}
	e.held = &heldStore{Ledger: db.Products(), hold: map[string]chan error{}, entered: make(chan string, 16)}
	e.stage = redisstage.NewRedisSharded(e.rdb, e.held, testenv.Name("sh-"), shardedBuckets, nil)
	e.svc = inventory.NewService(db.Products(), map[string]inventory.Stage{inventory.StageRedisSharded: e.stage}, "a", "O")
	if err := e.svc.Reset(context.Background(), e.id, stock); err != nil {
		t.Fatal(err)
	}
	return e
}

// users returns n user ids whose home is bucket b, each unseen before.
func (e *shardedEnv) users(prefix string, b, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if u := fmt.Sprintf("%s%d", prefix, i); e.stage.Home(u) == b {
			out = append(out, u)
		}
	}
	return out
}

func (e *shardedEnv) buy(user string) error {
	_, err := e.svc.Buy(context.Background(), inventory.StageRedisSharded, inventory.Request{ItemID: e.id, UserID: user, Quantity: 1})
	return err
}

// buckets reads every bucket's stock and its reservations in flight.
func (e *shardedEnv) buckets() (stock []int, inFlight int) {
	e.t.Helper()
	for b := range shardedBuckets {
		k := e.stage.BucketKeysForTest(e.id, b)
		n, err := e.rdb.Get(context.Background(), k[0]).Int()
		if err != nil {
			e.t.Fatalf("bucket %d: %v", b, err)
		}
		stock = append(stock, n)
		inFlight += int(e.rdb.HLen(context.Background(), k[1]).Val())
	}
	return stock, inFlight
}

// audit checks the books: sold units, database stock, and the buckets
// adding up to the database stock with nothing in flight.
func (e *shardedEnv) audit(wantSold int) {
	e.t.Helper()
	a, err := e.db.Products().Audit(context.Background(), e.id)
	if err != nil {
		e.t.Fatal(err)
	}
	stock, inFlight := e.buckets()
	sum := 0
	for _, n := range stock {
		sum += n
	}
	if a.Sold != wantSold || !a.Conserved() || a.Oversold() != 0 || sum != a.Stock || inFlight != 0 {
		e.t.Fatalf("sold %d (want %d), conserved %v, oversold %d; buckets %v sum %d, database stock %d, %d reservations in flight",
			a.Sold, wantSold, a.Conserved(), a.Oversold(), stock, sum, a.Stock, inFlight)
	}
}

// releaseAtOnce starts n buyers, lets them all go at once, and counts
// those who bought and those told sold out; any other answer fails t.
func releaseAtOnce(t *testing.T, n int, buy func(i int) error) (ok, soldOut int64) {
	start := make(chan struct{})
	var wg sync.WaitGroup
	var okN, soldOutN atomic.Int64
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			switch err := buy(i); {
			case err == nil:
				okN.Add(1)
			case errors.Is(err, inventory.ErrSoldOut):
				soldOutN.Add(1)
			default:
				t.Errorf("buyer %d: %v", i, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	return okN.Load(), soldOutN.Load()
}

// heldStore writes through the Ledger one order at a time (no group
// commit), and holds the write of a user listed in hold until the test
// sends the error it must answer (nil: write it).
type heldStore struct {
	*store.Ledger
	mu      sync.Mutex
	hold    map[string]chan error
	entered chan string
	// beforeGet, when set, runs once, before the next Get reads the
	// database (the reconcile job's read, between its two snapshots).
	beforeGet func()
}

func (h *heldStore) Get(ctx context.Context, id int64) (inventory.Item, error) {
	h.mu.Lock()
	f := h.beforeGet
	h.beforeGet = nil
	h.mu.Unlock()
	if f != nil {
		f()
	}
	return h.Ledger.Get(ctx, id)
}

// DeductAll hides the Ledger's, so every sale is one Deduct.
func (h *heldStore) DeductAll() {}

func (h *heldStore) Deduct(ctx context.Context, o inventory.Order) error {
	h.mu.Lock()
	release, ok := h.hold[o.UserID]
	h.mu.Unlock()
	if ok {
		h.entered <- o.UserID
		if err := <-release; err != nil {
			return err
		}
	}
	return h.Ledger.Deduct(ctx, o)
}

func (h *heldStore) holdUser(user string) chan error {
	c := make(chan error, 1)
	h.mu.Lock()
	h.hold[user] = c
	h.mu.Unlock()
	return c
}

// TestShardedBuyersFallBackUntilEveryBucketIsEmpty: every buyer's home is
// bucket 0, which holds 2 of the 8 units. Twelve of them at once must
// still buy all 8 (from the other buckets, in the same request), and the
// four refused must hear a plain sold out only when nothing is left.
// Routing without the fallback sells 2.
func TestShardedBuyersFallBackUntilEveryBucketIsEmpty(t *testing.T) {
	e := newShardedEnv(t, testenv.SQLite(t), 8)
	users := e.users("home0-", 0, 12)
	ok, soldOut := releaseAtOnce(t, len(users), func(i int) error { return e.buy(users[i]) })
	if ok != 8 || soldOut != 4 {
		t.Fatalf("%d bought and %d heard sold out; want 8 and 4", ok, soldOut)
	}
	e.audit(8)
	if e.stage.Fallbacks() < 6 {
		t.Fatalf("fallbacks %d: at least 6 buyers must have left bucket 0", e.stage.Fallbacks())
	}
	// With nothing left and nothing in flight, the refusal is for good.
	err := e.buy(e.users("late-", 0, 1)[0])
	if !errors.Is(err, inventory.ErrSoldOut) || errors.Is(err, inventory.ErrMayReturn) {
		t.Fatalf("a buyer after the sale: %v; want sold out for good", err)
	}
}

// TestShardedSoldOutWaitsForUnitsInFlight: bucket h's only unit is
// reserved by a buyer whose database write is held; the other buckets are
// sold. A buyer now is told sold out "for now" (not remembered), and once
// the held write fails and its unit goes back to bucket h, a buyer of
// another home finds it there.
func TestShardedSoldOutWaitsForUnitsInFlight(t *testing.T) {
	e := newShardedEnv(t, testenv.SQLite(t), shardedBuckets)
	x := e.users("held-", 1, 1)[0]
	release := e.held.holdUser(x)
	xDone := make(chan error, 1)
	go func() { xDone <- e.buy(x) }()
	select {
	case <-e.held.entered:
	case <-time.After(time.Minute):
		t.Fatal("the held buyer never reached the database")
	}
	for _, u := range e.users("rest-", 1, 3) { // they fall back to buckets 2, 3, 0
		if err := e.buy(u); err != nil {
			t.Fatalf("buyer %s while 3 units remain: %v", u, err)
		}
	}
	err := e.buy(e.users("early-", 2, 1)[0])
	if !errors.Is(err, inventory.ErrSoldOut) || !errors.Is(err, inventory.ErrMayReturn) {
		t.Fatalf("a buyer while a unit is in flight: %v; want sold out for now", err)
	}
	release <- fmt.Errorf("%w: the test failed this write", inventory.ErrUnavailable)
	if err := <-xDone; !errors.Is(err, inventory.ErrUnavailable) {
		t.Fatalf("the held buyer: %v", err)
	}
	if err := e.buy(e.users("after-", 3, 1)[0]); err != nil {
		t.Fatalf("a buyer after the unit came back to bucket 1: %v", err)
	}
	e.audit(shardedBuckets)
	// The held buyer was freed by the failure: it may buy again, and is
	// refused only because nothing is left.
	if err := e.buy(x); !errors.Is(err, inventory.ErrSoldOut) || errors.Is(err, inventory.ErrMayReturn) {
		t.Fatalf("the held buyer again: %v; want sold out for good", err)
	}
}

// TestShardedRepeatBuyerGivesTheUnitBack: a buyer whose order the
// buckets do not know of (written under another stage after they were
// loaded) buys again while its home bucket is empty. The unit it took from
// another bucket must go back to that bucket, and the buyer stays
// recorded, so a third try takes nothing.
func TestShardedRepeatBuyerGivesTheUnitBack(t *testing.T) {
	e := newShardedEnv(t, testenv.SQLite(t), shardedBuckets)
	ctx := context.Background()
	d := e.users("dup-", 2, 1)[0]
	if err := e.db.Products().Deduct(ctx, inventory.Order{No: "O-elsewhere", ItemID: e.id, UserID: d, Quantity: 1,
		Stage: inventory.StageDBAtomic, Instance: "a", CreatedAt: time.Now().UTC(), Status: inventory.StatusConfirmed}); err != nil {
		t.Fatal(err)
	}
	if err := e.buy(e.users("other-", 2, 1)[0]); err != nil { // empties bucket 2
		t.Fatal(err)
	}
	before, _ := e.buckets()
	if err := e.buy(d); !errors.Is(err, inventory.ErrAlreadyPurchased) {
		t.Fatalf("repeat buyer: %v; want already purchased", err)
	}
	after, inFlight := e.buckets()
	if fmt.Sprint(before) != fmt.Sprint(after) || inFlight != 0 {
		t.Fatalf("buckets %v before, %v after the refused repeat buyer, %d in flight: the unit must go back", before, after, inFlight)
	}
	fallbacks := e.stage.Fallbacks()
	if err := e.buy(d); !errors.Is(err, inventory.ErrAlreadyPurchased) || e.stage.Fallbacks() != fallbacks {
		t.Fatalf("third try: %v, fallbacks %d then %d; want refused at home", err, fallbacks, e.stage.Fallbacks())
	}
	// Two sold (the order written elsewhere and one here); the buckets
	// still count the elsewhere order's unit, which only the reconcile
	// job can know of.
	a, err := e.db.Products().Audit(ctx, e.id)
	if err != nil || a.Sold != 2 || !a.Conserved() {
		t.Fatalf("audit %+v, %v", a, err)
	}
	// The unit that went back is in the log the audit shows (the lab
	// nets refusals while it was away out of refused-with-stock): one
	// entry, one unit, given back after it was reserved. A reset clears
	// the log with the buckets.
	svc := e.svc.WithGiveBackLog(e.stage)
	g, err := svc.GivenBack(ctx, e.id)
	if err != nil || len(g) != 1 || g[0].Units != 1 || g[0].At.Before(g[0].ReservedAt) {
		t.Fatalf("given back: %+v, %v; want one entry of 1 unit, given back after it was reserved", g, err)
	}
	if err := svc.Reset(ctx, e.id, shardedBuckets); err != nil {
		t.Fatal(err)
	}
	if g, err := svc.GivenBack(ctx, e.id); err != nil || len(g) != 0 {
		t.Fatalf("given back after a reset: %+v, %v; want none", g, err)
	}
}

// TestShardedSplitsOnResetAndRestock: a reset splits the stock evenly (the
// first buckets holding the remainder), forgets the buyers, and a restock
// to a new stock splits that.
func TestShardedSplitsOnResetAndRestock(t *testing.T) {
	e := newShardedEnv(t, testenv.SQLite(t), 10)
	if got, _ := e.buckets(); fmt.Sprint(got) != "[3 3 2 2]" {
		t.Fatalf("10 units over 4 buckets: %v", got)
	}
	u := e.users("r-", 0, 1)[0]
	if err := e.buy(u); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Reset(context.Background(), e.id, 5); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.buckets(); fmt.Sprint(got) != "[2 1 1 1]" {
		t.Fatalf("5 units over 4 buckets: %v", got)
	}
	if err := e.buy(u); err != nil {
		t.Fatalf("a buyer of before the reset: %v", err)
	}
	e.audit(1)
}

// TestShardedLateLoaderSplitsTheFirstTotal forces the interleaving of two
// instances loading an item on first use: the first loaded bucket 0 and a
// buyer bought from it before the other buckets were loaded, so a second
// loader now reads a database stock one lower. It must split the total the
// first loader split, or a unit is never offered: all 8 must sell.
func TestShardedLateLoaderSplitsTheFirstTotal(t *testing.T) {
	e := newShardedEnv(t, testenv.SQLite(t), 8)
	ctx := context.Background()
	if err := e.buy(e.users("first-", 0, 1)[0]); err != nil {
		t.Fatal(err)
	}
	for b := 1; b < shardedBuckets; b++ { // not loaded yet by the first loader
		if err := e.rdb.Del(ctx, e.stage.BucketKeysForTest(e.id, b)...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	sold := 1
	for _, u := range e.users("then-", 1, 12) {
		err := e.buy(u)
		if errors.Is(err, inventory.ErrSoldOut) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		sold++
	}
	if sold != 8 {
		t.Fatalf("sold %d of 8 before the first sold out", sold)
	}
	e.audit(8)
}

// TestShardedCancelledUnitsComeBackThroughTheRepair: units of a cancelled
// redis-sharded order go back to the database only. Until the reconcile
// job's repair the buckets are short, and the buyer after the sell-out is
// refused; after it the units are in the buckets and sell again.
func TestShardedCancelledUnitsComeBackThroughTheRepair(t *testing.T) {
	e := newShardedEnv(t, testenv.SQLite(t), 2)
	ctx := context.Background()
	now := time.Now()
	e.svc.WithLifecycle(inventory.Lifecycle{PaymentTimeout: time.Minute, Now: func() time.Time { return now }})
	for _, u := range []string{"p1", "p2"} {
		if err := e.buy(u); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(2 * time.Minute)
	if rep, err := e.svc.CancelUnpaid(ctx); err != nil || rep.Units != 2 {
		t.Fatalf("cancel unpaid: %+v, %v", rep, err)
	}
	if err := e.buy("late-1"); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("before the repair the buckets hold none: %v", err)
	}
	d, err := e.stage.Repair(ctx, e.id, time.Hour, e.db.Products().OrderExists)
	if err != nil || !d.Repaired || d.RedisStock != 0 || d.DBStock != 2 {
		t.Fatalf("repair: %+v, %v", d, err)
	}
	for _, u := range []string{"late-1", "late-2"} {
		if err := e.buy(u); err != nil {
			t.Fatalf("%s after the repair: %v", u, err)
		}
	}
	e.audit(2)
}

// TestShardedRepairLeavesABusyItemAlone: the buckets drifted (bucket 0
// lost its units), and a buyer buys while the reconcile job reads the
// database, between its two looks at the buckets. The job must not
// correct from a read the sale made stale: it reports the item busy and
// changes nothing; the next, quiet run corrects it.
func TestShardedRepairLeavesABusyItemAlone(t *testing.T) {
	e := newShardedEnv(t, testenv.SQLite(t), 8)
	ctx := context.Background()
	if err := e.rdb.Set(ctx, e.stage.BucketKeysForTest(e.id, 0)[0], 0, 0).Err(); err != nil {
		t.Fatal(err)
	}
	e.held.mu.Lock()
	e.held.beforeGet = func() {
		if err := e.buy(e.users("racer-", 1, 1)[0]); err != nil {
			t.Errorf("the racing buyer: %v", err)
		}
	}
	e.held.mu.Unlock()
	d, err := e.stage.Repair(ctx, e.id, time.Hour, e.db.Products().OrderExists)
	if err != nil || !d.Busy || d.Repaired {
		t.Fatalf("repair with a sale between its looks: %+v, %v; want busy, nothing repaired", d, err)
	}
	if got, _ := e.buckets(); fmt.Sprint(got) != "[0 1 2 2]" {
		t.Fatalf("buckets after the busy run: %v, want [0 1 2 2] (only the sale moved them)", got)
	}
	d, err = e.stage.Repair(ctx, e.id, time.Hour, e.db.Products().OrderExists)
	if err != nil || !d.Repaired || d.RedisStock != 5 || d.DBStock != 7 {
		t.Fatalf("the quiet run: %+v, %v; want 5 corrected to 7", d, err)
	}
	e.audit(1)
}
