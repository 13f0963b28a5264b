package admission_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/admission"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// pushLease is the epochs' lease in these tests: each instance reads time
// from a clock of its own that moves only when a test moves it, so no
// remembered epoch runs out unless the test says so.
const pushLease = time.Second

// manualClock is a clock that moves only when told.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *manualClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// pushInstance is one instance of a fleet: its own Redis client (whose
// commands are counted), restock epochs, crowd control and stage.
type pushInstance struct {
	kind    string
	db      *store.DB
	rdb     *redis.Client
	sent    *admission.CommandCounter
	clock   *manualClock
	epochs  *admission.RedisEpochs
	crowd   *admission.Crowd
	svc     *inventory.Service
	stock   *redisstage.RedisAtomic // the stage's copy, under redis-atomic
	heard   chan bool               // each sell-out message heard: passed on or not
	refused chan string
}

// newPushFleet starts two instances selling item 1 (stock units) under
// the named stage, on one Redis and one database, subscribed.
func newPushFleet(t testing.TB, stage string, stock int) (a, b *pushInstance) {
	return newPushFleetWrapped(t, stage, stock, true)
}

// newPushFleetWrapped is newPushFleet with the stages wrapped by name
// (they tell each other their sell-outs) or not.
func newPushFleetWrapped(t testing.TB, stage string, stock int, named bool) (a, b *pushInstance) {
	t.Helper()
	first := testenv.Redis(t)
	db := testenv.SQLite(t)
	kind := testenv.Name("pushed")
	ctx := context.Background()
	if err := db.Products().Reset(ctx, 1, stock); err != nil {
		t.Fatal(err)
	}
	a, b = newPushInstance(t, first, db, kind, stage, named), newPushInstance(t, first, db, kind, stage, named)
	if a.stock != nil {
		if err := a.stock.Reset(ctx, 1, stock); err != nil {
			t.Fatal(err)
		}
	}
	return a, b
}

func newPushInstance(t testing.TB, first *redis.Client, db *store.DB, kind, stage string, named bool) *pushInstance {
	t.Helper()
	o := first.Options()
	client := func(retries int) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: o.Addr, Username: o.Username, Password: o.Password, DB: o.DB, MaxRetries: retries})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	rdb := client(0)
	in := &pushInstance{kind: kind, db: db, rdb: rdb, sent: &admission.CommandCounter{}, clock: &manualClock{t: time.Unix(1_000, 0)},
		heard: make(chan bool, 16), refused: make(chan string, 64)}
	rdb.AddHook(in.sent)
	in.epochs = admission.NewRedisEpochs(rdb, rdb, pushLease)
	in.epochs.SetClock(in.clock.now)
	// Never blocking: an instance whose messages or refusals no test
	// reads (A's own announcements, a benchmark's many buyers) drops them.
	in.epochs.SetHeard(func(_ string, applied bool) { offer(in.heard, applied) })
	in.crowd = admission.NewCrowd(admission.CrowdOptions{Kind: kind, Epochs: in.epochs, Refused: func(r string) { offer(in.refused, r) }})
	var st inventory.Stage
	switch stage {
	case inventory.StageRedisAtomic:
		in.stock = redisstage.NewRedisAtomic(rdb, db.Products(), kind, nil)
		st = in.stock
	case inventory.StageRedisLock:
		locks := client(-1) // the lock's scripts must not run twice
		locks.AddHook(in.sent)
		st = inventory.NewRedisLock(testenv.NewLock(t, locks, lock.Options{}), db.Products(), kind, inventory.SectionOptions{},
			inventory.LockOptions{TTL: time.Second, Wait: time.Second})
	}
	wrapped := in.crowd.Wrap(st)
	if named {
		wrapped = in.crowd.WrapNamed(stage, st)
	}
	in.svc = inventory.NewService(db.Products(), map[string]inventory.Stage{stage: wrapped}, "push", "O").WithCrowd(in.crowd)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); in.epochs.Watch(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for !in.epochs.Subscribed() {
		time.Sleep(time.Millisecond) // poll until the subscription is confirmed
	}
	return in
}

// lateUntilSoldOut sends late buyers of item id until the stage answers
// one "sold out" for good: while a reservation of the last unit waits for
// its confirm, the Redis stages answer "sold out for now", which nothing
// remembers or announces. Poll until the confirm has landed.
func (in *pushInstance) lateUntilSoldOut(t testing.TB, id int64) {
	t.Helper()
	for i := 0; ; i++ {
		err := in.buyOf(id, inventory.StageRedisAtomic, "late-"+strconv.Itoa(i))
		if !errors.Is(err, inventory.ErrSoldOut) || errors.Is(err, inventory.ErrRememberedSoldOut) {
			t.Fatalf("a late buyer: %v; want sold out by the stage", err)
		}
		if !errors.Is(err, inventory.ErrMayReturn) {
			return
		}
		if i == 10_000 {
			t.Fatal("the stage still answers sold out for now after 10,000 late buyers")
		}
		time.Sleep(time.Millisecond) // poll until the last unit's confirm lands
	}
}

// offer sends v on ch unless ch is full.
func offer[T any](ch chan T, v T) {
	select {
	case ch <- v:
	default:
	}
}

// crowdItem names item 1's epoch.
func (in *pushInstance) crowdItem() string { return in.kind + ":1" }

// buy buys one unit of item 1 as user under stage.
func (in *pushInstance) buy(stage, user string) error { return in.buyOf(1, stage, user) }

// buyOf buys one unit of item id as user under stage.
func (in *pushInstance) buyOf(id int64, stage, user string) error {
	_, err := in.svc.Buy(context.Background(), stage, inventory.Request{ItemID: id, UserID: user, Quantity: 1})
	return err
}

// waitHeard waits for the next sell-out message this instance hears, and
// fails unless it was passed on as want says.
func (in *pushInstance) waitHeard(t testing.TB, want bool, what string) {
	t.Helper()
	select {
	case got := <-in.heard:
		if got != want {
			t.Fatalf("%s: the sell-out message was passed on: %v, want %v", what, got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no sell-out message heard in 10 s", what)
	}
}

// lastRefusal returns the reason of the last refusal the instance counted.
func (in *pushInstance) lastRefusal() string {
	r := ""
	for {
		select {
		case r = <-in.refused:
		default:
			return r
		}
	}
}

// TestSellOutIsHeardByTheFleet: the instance that learns an item is sold
// out tells the others, and their first late buyer is answered from
// memory with no Redis command at all (no lock, no stock script, no
// epoch read: the sell-out is a message of its own kind and leaves the
// epoch it was heard under remembered). Under redis-lock it is the
// instance that sold the last unit; under redis-atomic, whose last sale
// leaves its reservation to confirm, the first late buyer the stage
// answers "sold out" for good. Before, instance B's first late buyer took
// the lock or ran the stock script and learnt it there.
func TestSellOutIsHeardByTheFleet(t *testing.T) {
	for _, stage := range []string{inventory.StageRedisLock, inventory.StageRedisAtomic} {
		t.Run(stage, func(t *testing.T) {
			a, b := newPushFleet(t, stage, 2)
			if err := b.buy(stage, "b-1"); err != nil { // B reads the epoch
				t.Fatal(err)
			}
			if err := a.buy(stage, "a-last"); err != nil {
				t.Fatal(err)
			}
			if stage == inventory.StageRedisAtomic {
				a.lateUntilSoldOut(t, 1)
				if r := a.lastRefusal(); r != admission.RefusedSoldOut {
					t.Fatalf("A's late buyer counted as %q; want sold out by the stage", r)
				}
			}
			b.waitHeard(t, true, "B")
			sent := b.sent.Sent()
			if err := b.buy(stage, "b-late"); !errors.Is(err, inventory.ErrRememberedSoldOut) {
				t.Fatalf("B's first late buyer: %v; want sold out from memory", err)
			}
			if n := b.sent.Sent() - sent; n != 0 {
				t.Fatalf("B's first late buyer sent %d Redis commands, want 0", n)
			}
			if r := b.lastRefusal(); r != admission.RefusedRemembered {
				t.Fatalf("B's first late buyer counted as %q, want %q", r, admission.RefusedRemembered)
			}
		})
	}
}

// TestStaleSellOutIsIgnored: a sell-out announced under an epoch the
// instance no longer trusts (a reset came since) is not remembered: its
// next buyer buys. And one that reaches an instance that has not read the
// item's epoch makes it read the epoch, and remember the sell-out under
// it when it is the same.
func TestStaleSellOutIsIgnored(t *testing.T) {
	stage := inventory.StageRedisAtomic
	a, b := newPushFleet(t, stage, 3)
	ctx := context.Background()
	item := a.crowdItem()
	if err := b.buy(stage, "b-1"); err != nil {
		t.Fatal(err)
	}
	old, err := b.rdb.Get(ctx, admission.EpochKey(item)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.crowd.Restocked(ctx, 1); err != nil { // a new epoch
		t.Fatal(err)
	}
	for b.epochs.Trusts(item) {
		time.Sleep(time.Millisecond) // poll until B heard the new epoch
	}
	if err := b.buy(stage, "b-2"); err != nil { // B reads the new one
		t.Fatal(err)
	}
	if err := a.rdb.Publish(ctx, admission.SoldOutChannel, admission.SoldOutMessage(item, stage, old, 1)).Err(); err != nil {
		t.Fatal(err)
	}
	b.waitHeard(t, false, "a sell-out under the old epoch")
	a.waitHeard(t, false, "A, a sell-out under the old epoch") // read, and not the same
	if err := b.buy(stage, "b-3"); err != nil {
		t.Fatalf("B's buyer after a stale sell-out: %v; want the last unit", err)
	}
	// A has had no buyer since the reset (as instances that meet the
	// post-sale wave knowing nothing): it reads the epoch when the
	// sell-out B's late buyer teaches the fleet comes, and answers its
	// first late buyer from memory.
	b.lateUntilSoldOut(t, 1)
	a.waitHeard(t, true, "A, which had read no epoch")
	sent := a.sent.Sent()
	if err := a.buy(stage, "a-late"); !errors.Is(err, inventory.ErrRememberedSoldOut) {
		t.Fatalf("A's first late buyer: %v; want sold out from memory", err)
	}
	if n := a.sent.Sent() - sent; n != 0 {
		t.Fatalf("A's first late buyer sent %d Redis commands, want 0", n)
	}
}

// TestResetAfterSellOutReopensEveryInstance: after a sell-out heard by
// the fleet, a reset through one instance makes the item buyable on both:
// the reset's new epoch wins over the sell-out remembered under the old
// one, once the reset has waited out the lease (here B's clock is moved
// by the lease, as time would have moved it while the reset waited).
func TestResetAfterSellOutReopensEveryInstance(t *testing.T) {
	stage := inventory.StageRedisLock
	a, b := newPushFleet(t, stage, 2)
	ctx := context.Background()
	if err := b.buy(stage, "b-reader"); err != nil {
		t.Fatal(err)
	}
	if err := a.buy(stage, "a-last"); err != nil {
		t.Fatal(err)
	}
	b.waitHeard(t, true, "B")
	if err := b.buy(stage, "b-late"); !errors.Is(err, inventory.ErrRememberedSoldOut) {
		t.Fatalf("B's late buyer: %v; want sold out from memory", err)
	}
	if err := a.svc.Reset(ctx, 1, 2); err != nil {
		t.Fatal(err)
	}
	b.clock.add(pushLease)
	if err := b.buy(stage, "b-after"); err != nil {
		t.Fatalf("B's buyer after the reset: %v; want a unit", err)
	}
	if err := a.buy(stage, "a-after"); err != nil {
		t.Fatalf("A's buyer after the reset: %v; want a unit", err)
	}
}

// TestKeyedRefusalIsHeardByTheFleet: a keyed late buyer refused in its
// Idempotency-Key claim's script (the stage's check, run by Redis beside
// the claim) teaches the instance the sell-out as the stage's own answer
// would, and the fleet hears it: B's first late buyer is answered from
// memory with no Redis command.
func TestKeyedRefusalIsHeardByTheFleet(t *testing.T) {
	const stage = inventory.StageRedisAtomic
	a, b := newPushFleet(t, stage, 1)
	ctx := context.Background()
	if _, err := b.svc.PeekMemory(ctx, stage, 1); err != nil {
		t.Fatal(err) // B reads the epoch, as a buyer in the sale would
	}
	if err := a.buy(stage, "a-last"); err != nil {
		t.Fatal(err) // A knows nothing of it: its stage said only "bought"
	}
	rc, ok := a.svc.RefusalCheck(ctx, stage, inventory.Request{ItemID: 1, UserID: "keyed-late", Quantity: 1})
	if !ok {
		t.Fatal("no refusal check under redis-atomic")
	}
	if err := rc.Refused("sold-out"); !errors.Is(err, inventory.ErrSoldOut) {
		t.Fatalf("the claim's refusal: %v, want sold out", err)
	}
	b.waitHeard(t, true, "B")
	sent := b.sent.Sent()
	if err := b.buy(stage, "b-late"); !errors.Is(err, inventory.ErrRememberedSoldOut) {
		t.Fatalf("B's first late buyer: %v; want sold out from memory", err)
	}
	if n := b.sent.Sent() - sent; n != 0 {
		t.Fatalf("B's first late buyer sent %d Redis commands, want 0", n)
	}
}

// TestSellOutIsPassedOnUnderTheEpochItWasComparedWith: a sell-out
// message is remembered under the epoch it was compared with, not under
// whatever the instance remembers a moment later. Here, between B's
// comparison (the message's epoch is the one B trusts) and the passing on,
// a reset through A gives the item a new epoch, B's memory of the old one
// runs out, and a buyer of B reads the new one before B hears the reset.
// Before, B remembered the old sell-out under the new epoch, and answered
// its buyers "sold out" after the reset while units were left.
func TestSellOutIsPassedOnUnderTheEpochItWasComparedWith(t *testing.T) {
	stage := inventory.StageRedisLock
	a, b := newPushFleet(t, stage, 2)
	ctx := context.Background()
	item := a.crowdItem()
	if err := b.buy(stage, "b-1"); err != nil { // B trusts the epoch
		t.Fatal(err)
	}
	old, err := b.rdb.Get(ctx, admission.EpochKey(item)).Result()
	if err != nil {
		t.Fatal(err)
	}
	passed := make(chan string, 4)
	b.epochs.OnSoldOut(func(_, _, epoch string, _ int) { passed <- epoch })
	var once sync.Once
	b.epochs.SetCompared(func() {
		once.Do(func() {
			if err := a.crowd.Restocked(ctx, 1); err != nil { // B hears it after this
				t.Error(err)
			}
			b.clock.add(pushLease) // B's memory of the old epoch runs out
			// A buyer of B reads the new one.
			if _, err := b.epochs.Epoch(ctx, item); err != nil {
				t.Error(err)
			}
		})
	})
	if err := a.rdb.Publish(ctx, admission.SoldOutChannel, admission.SoldOutMessage(item, stage, old, 1)).Err(); err != nil {
		t.Fatal(err)
	}
	b.waitHeard(t, true, "a sell-out under the epoch B trusted when it compared")
	if got := <-passed; !strings.HasPrefix(got, old+"/") {
		t.Errorf("the sell-out under %s was passed on under %s", old, got)
	}
	// A message of no shape, heard after the reset's: B has heard the reset.
	if err := a.rdb.Publish(ctx, admission.SoldOutChannel, "x").Err(); err != nil {
		t.Fatal(err)
	}
	b.waitHeard(t, false, "the marker")
	if err := b.buy(stage, "b-after"); err != nil {
		t.Fatalf("B's buyer after the reset: %v; want the unit left", err)
	}
}
