package redisstage_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// Attacks on redis-atomic's group commit (group_commit.go), on both SQL
// backends and both kinds of item. Every interleaving is forced: a gate
// around the Ledger holds writes until the test releases them, sales are
// queued one at a time behind a held write, and contexts are cancelled at
// the exact step the attack names. Whatever the attack, the books must
// balance (checkBooks): no oversell, database stock + sold = initial, the
// Redis copy equal to the database stock, no reservation left pending, a
// row for every buyer told yes and none for a buyer told no.

// attackWait bounds every wait of these tests: far beyond what any step
// takes, so that it only turns a hang into a failure.
const attackWait = time.Minute

// attackKind is one kind of item: products or coupon batches.
type attackKind struct {
	name   string
	ledger func(*store.DB) *store.Ledger
}

var attackKinds = []attackKind{
	{"products", (*store.DB).Products},
	{"coupons", (*store.DB).Coupons},
}

// onEveryBackendAndKind runs test once per SQL backend and kind of item,
// each backend's database opened once and shared by its kinds (every
// attackEnv resets its item and takes a Redis namespace of its own).
func onEveryBackendAndKind(t *testing.T, test func(t *testing.T, db *store.DB, k attackKind)) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			db := b.Open(t)
			for _, k := range attackKinds {
				t.Run(k.name, func(t *testing.T) { test(t, db, k) })
			}
		})
	}
}

// attackEnv is one item, freshly reset, with a Redis namespace of its own.
type attackEnv struct {
	ledger *store.Ledger
	rdb    *redis.Client
	ns     string
	id     int64
	stock  int // the initial stock
	seq    atomic.Int64
	stages []*redisstage.RedisAtomic // built by stage: their confirms are waited for
}

func newAttackEnv(t *testing.T, db *store.DB, k attackKind, stock int) *attackEnv {
	t.Helper()
	e := &attackEnv{ledger: k.ledger(db), rdb: testenv.Redis(t), ns: testenv.Name("ga-"), id: 1, stock: stock}
	if err := e.ledger.Reset(context.Background(), e.id, stock); err != nil {
		t.Fatalf("reset %s %d: %v", k.name, e.id, err)
	}
	t.Cleanup(func() {
		keys, _ := e.rdb.Keys(context.Background(), "seckill:{"+e.ns+":*").Result()
		if len(keys) > 0 {
			_ = e.rdb.Del(context.Background(), keys...).Err()
		}
	})
	return e
}

func (e *attackEnv) key(name string) string {
	return fmt.Sprintf("seckill:{%s:%d}:%s", e.ns, e.id, name)
}

// order is a new order of one unit for user, numbered uniquely in the env
// (numbers do not derive from the user: MySQL compares order numbers
// case-blind).
func (e *attackEnv) order(user string) inventory.Order {
	now := time.Now().UTC()
	return inventory.Order{
		No: fmt.Sprintf("GA%05d", e.seq.Add(1)), ItemID: e.id, UserID: user, Quantity: 1,
		Stage: inventory.StageRedisAtomic, Instance: "attack", CreatedAt: now, WrittenAt: now,
		Status: inventory.StatusConfirmed,
	}
}

// stage builds a redis-atomic instance writing through g and, when load,
// loads the Redis copy from the database (overwriting).
func (e *attackEnv) stage(t *testing.T, g *gateLedger, load bool) *redisstage.RedisAtomic {
	t.Helper()
	ra := redisstage.NewRedisAtomic(e.rdb, g, e.ns, nil)
	e.stages = append(e.stages, ra)
	if load {
		if err := ra.Reset(context.Background(), e.id, 0); err != nil {
			t.Fatalf("load the Redis copy: %v", err)
		}
	}
	return ra
}

// buyer is one Buy under way.
type buyer struct {
	o    inventory.Order
	done chan error
	err  error
	got  bool
}

// buy starts a Buy of one unit for user.
func (e *attackEnv) buy(ctx context.Context, ra *redisstage.RedisAtomic, user string) *buyer {
	b := &buyer{o: e.order(user), done: make(chan error, 1)}
	go func() { b.done <- ra.Buy(ctx, b.o) }()
	return b
}

// wait returns the buyer's answer.
func (b *buyer) wait(t *testing.T) error {
	t.Helper()
	if !b.got {
		select {
		case b.err = <-b.done:
			b.got = true
		case <-time.After(attackWait):
			t.Fatalf("buyer %s (order %s) got no answer", b.o.UserID, b.o.No)
		}
	}
	return b.err
}

// queue starts one buyer per user, each only once the one before waits
// behind the write in progress, so the waiting order is the users' order.
// base is how many sales already wait.
func (e *attackEnv) queue(t *testing.T, ctx context.Context, ra *redisstage.RedisAtomic, base int, users ...string) []*buyer {
	t.Helper()
	var out []*buyer
	for i, u := range users {
		out = append(out, e.buy(ctx, ra, u))
		e.waiting(t, ra, base+i+1)
	}
	return out
}

// waiting waits until n sales of the item wait behind the write in progress.
func (e *attackEnv) waiting(t *testing.T, ra *redisstage.RedisAtomic, n int) {
	t.Helper()
	testkit.Eventually(t, fmt.Sprintf("%d sales waiting to write", n), attackWait, func() bool {
		return ra.WaitingToWrite(e.id) == n
	})
}

// checkBooks checks the redis-atomic invariant once every buy returned:
// preSold units were sold before the buyers came (rows written straight
// through the Ledger), drift is how much the test made the Redis copy
// exceed the database on purpose.
func (e *attackEnv) checkBooks(t *testing.T, preSold, drift int, buyers []*buyer) {
	t.Helper()
	ctx := context.Background()
	yes := 0
	for _, b := range buyers {
		if b.wait(t) == nil {
			yes++
		}
	}
	a, err := e.ledger.Audit(ctx, e.id)
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	if a.InitialStock != e.stock || a.Sold != preSold+yes || !a.Conserved() || a.Oversold() != 0 || a.Stock < 0 {
		t.Errorf("audit %+v; want initial %d, %d sold (%d before, %d buyers told yes), conserved, no oversell",
			a, e.stock, preSold+yes, preSold, yes)
	}
	if rs, err := e.rdb.Get(ctx, e.key("stock")).Int(); err != nil || rs != a.Stock+drift {
		t.Errorf("Redis copy holds %d (%v), want the database stock %d + %d", rs, err, a.Stock, drift)
	}
	for _, ra := range e.stages {
		// A sale is answered before its confirm is sent (confirm.go).
		if err := ra.WaitConfirms(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := e.rdb.HLen(ctx, e.key("pending")).Result(); err != nil || n != 0 {
		t.Errorf("%d reservations left pending (%v), want none", n, err)
	}
	for _, b := range buyers {
		row, err := e.ledger.FindOrder(ctx, b.o.No)
		switch {
		case b.err == nil && (err != nil || row.UserID != b.o.UserID || row.Status != inventory.StatusConfirmed):
			t.Errorf("buyer %s was sold order %s, but its row is %+v, %v", b.o.UserID, b.o.No, row, err)
		case b.err != nil && !errors.Is(err, inventory.ErrOrderNotFound):
			t.Errorf("buyer %s was told %v, but order %s has a row: %+v, %v", b.o.UserID, b.err, b.o.No, row, err)
		}
	}
}

// gateLedger is a Ledger whose writes can be held until the test releases
// them, answered with an injected error instead of the database, and
// watched: it records each write's order numbers.
type gateLedger struct {
	*store.Ledger
	// hold says whether the call-th write (from 0, groups and single
	// orders alike) waits for release; nil holds the first only.
	hold func(call int) bool
	// groupErr, when it returns an error for the n-th DeductAll (from
	// 0), answers it instead of the database, which is not asked.
	groupErr func(n int, orders []inventory.Order) error
	// singleErr does the same for the n-th Deduct.
	singleErr func(n int, o inventory.Order) error
	// onGroup runs as a DeductAll starts, before any hold.
	onGroup func(ctx context.Context, orders []inventory.Order)
	tally   *crowdTally // when set, hears which sales a write took

	mu      sync.Mutex
	calls   []gateCall
	groups  int
	singles int
	held    []chan struct{}
	open    bool // the test is over: hold nothing any more
}

type gateCall struct {
	group bool
	nos   []string
}

func newGate(t *testing.T, l *store.Ledger) *gateLedger {
	g := &gateLedger{Ledger: l}
	t.Cleanup(func() {
		g.mu.Lock()
		g.open = true
		g.mu.Unlock()
		g.release()
	})
	return g
}

// enter records a write, holds it if it must, and returns its number
// among the writes of its kind.
func (g *gateLedger) enter(group bool, orders []inventory.Order) int {
	nos := make([]string, len(orders))
	for i, o := range orders {
		nos[i] = o.No
	}
	if g.tally != nil {
		g.tally.take(nos)
	}
	g.mu.Lock()
	call := len(g.calls)
	g.calls = append(g.calls, gateCall{group: group, nos: nos})
	n := g.singles
	if group {
		n = g.groups
		g.groups++
	} else {
		g.singles++
	}
	var release chan struct{}
	if !g.open && (g.hold == nil && call == 0 || g.hold != nil && g.hold(call)) {
		release = make(chan struct{})
		g.held = append(g.held, release)
	}
	g.mu.Unlock()
	if release != nil {
		<-release
	}
	return n
}

func (g *gateLedger) Deduct(ctx context.Context, o inventory.Order) error {
	n := g.enter(false, []inventory.Order{o})
	if g.singleErr != nil {
		if err := g.singleErr(n, o); err != nil {
			return err
		}
	}
	return g.Ledger.Deduct(ctx, o)
}

func (g *gateLedger) DeductAll(ctx context.Context, orders []inventory.Order) error {
	if g.onGroup != nil {
		g.onGroup(ctx, orders)
	}
	n := g.enter(true, orders)
	if g.groupErr != nil {
		if err := g.groupErr(n, orders); err != nil {
			return err
		}
	}
	return g.Ledger.DeductAll(ctx, orders)
}

// heldNow is how many writes wait for release.
func (g *gateLedger) heldNow() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.held)
}

// release lets every held write go.
func (g *gateLedger) release() {
	g.mu.Lock()
	held := g.held
	g.held = nil
	g.mu.Unlock()
	for _, c := range held {
		close(c)
	}
}

// written is the order numbers of every write so far, in order; a group
// write is marked with a leading "group:".
func (g *gateLedger) written() [][]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([][]string, len(g.calls))
	for i, c := range g.calls {
		if c.group {
			out[i] = append([]string{"group:"}, c.nos...)
		} else {
			out[i] = slices.Clone(c.nos)
		}
	}
	return out
}

// nos lists buyers' order numbers, for comparing with written.
func nos(group bool, buyers ...*buyer) []string {
	var out []string
	if group {
		out = append(out, "group:")
	}
	for _, b := range buyers {
		out = append(out, b.o.No)
	}
	return out
}

func checkWritten(t *testing.T, g *gateLedger, want ...[]string) {
	t.Helper()
	if got := g.written(); !slices.EqualFunc(got, want, slices.Equal[[]string]) {
		t.Errorf("writes %v, want %v", got, want)
	}
}

// TestGroupAttackLoneSalesAreWrittenAlone forces rule 1: five buyers, one
// after another, each arriving when no write of the item runs. Each sale
// must be written at once and alone (a single Deduct, no DeductAll), and
// the books balance.
func TestGroupAttackLoneSalesAreWrittenAlone(t *testing.T) {
	onEveryBackendAndKind(t, func(t *testing.T, db *store.DB, k attackKind) {
		e := newAttackEnv(t, db, k, 10)
		g := newGate(t, e.ledger)
		g.hold = func(int) bool { return false }
		ra := e.stage(t, g, true)
		var buyers []*buyer
		var want [][]string
		for i := range 5 {
			b := e.buy(context.Background(), ra, fmt.Sprintf("u%d", i))
			if err := b.wait(t); err != nil {
				t.Fatalf("lone buyer %d: %v", i, err)
			}
			buyers = append(buyers, b)
			want = append(want, nos(false, b))
		}
		checkWritten(t, g, want...)
		e.checkBooks(t, 0, 0, buyers)
	})
}

// TestGroupAttackRepeatBuyerInGroup forces a group refused by the database
// with ErrAlreadyPurchased: "dup" already holds a live row (written
// through the Ledger before the Redis copy was loaded) and the copy then
// forgot it as a buyer, so Redis gives dup a unit. While the first sale's
// write is held, a, dup, b and c queue behind it. The group of four must be
// refused and then written one sale at a time: a, b and c sold, dup told
// ErrAlreadyPurchased with its unit back in Redis and its old row
// untouched. In the second variant b's lone retry also fails transiently
// (injected ErrUnavailable): b alone fails and gives its unit back.
func TestGroupAttackRepeatBuyerInGroup(t *testing.T) {
	for _, flaky := range []bool{false, true} {
		t.Run(fmt.Sprintf("b's lone retry fails: %v", flaky), func(t *testing.T) {
			onEveryBackendAndKind(t, func(t *testing.T, db *store.DB, k attackKind) {
				ctx := context.Background()
				e := newAttackEnv(t, db, k, 10)
				pre := e.order("dup")
				if err := e.ledger.Deduct(ctx, pre); err != nil {
					t.Fatalf("dup's first order: %v", err)
				}
				g := newGate(t, e.ledger)
				if flaky {
					g.singleErr = func(_ int, o inventory.Order) error {
						if o.UserID == "b" {
							return fmt.Errorf("%w: injected", inventory.ErrUnavailable)
						}
						return nil
					}
				}
				ra := e.stage(t, g, true)
				if err := e.rdb.SRem(ctx, e.key("buyers"), "dup").Err(); err != nil {
					t.Fatal(err)
				}
				first := e.buy(ctx, ra, "first")
				testkit.Eventually(t, "the first write to be held", attackWait, func() bool { return g.heldNow() == 1 })
				q := e.queue(t, ctx, ra, 0, "a", "dup", "b", "c")
				g.release()

				wantB := error(nil)
				if flaky {
					wantB = inventory.ErrUnavailable
				}
				for b, want := range map[*buyer]error{first: nil, q[0]: nil, q[1]: inventory.ErrAlreadyPurchased, q[2]: wantB, q[3]: nil} {
					if err := b.wait(t); want == nil && err != nil || want != nil && !errors.Is(err, want) {
						t.Errorf("buyer %s: %v, want %v", b.o.UserID, err, want)
					}
				}
				checkWritten(t, g, nos(false, first), nos(true, q...), nos(false, q[0]), nos(false, q[1]), nos(false, q[2]), nos(false, q[3]))
				if o, err := e.ledger.OrderOf(ctx, e.id, "dup"); err != nil || o.No != pre.No {
					t.Errorf("dup's row: %+v, %v; want its first order %s", o, err, pre.No)
				}
				e.checkBooks(t, 1, 0, append([]*buyer{first}, q...))
			})
		})
	}
}

// TestGroupAttackCaseFoldedTwinsInOneGroup forces two buyers whose ids
// differ only in case, "alice" and "ALICE", into one group with bob. Redis
// tells them apart, and so does MySQL (sql/mysql/004_exact_user_ids.sql;
// before it, the multi-row INSERT collided with itself there and ALICE was
// refused): on every backend all three are sold and the books balance.
func TestGroupAttackCaseFoldedTwinsInOneGroup(t *testing.T) {
	onEveryBackendAndKind(t, func(t *testing.T, db *store.DB, k attackKind) {
		ctx := context.Background()
		e := newAttackEnv(t, db, k, 10)
		g := newGate(t, e.ledger)
		ra := e.stage(t, g, true)
		first := e.buy(ctx, ra, "first")
		testkit.Eventually(t, "the first write to be held", attackWait, func() bool { return g.heldNow() == 1 })
		q := e.queue(t, ctx, ra, 0, "alice", "ALICE", "bob")
		g.release()
		for _, b := range append([]*buyer{first}, q...) {
			if err := b.wait(t); err != nil {
				t.Errorf("buyer %s: %v, want sold", b.o.UserID, err)
			}
		}
		e.checkBooks(t, 0, 0, append([]*buyer{first}, q...))
	})
}

// TestGroupAttackInjectedGroupErrors forces rule 2: the group of three
// behind the held first write is answered by the gate with an injected
// error, and the database is not asked. A transient error (ErrUnavailable,
// ErrOverloaded, a context error) must fail every member, with no lone
// retry, every unit back in Redis and no row. Any other error (a refusal,
// or one the code does not know) must make each sale be written alone,
// and here all three are then sold.
func TestGroupAttackInjectedGroupErrors(t *testing.T) {
	cases := []struct {
		name      string
		err       error
		transient bool
	}{
		{"unavailable", fmt.Errorf("%w: injected", inventory.ErrUnavailable), true},
		{"overloaded", fmt.Errorf("%w: injected", inventory.ErrOverloaded), true},
		{"deadline", fmt.Errorf("injected: %w", context.DeadlineExceeded), true},
		{"canceled", fmt.Errorf("injected: %w", context.Canceled), true},
		{"sold out", fmt.Errorf("%w: injected", inventory.ErrSoldOut), false},
		{"already purchased", fmt.Errorf("%w: injected", inventory.ErrAlreadyPurchased), false},
		{"unknown", errors.New("injected: something odd"), false},
	}
	onEveryBackendAndKind(t, func(t *testing.T, db *store.DB, k attackKind) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				ctx := context.Background()
				e := newAttackEnv(t, db, k, 10)
				g := newGate(t, e.ledger)
				g.groupErr = func(int, []inventory.Order) error { return c.err }
				ra := e.stage(t, g, true)
				first := e.buy(ctx, ra, "first")
				testkit.Eventually(t, "the first write to be held", attackWait, func() bool { return g.heldNow() == 1 })
				q := e.queue(t, ctx, ra, 0, "a", "b", "c")
				g.release()
				if err := first.wait(t); err != nil {
					t.Errorf("first buyer: %v", err)
				}
				for _, b := range q {
					err := b.wait(t)
					if c.transient && !errors.Is(err, c.err) {
						t.Errorf("buyer %s: %v, want the group's %v", b.o.UserID, err, c.err)
					}
					if !c.transient && err != nil {
						t.Errorf("buyer %s: %v, want sold alone after the group was refused", b.o.UserID, err)
					}
				}
				want := [][]string{nos(false, first), nos(true, q...)}
				if !c.transient {
					for _, b := range q {
						want = append(want, nos(false, b))
					}
				}
				checkWritten(t, g, want...)
				e.checkBooks(t, 0, 0, append([]*buyer{first}, q...))
			})
		}
	})
}

// cancelAtCheck is a context that its first Err call after arm cancels:
// that call still answers nil, every later one context.Canceled. Armed
// while its sale waits, it is cancelled at the very instant the group
// commit checks it and takes the sale into a group.
type cancelAtCheck struct {
	context.Context
	cancel context.CancelFunc
	armed  atomic.Bool
	fired  atomic.Bool
}

func newCancelAtCheck() *cancelAtCheck {
	ctx, cancel := context.WithCancel(context.Background())
	return &cancelAtCheck{Context: ctx, cancel: cancel}
}

func (c *cancelAtCheck) Err() error {
	if c.armed.CompareAndSwap(true, false) {
		c.cancel()
		c.fired.Store(true)
		return nil
	}
	return c.Context.Err()
}

// TestGroupAttackCancelAroundTheTake forces rule 3 at its edges. Behind the
// held first write wait, in order: "leaves", whose request is cancelled
// while it waits; "atTake", whose request is cancelled at the instant its
// group is taken (it heads the group, so the group's context carries its
// values); "afterTake", cancelled as the group's DeductAll starts; and
// "stays". leaves must get context.Canceled at once, its unit back and no
// row, and never be written; the group of the other three must be written
// under a context their cancellations do not reach, and all three sold.
func TestGroupAttackCancelAroundTheTake(t *testing.T) {
	onEveryBackendAndKind(t, func(t *testing.T, db *store.DB, k attackKind) {
		e := newAttackEnv(t, db, k, 10)
		g := newGate(t, e.ledger)
		ra := e.stage(t, g, true)

		leavesCtx, leave := context.WithCancel(context.Background())
		defer leave()
		atTakeCtx := newCancelAtCheck()
		defer atTakeCtx.cancel()
		afterTakeCtx, cancelAfterTake := context.WithCancel(context.Background())
		defer cancelAfterTake()
		var groupCtxErr error
		var groupSeen bool
		g.onGroup = func(ctx context.Context, _ []inventory.Order) {
			cancelAfterTake()
			groupCtxErr, groupSeen = ctx.Err(), true
		}

		first := e.buy(context.Background(), ra, "first")
		testkit.Eventually(t, "the first write to be held", attackWait, func() bool { return g.heldNow() == 1 })
		leaves := e.queue(t, leavesCtx, ra, 0, "leaves")[0]
		atTake := e.queue(t, atTakeCtx, ra, 1, "atTake")[0]
		afterTake := e.queue(t, afterTakeCtx, ra, 2, "afterTake")[0]
		stays := e.queue(t, context.Background(), ra, 3, "stays")[0]

		leave()
		if err := leaves.wait(t); !errors.Is(err, context.Canceled) {
			t.Errorf("the sale that left: %v, want context.Canceled", err)
		}
		e.waiting(t, ra, 3)
		atTakeCtx.armed.Store(true)
		g.release()

		for _, b := range []*buyer{first, atTake, afterTake, stays} {
			if err := b.wait(t); err != nil {
				t.Errorf("buyer %s: %v, want sold (taken sales wait for their group)", b.o.UserID, err)
			}
		}
		if !atTakeCtx.fired.Load() {
			t.Errorf("atTake's context was never checked while it waited: the attack did not happen")
		}
		if !groupSeen || groupCtxErr != nil {
			t.Errorf("group context after its members were cancelled: seen %v, err %v; want a live context", groupSeen, groupCtxErr)
		}
		checkWritten(t, g, nos(false, first), nos(true, atTake, afterTake, stays))
		e.checkBooks(t, 0, 0, []*buyer{first, leaves, atTake, afterTake, stays})
	})
}

// TestGroupAttackWrongCopyRefusesTheGroup forces a group refused as
// ErrSoldOut: after the Redis copy was loaded with 10, seven outsiders buy
// straight through the Ledger, so the database holds 3 while Redis still
// offers 10. The first sale takes one; the group of five behind it asks
// for five of the two left, is refused, and is written one sale at a time:
// the first two sold, the last three told ErrSoldOut with their units back.
// No oversell; the copy stays 7 above the database, the drift the test
// made.
func TestGroupAttackWrongCopyRefusesTheGroup(t *testing.T) {
	onEveryBackendAndKind(t, func(t *testing.T, db *store.DB, k attackKind) {
		ctx := context.Background()
		e := newAttackEnv(t, db, k, 10)
		g := newGate(t, e.ledger)
		ra := e.stage(t, g, true)
		for i := range 7 {
			if err := e.ledger.Deduct(ctx, e.order(fmt.Sprintf("out%d", i))); err != nil {
				t.Fatalf("outsider %d: %v", i, err)
			}
		}
		first := e.buy(ctx, ra, "first")
		testkit.Eventually(t, "the first write to be held", attackWait, func() bool { return g.heldNow() == 1 })
		q := e.queue(t, ctx, ra, 0, "b0", "b1", "b2", "b3", "b4")
		g.release()
		for i, b := range append([]*buyer{first}, q...) {
			err := b.wait(t)
			if i < 3 && err != nil || i >= 3 && !errors.Is(err, inventory.ErrSoldOut) {
				t.Errorf("buyer %s: %v, want %s", b.o.UserID, err, map[bool]string{true: "sold", false: "ErrSoldOut"}[i < 3])
			}
		}
		checkWritten(t, g, nos(false, first), nos(true, q...),
			nos(false, q[0]), nos(false, q[1]), nos(false, q[2]), nos(false, q[3]), nos(false, q[4]))
		e.checkBooks(t, 7, 7, append([]*buyer{first}, q...))
	})
}

// crowdTally follows each sale of a crowd: returned, or in the hands of a
// write (taken into a group, including a refused group's members waiting
// for their lone retry), so that with the lanes' waiting sales the test
// knows when every buyer is accounted for.
type crowdTally struct {
	mu       sync.Mutex
	returned int
	inHand   map[string]bool
	done     map[string]bool
}

func newCrowdTally() *crowdTally {
	return &crowdTally{inHand: map[string]bool{}, done: map[string]bool{}}
}

func (c *crowdTally) take(nos []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, no := range nos {
		if !c.done[no] {
			c.inHand[no] = true
		}
	}
}

func (c *crowdTally) finish(no string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done[no] = true
	delete(c.inHand, no)
	c.returned++
}

// counts returns how many buyers returned and how many sales a write holds.
func (c *crowdTally) counts() (returned, inHand int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.returned, len(c.inHand)
}

// TestGroupAttackCrowdReleasedInBatches forces the crowd: n buyers start
// at once on stock s, spread over one or two instances (two group
// commits, two lanes writing the same row). Every database write is held
// until every buyer is accounted for (returned, waiting in a lane, or in
// the write's hands), then released: each write takes every sale that
// could possibly join it. Exactly s are sold, the rest told ErrSoldOut, no
// group exceeds 64 sales, and the books balance. With one instance the
// writes are forced exactly: the first, then groups of 64 and the rest.
func TestGroupAttackCrowdReleasedInBatches(t *testing.T) {
	cases := []struct {
		name                     string
		buyers, stock, instances int
	}{
		{"50 on 20", 50, 20, 1},
		{"150 on 100", 150, 100, 1},
		{"60 on 30, two instances", 60, 30, 2},
	}
	onEveryBackendAndKind(t, func(t *testing.T, db *store.DB, k attackKind) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				ctx := context.Background()
				e := newAttackEnv(t, db, k, c.stock)
				tally := newCrowdTally()
				var gates []*gateLedger
				var stages []*redisstage.RedisAtomic
				for i := range c.instances {
					g := newGate(t, e.ledger)
					g.hold = func(int) bool { return true }
					g.tally = tally
					gates = append(gates, g)
					stages = append(stages, e.stage(t, g, i == 0))
				}
				start := make(chan struct{})
				buyers := make([]*buyer, c.buyers)
				for i := range buyers {
					b := &buyer{o: e.order(fmt.Sprintf("crowd%d", i)), done: make(chan error, 1)}
					buyers[i] = b
					ra := stages[i%len(stages)]
					go func() {
						<-start
						err := ra.Buy(ctx, b.o)
						tally.finish(b.o.No)
						b.done <- err
					}()
				}
				close(start)

				held := func() int {
					n := 0
					for _, g := range gates {
						n += g.heldNow()
					}
					return n
				}
				for {
					all := false
					testkit.Eventually(t, "every buyer accounted for while a write is held", attackWait, func() bool {
						returned, inHand := tally.counts()
						waiting := 0
						for _, ra := range stages {
							waiting += ra.WaitingToWrite(e.id)
						}
						all = returned == c.buyers
						return all || held() > 0 && returned+inHand+waiting == c.buyers
					})
					if all {
						break
					}
					for _, g := range gates {
						g.release()
					}
				}

				sold := 0
				for _, b := range buyers {
					switch err := b.wait(t); {
					case err == nil:
						sold++
					case !errors.Is(err, inventory.ErrSoldOut):
						t.Errorf("buyer %s: %v, want sold or ErrSoldOut", b.o.UserID, err)
					}
				}
				if sold != c.stock {
					t.Errorf("%d sold, want all %d", sold, c.stock)
				}
				total := 0
				for _, g := range gates {
					var sizes []int
					for _, w := range g.written() {
						n := len(w)
						if w[0] == "group:" {
							n--
						}
						if n > 64 {
							t.Errorf("a write of %d sales, want at most 64", n)
						}
						sizes = append(sizes, n)
						total += n
					}
					if c.instances == 1 {
						want := []int{sizes[0]}
						for left := c.stock - sizes[0]; left > 0; left -= min(left, 64) {
							want = append(want, min(left, 64))
						}
						if !slices.Equal(sizes, want) {
							t.Errorf("writes of %v sales, want %v: each held write should take every sale waiting", sizes, want)
						}
					}
				}
				if total != c.stock {
					t.Errorf("%d sales written in all, want %d (one write each, none refused)", total, c.stock)
				}
				e.checkBooks(t, 0, 0, buyers)
			})
		}
	})
}

// TestGroupAttackHammerWithFailures forces many goroutines and failing
// writes at once: 200 buyers released together by a barrier over two
// instances on stock 60, with no write held, while every third group
// write fails with ErrUnavailable and every seventh lone write with
// ErrOverloaded (injected, nothing written). Whatever the groups turn out
// to be: every buyer is sold, told ErrSoldOut, or told one of the injected
// errors, and the books balance (the failed units back in Redis).
func TestGroupAttackHammerWithFailures(t *testing.T) {
	const n, stock = 200, 60
	onEveryBackendAndKind(t, func(t *testing.T, db *store.DB, k attackKind) {
		ctx := context.Background()
		e := newAttackEnv(t, db, k, stock)
		var stages []*redisstage.RedisAtomic
		for i := range 2 {
			g := newGate(t, e.ledger)
			g.hold = func(int) bool { return false }
			g.groupErr = func(n int, _ []inventory.Order) error {
				if n%3 == 1 {
					return fmt.Errorf("%w: injected", inventory.ErrUnavailable)
				}
				return nil
			}
			g.singleErr = func(n int, _ inventory.Order) error {
				if n%7 == 3 {
					return fmt.Errorf("%w: injected", inventory.ErrOverloaded)
				}
				return nil
			}
			stages = append(stages, e.stage(t, g, i == 0))
		}
		barrier := testkit.NewBarrier(n, attackWait)
		buyers := make([]*buyer, n)
		for i := range buyers {
			b := &buyer{o: e.order(fmt.Sprintf("h%d", i)), done: make(chan error, 1)}
			buyers[i] = b
			ra := stages[i%2]
			go func() {
				barrier.Wait(ctx)
				b.done <- ra.Buy(ctx, b.o)
			}()
		}
		for _, b := range buyers {
			if err := b.wait(t); err != nil && !errors.Is(err, inventory.ErrSoldOut) &&
				!errors.Is(err, inventory.ErrUnavailable) && !errors.Is(err, inventory.ErrOverloaded) {
				t.Errorf("buyer %s: %v, want sold, ErrSoldOut or an injected error", b.o.UserID, err)
			}
		}
		e.checkBooks(t, 0, 0, buyers)
	})
}
