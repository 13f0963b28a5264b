package inventory_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// pause says where the paused holder stops.
type pause int

const (
	// afterRead pauses A between its read and its last check of the lease:
	// the check sees the loss.
	afterRead pause = iota
	// frozen pauses A's whole process just before its write, after its last
	// check: its clock and timers stop too, so when it resumes nothing in it
	// knows yet that the lease is gone, and the write goes out. We model it
	// with a hold that never reports the loss; the chaos suite does it for
	// real with SIGSTOP. Only the fencing token stops this write.
	frozen
)

// frozenGuard takes a real lease but hands the section a hold that cannot
// see the lease's loss, as a holder does in the instant after a
// whole-process pause.
type frozenGuard struct{ locker lock.Locker }

func (g frozenGuard) Enter(ctx context.Context, key string, _ time.Time) (inventory.Held, error) {
	l, err := g.locker.Obtain(ctx, key, 150*time.Millisecond, lock.ObtainOptions{Wait: 5 * time.Second, Fixed: true})
	if err != nil {
		return nil, err
	}
	return frozenHold{l}, nil
}

type frozenHold struct{ l *lock.Lease }

func (h frozenHold) Token() int64                                { return h.l.Token() }
func (h frozenHold) Context(ctx context.Context) context.Context { return ctx }
func (h frozenHold) Err() error                                  { return nil }
func (h frozenHold) Exit(ctx context.Context) error              { return h.l.Release(ctx) }

// pausedHolder runs the pitfall "a pause past the TTL" on a stock of 1:
// buyer A obtains the lock (watchdog off, 150ms lease), reads stock 1, and
// is paused by the test hook until its lease has expired and buyer B has
// obtained the lock and bought the unit. Then A resumes and writes.
//
// afterRead: the section runs under the lease's context, so a lease that
// ran out before the read would stop A there, on a starved machine, and
// B's own lease must last through its read and write. Both buyers take a
// minute, and A's pause shortens A's to 150 ms (Refresh): its lease ends
// after its read, whatever the machine's pace.
func pausedHolder(t *testing.T, open func(testing.TB) *store.DB, fencing bool, at pause) (errA error, audit inventory.Audit) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := open(t)
	rdb := testenv.Redis(t)
	locker := testenv.NewLock(t, rdb, lock.Options{Prefix: testenv.Name("fence") + ":"})
	t.Cleanup(func() {
		if err := locker.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := db.Products().Reset(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}

	aRead := make(chan struct{})
	bDone := make(chan struct{})
	leases := &leaseTaker{Locker: locker, got: make(chan *lock.Lease, 2)}
	hold := func(o inventory.Order) {
		if o.UserID == "A" {
			if at == afterRead {
				if err := (<-leases.got).Refresh(ctx, 150*time.Millisecond); err != nil {
					t.Errorf("shortening A's lease: %v", err)
				}
			}
			close(aRead)
			<-bDone // the pause: A's lease runs out meanwhile
		}
	}
	section := inventory.SectionOptions{Fencing: fencing}
	lo := inventory.LockOptions{TTL: 150 * time.Millisecond, Wait: 5 * time.Second, Fixed: true}
	var stage inventory.Stage
	if at == afterRead {
		section.BetweenReadAndWrite = func(_ context.Context, o inventory.Order) { hold(o) }
		lo.TTL = time.Minute
		stage = inventory.NewRedisLock(leases, db.Products(), "product", section, lo)
	} else {
		section.BeforeWrite = hold
		stage = inventory.NewGuarded(frozenGuard{locker}, db.Products(), "product", section)
	}
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{"redis-lock": stage}, "t", "O")

	doneA := make(chan error, 1)
	go func() {
		_, err := svc.Buy(ctx, "redis-lock", inventory.Request{ItemID: 1, UserID: "A", Quantity: 1})
		doneA <- err
	}()
	select {
	case <-aRead:
	case err := <-doneA:
		// A never reached its read (its lock did not come, say): a
		// failure to report, not a wait for ever.
		t.Fatalf("A's buy ended before it read the stock: %v", err)
	}
	t.Logf("1. A holds the lock (150 ms lease, no watchdog), read stock 1 and pauses %s", map[pause]string{afterRead: "between its read and its write", frozen: "after its last look at the lease, just before the write"}[at])
	// B waits on the lock until A's lease expires, then buys the unit.
	if _, err := svc.Buy(ctx, "redis-lock", inventory.Request{ItemID: 1, UserID: "B", Quantity: 1}); err != nil {
		t.Fatalf("B must get the lock once A's lease expired and buy the unit: %v", err)
	}
	t.Log("2. A's lease ran out in Redis; B got the lock and bought the unit")
	close(bDone)
	errA = <-doneA
	t.Logf("3. A resumes and tries to write (fencing %v): %v", fencing, errA)
	a, err := db.Products().Audit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	return errA, a
}

// TestFencingRejectsPausedHolder: with fencing, the paused holder's write
// is refused by the database, its transaction rolls back, and nothing is
// oversold.
func TestFencingRejectsPausedHolder(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			errA, a := pausedHolder(t, b.Open, true, frozen)
			if !errors.Is(errA, inventory.ErrLockLost) {
				t.Fatalf("A's write must be fenced off with ErrLockLost, got %v", errA)
			}
			if a.Orders != 1 || a.Oversold() != 0 || !a.Conserved() {
				t.Fatalf("want exactly B's order and conservation, got %+v", a)
			}
		})
	}
}

// TestWithoutFencingThePausedHolderOversells is the workshop's proof that
// the lock alone is not enough: a whole-process pause after the holder's
// last look at its lease, with SECKILL_FENCING=false, sells the one unit
// twice.
func TestWithoutFencingThePausedHolderOversells(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			errA, a := pausedHolder(t, b.Open, false, frozen)
			if errA != nil && !errors.Is(errA, lock.ErrLockLost) {
				t.Fatalf("A's purchase: %v", errA)
			}
			if a.Orders != 2 || a.Oversold() != 1 || a.Conserved() {
				t.Fatalf("without fencing the paused holder must oversell by one, got %+v oversold=%d", a, a.Oversold())
			}
		})
	}
}

// TestLostLeaseStopsTheSection: a holder paused past its lease before its
// last check learns from the lease, not from the database, that it lost
// the lock: it writes nothing even with fencing off.
func TestLostLeaseStopsTheSection(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			errA, a := pausedHolder(t, b.Open, false, afterRead)
			if !errors.Is(errA, inventory.ErrLockLost) {
				t.Fatalf("A must stop with ErrLockLost once its lease is gone, got %v", errA)
			}
			if a.Orders != 1 || a.Oversold() != 0 || !a.Conserved() {
				t.Fatalf("want exactly B's order and conservation, got %+v", a)
			}
		})
	}
}

// TestLostLeaseCancelsTheSectionContext: the critical section runs under
// the lease's context, so work in flight (a slow query, a remote call)
// stops when the lease runs out, not only at the check before the write.
// A obtains a fixed lease (no watchdog) of a minute, so it cannot run out
// before A's section begins, however slow the machine. A's section then
// shortens it to 150 ms (Refresh) and blocks on its context between the
// read and the write; the context must end when the lease runs out, and A
// must stop with ErrLockLost without writing. Under the request's own
// context the section would block until the test's safety limit.
//
// The lease used to be 150 ms from the start: on a starved machine (make
// stress beside other suites) it ran out before the read, the section was
// never called, and the test waited on it for good.
func TestLostLeaseCancelsTheSectionContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := testenv.SQLite(t)
	locker := testenv.NewLock(t, testenv.Redis(t), lock.Options{Prefix: testenv.Name("lease-ctx") + ":"})
	t.Cleanup(func() {
		if err := locker.Close(); err != nil {
			t.Error(err)
		}
	})
	if err := db.Products().Reset(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	const safety = 10 * time.Second
	leases := &leaseTaker{Locker: locker, got: make(chan *lock.Lease, 1)}
	ended := make(chan error, 1)
	section := inventory.SectionOptions{BetweenReadAndWrite: func(sctx context.Context, o inventory.Order) {
		if err := (<-leases.got).Refresh(ctx, 150*time.Millisecond); err != nil {
			t.Errorf("shortening the lease: %v", err)
		}
		select {
		case <-sctx.Done():
			ended <- sctx.Err()
		case <-time.After(safety):
			ended <- nil
		}
	}}
	lo := inventory.LockOptions{TTL: time.Minute, Wait: 5 * time.Second, Fixed: true}
	stage := inventory.NewRedisLock(leases, db.Products(), "product", section, lo)
	svc := inventory.NewService(db.Products(), map[string]inventory.Stage{"redis-lock": stage}, "t", "O")
	_, err := svc.Buy(ctx, "redis-lock", inventory.Request{ItemID: 1, UserID: "A", Quantity: 1})
	select {
	case cerr := <-ended:
		if cerr == nil {
			t.Fatalf("the section's context was still live %v after the lease ran out", safety)
		}
	default:
		t.Fatalf("the section never ran; the buy answered %v", err)
	}
	if !errors.Is(err, inventory.ErrLockLost) {
		t.Fatalf("A must stop with ErrLockLost, got %v", err)
	}
	if a, err := db.Products().Audit(ctx, 1); err != nil || a.Orders != 0 || a.Stock != 1 {
		t.Fatalf("audit %+v, %v: A must not have written", a, err)
	}
}

// leaseTaker hands the test every lease its Locker grants, on got: a
// test obtains no more leases than got holds unread.
type leaseTaker struct {
	lock.Locker
	got chan *lock.Lease
}

func (l *leaseTaker) Obtain(ctx context.Context, key string, ttl time.Duration, o lock.ObtainOptions) (*lock.Lease, error) {
	lease, err := l.Locker.Obtain(ctx, key, ttl, o)
	if err == nil {
		l.got <- lease
	}
	return lease, err
}

// TestSameTokenTwiceClaimsOnce: a failover to a replica that had not
// received the latest writes can hand out a lock that is held, and a token
// already issued (internal/lock's doc). The fence is the backstop: of two
// holders with one token, only the first may claim the row. A claim that
// took an equal token as the holder's own let the second read the stock
// the first had read, and both computed writes passed "fence_token <=
// token": two orders for one unit (a review found this in FenceAndRead).
//
// The re-issue is forced: the fence record runs ahead of the server's clock
// (a master whose clock stepped back, or a promoted replica whose clock is
// behind), so tokens come from the record plus one. A obtains token F+1,
// claims the row and freezes after its last look at its lease
// (frozenGuard); the failover then loses A's lock key and the record's
// last write (back to F); B obtains F+1 again.
func TestSameTokenTwiceClaimsOnce(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			db := b.Open(t)
			rdb := testenv.Redis(t)
			prefix := testenv.Name("sametoken") + ":"
			locker := testenv.NewLock(t, rdb, lock.Options{Prefix: prefix})
			t.Cleanup(func() { _ = locker.Close() })
			if err := db.Products().Reset(ctx, 1, 1); err != nil {
				t.Fatal(err)
			}
			lockKey := prefix + "{product:1}"
			fenceKey := lockKey + ":fence"
			f := time.Now().Add(24 * time.Hour).UnixMicro() // the fence record runs ahead of the clock
			if err := rdb.Set(ctx, fenceKey, strconv.FormatInt(f, 10), time.Hour).Err(); err != nil {
				t.Fatal(err)
			}

			var tokens []int64
			guard := tokenSpy{frozenGuard{locker}, &tokens}
			bDone := make(chan struct{})
			section := inventory.SectionOptions{Fencing: true}
			var svc *inventory.Service
			var errB error
			section.BeforeWrite = func(o inventory.Order) {
				if o.UserID != "A" {
					return
				}
				// The failover: the new master never saw A's obtain.
				if err := rdb.Del(ctx, lockKey).Err(); err != nil {
					t.Error(err)
				}
				if err := rdb.Set(ctx, fenceKey, strconv.FormatInt(f, 10), time.Hour).Err(); err != nil {
					t.Error(err)
				}
				_, errB = svc.Buy(ctx, "redis-lock", inventory.Request{ItemID: 1, UserID: "B", Quantity: 1})
				close(bDone)
			}
			stage := inventory.NewGuarded(guard, db.Products(), "product", section)
			svc = inventory.NewService(db.Products(), map[string]inventory.Stage{"redis-lock": stage}, "t", "O")

			_, errA := svc.Buy(ctx, "redis-lock", inventory.Request{ItemID: 1, UserID: "A", Quantity: 1})
			<-bDone
			t.Logf("tokens %v; A heard %v; B heard %v", tokens, errA, errB)
			a, err := db.Products().Audit(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(tokens) != 2 || tokens[0] != tokens[1] {
				t.Fatalf("the scenario needs the same token twice, got %v", tokens)
			}
			if a.Oversold() != 0 || !a.Conserved() {
				t.Fatalf("two holders with token %d both wrote: %+v (oversold %d)", tokens[0], a, a.Oversold())
			}
		})
	}
}

type tokenSpy struct {
	g      frozenGuard
	tokens *[]int64
}

func (s tokenSpy) Enter(ctx context.Context, key string, by time.Time) (inventory.Held, error) {
	h, err := s.g.Enter(ctx, key, by)
	if err == nil {
		*s.tokens = append(*s.tokens, h.Token())
	}
	return h, err
}
