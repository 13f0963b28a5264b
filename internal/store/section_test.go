package store_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// TestWriteCutOffByALostLockIsNotNothing: a lock holder's write is in
// flight on MySQL when its lease is lost. The loss cancels the section's
// context, and the buyer must not hear "lock lost, nothing was written"
// (503 lock-lost, the key let go) if the write can still land: MySQL runs
// a batch whose client hung up to its end, and a fenced write that no
// newer holder overtook commits. Either nothing was written, or the buyer
// hears that the outcome is unknown.
//
// The write is held where the hang-up counts: its INSERT waits for another
// session's uncommitted order of the same buyer; the lease is lost while
// it waits, then that session rolls back.
func TestWriteCutOffByALostLockIsNotNothing(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			dsn := testenv.MySQLDSN(t)
			ctx := context.Background()
			l := k.ledger(openMySQL(t, dsn, store.Pool{MaxConns: 2}))
			if err := l.Reset(ctx, 1, 1); err != nil {
				t.Fatal(err)
			}
			it, err := l.Get(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			admin, holder := otherSession(t, dsn)
			if _, err := holder.ExecContext(ctx, heldOrder[k.name]); err != nil {
				t.Fatal(err)
			}

			guard := &losableGuard{token: it.FenceToken + 1, lost: make(chan struct{})}
			section := inventory.NewGuarded(guard, l, k.name, inventory.SectionOptions{Fencing: true})
			no := "lock-lost-" + k.name
			bought := make(chan error, 1)
			go func() { bought <- section.Buy(ctx, order(no, "leaver", 1)) }()
			session := waitingFor(t, admin, "the write's INSERT", no)
			guard.lose()
			err = <-bought
			if err == nil {
				t.Fatal("a write cut off by the lost lock answered as a sale")
			}
			if err := holder.Rollback(); err != nil {
				t.Fatal(err)
			}
			sessionGone(t, admin, session)

			a, aerr := l.Audit(ctx, 1)
			switch {
			case aerr != nil:
				t.Fatal(aerr)
			case !a.Conserved() || a.Oversold() != 0:
				t.Fatalf("Audit = %+v; want the write all or nothing", a)
			case a.Orders == 1 && errors.Is(err, inventory.ErrLockLost):
				t.Fatalf("the order was written, and the buyer heard: %v", err)
			case a.Orders == 1 && !errors.Is(err, inventory.ErrOutcomeUnknown):
				t.Fatalf("the order was written, and the buyer heard %v; want an unknown outcome", err)
			}
			t.Logf("orders %d, the buyer heard: %v", a.Orders, err)
		})
	}
}

// TestCutOffUnfencedWriteDoesNotLandLate: local-mutex on one instance,
// which is safe there. Buyer A's write waits inside MySQL when A's
// request ends (its deadline, or the client gone); A gives the mutex up,
// and buyer B reads the stock A read and buys. Then A's write is let go.
// It must not land: it would set the stock A computed from its stale read,
// after B's, and two orders would hold one unit. An unfenced write is a
// transaction of separate statements, which MySQL rolls back when its
// client hung up before the COMMIT; sent as one batch, as a fenced write
// is, MySQL ran it to its end and committed it (a review found this).
//
// A's write is held two ways: its INSERT behind another session's
// uncommitted order of the same buyer, or its UPDATE behind another
// session's lock on the item's row (a restock, say), which B's read of the
// stock does not wait for.
func TestCutOffUnfencedWriteDoesNotLandLate(t *testing.T) {
	for _, k := range kinds {
		for _, behind := range []string{"an order of the same buyer", "a row lock"} {
			if behind == "a row lock" && k.name != "products" {
				continue // holdRow locks product 1
			}
			t.Run(k.name+"/behind "+behind, func(t *testing.T) {
				dsn := testenv.MySQLDSN(t)
				ctx := context.Background()
				l := k.ledger(openMySQL(t, dsn, store.Pool{MaxConns: 4}))
				if err := l.Reset(ctx, 1, 1); err != nil {
					t.Fatal(err)
				}
				admin, _ := otherSession(t, dsn)
				var release func() error
				var waitingA func() int64
				if behind == "a row lock" {
					row, _ := holdRow(t, dsn)
					release = row.Rollback
					waitingA = func() int64 { return lockWaiter(t, admin, 0) }
				} else {
					_, holder := otherSession(t, dsn)
					if _, err := holder.ExecContext(ctx, heldOrder[k.name]); err != nil {
						t.Fatal(err)
					}
					release = holder.Rollback
					waitingA = func() int64 { return waitingFor(t, admin, "A's INSERT", "cut-a") }
				}
				stage := inventory.NewLocalMutex(l, k.name, inventory.SectionOptions{})

				cut, hangUp := context.WithCancel(ctx)
				defer hangUp()
				boughtA := make(chan error, 1)
				go func() { boughtA <- stage.Buy(cut, order("cut-a", "leaver", 1)) }()
				sessionA := waitingA()
				hangUp()
				errA := <-boughtA
				if errA == nil {
					t.Fatal("A's buy, cut off while its write waited, answered as a sale")
				}

				boughtB := make(chan error, 1)
				go func() { boughtB <- stage.Buy(ctx, order("cut-b", "zed", 1)) }()
				if behind == "a row lock" {
					lockWaiter(t, admin, sessionA) // B's write waits for the row too
					if err := release(); err != nil {
						t.Fatal(err)
					}
				}
				if err := <-boughtB; err != nil {
					t.Fatalf("B, alone with the unit: %v", err)
				}
				if behind != "a row lock" {
					if err := release(); err != nil {
						t.Fatal(err)
					}
				}
				sessionGone(t, admin, sessionA)

				a, err := l.Audit(ctx, 1)
				switch {
				case err != nil:
					t.Fatal(err)
				case a.Orders != 1 || a.Oversold() != 0 || !a.Conserved():
					t.Fatalf("Audit = %+v (oversold %d); want B's order alone. A heard: %v", a, a.Oversold(), errA)
				}
			})
		}
	}
}

// lockWaiter returns the session of a transaction of admin's database
// (the test's own: the server is shared) that waits for a row lock, other
// than session not (0: any), once MySQL shows one.
func lockWaiter(t *testing.T, admin *sql.DB, not int64) int64 {
	t.Helper()
	var session int64
	waitServer(t, admin, "a write to wait for the held row", func(n int64) bool { session = n; return n > 0 },
		"SELECT COALESCE(MAX(t.trx_mysql_thread_id), 0) FROM information_schema.innodb_trx t JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id "+
			"WHERE t.trx_state = 'LOCK WAIT' AND p.db = DATABASE() AND t.trx_mysql_thread_id <> ?", not)
	return session
}

// TestStockWritersOutsideTheLockFenceTheHolderOff: a reset and a cancelled
// order's units coming back write the stock without the lock. One lands
// between a fenced holder's read and its write; the holder must then write
// nothing, not the stock it computed from its read over theirs. Before
// they moved the fence, a reset to 1 unit under a holder that had read 10
// left 9 units to sell (a review found it), and a unit a cancel gave back
// was erased.
func TestStockWritersOutsideTheLockFenceTheHolderOff(t *testing.T) {
	for _, b := range testenv.Backends() {
		t.Run(b.Name+"/reset", func(t *testing.T) {
			ctx := context.Background()
			l := b.Open(t).Products()
			if err := l.Reset(ctx, 1, 10); err != nil {
				t.Fatal(err)
			}
			section := inventory.NewGuarded(newTokenGuard(), l, "product", inventory.SectionOptions{Fencing: true,
				BetweenReadAndWrite: func(context.Context, inventory.Order) {
					if err := l.Reset(ctx, 1, 1); err != nil { // a fresh sale of one unit
						t.Error(err)
					}
				}})
			err := section.Buy(ctx, order("reset-a", "a", 1))
			if !errors.Is(err, inventory.ErrLockLost) {
				t.Errorf("the holder that read before the reset: %v, want ErrLockLost", err)
			}
			if a, err := l.Audit(ctx, 1); err != nil || a != (inventory.Audit{ItemID: 1, InitialStock: 1, Stock: 1}) {
				t.Fatalf("Audit = %+v, %v; want the reset's one unit, unsold", a, err)
			}
		})
		t.Run(b.Name+"/cancel", func(t *testing.T) {
			ctx := context.Background()
			l := b.Open(t).Products()
			if err := l.Reset(ctx, 1, 3); err != nil {
				t.Fatal(err)
			}
			unpaid := order("unpaid", "a", 1)
			unpaid.CreatedAt = time.Now().Add(-time.Hour).UTC()
			cancelled := false
			section := inventory.NewGuarded(newTokenGuard(), l, "product", inventory.SectionOptions{Fencing: true,
				BetweenReadAndWrite: func(_ context.Context, o inventory.Order) {
					if o.UserID != "b" {
						return
					}
					done, err := l.Cancel(ctx, unpaid, time.Now().Add(-time.Minute), "")
					if err != nil || !done {
						t.Errorf("the payment job's cancel: %v, %v", done, err)
					}
					cancelled = done
				}})
			if err := section.Buy(ctx, unpaid); err != nil {
				t.Fatal(err)
			}
			err := section.Buy(ctx, order("late-b", "b", 1))
			if !cancelled || !errors.Is(err, inventory.ErrLockLost) {
				t.Errorf("the holder that read before the cancel (cancelled %v): %v, want ErrLockLost", cancelled, err)
			}
			a, aerr := l.Audit(ctx, 1)
			if aerr != nil || !a.Conserved() || a.Stock != 3 || a.Sold != 0 {
				t.Fatalf("Audit = %+v, %v; want all 3 units back in stock, none sold", a, aerr)
			}
		})
		// The sales of the stages that take no lock the fleet shares:
		// db-atomic's guarded decrement, the batch that redis-atomic's group
		// commit and redis-stream's order writers write, and a computed
		// write without a token. They meet a holder when a
		// stage switch lands mid-sale (a workshop switches live; queued
		// orders are still written after a switch from redis-stream).
		for _, sale := range []struct {
			name string
			sell func(context.Context, *store.Ledger, inventory.Order) error
		}{
			{"db-atomic sale", func(ctx context.Context, l *store.Ledger, o inventory.Order) error { return l.Deduct(ctx, o) }},
			{"group commit", func(ctx context.Context, l *store.Ledger, o inventory.Order) error {
				return l.DeductAll(ctx, []inventory.Order{o})
			}},
			// An instance still on local-mutex (safe on one instance) while
			// another already sells under a lock: a write without a token.
			{"local-mutex sale", func(ctx context.Context, l *store.Ledger, o inventory.Order) error {
				return inventory.NewLocalMutex(l, "product", inventory.SectionOptions{}).Buy(ctx, o)
			}},
		} {
			t.Run(b.Name+"/"+sale.name, func(t *testing.T) {
				ctx := context.Background()
				l := b.Open(t).Products()
				if err := l.Reset(ctx, 1, 2); err != nil {
					t.Fatal(err)
				}
				section := inventory.NewGuarded(newTokenGuard(), l, "product", inventory.SectionOptions{Fencing: true,
					BetweenReadAndWrite: func(context.Context, inventory.Order) {
						if err := sale.sell(ctx, l, order("unlocked-b", "b", 1)); err != nil {
							t.Error(err)
						}
					}})
				err := section.Buy(ctx, order("holder-a", "a", 1))
				if !errors.Is(err, inventory.ErrLockLost) {
					t.Errorf("the holder that read before the sale: %v, want ErrLockLost", err)
				}
				a, aerr := l.Audit(ctx, 1)
				if aerr != nil || !a.Conserved() || a.Stock != 1 || a.Orders != 1 {
					t.Fatalf("Audit = %+v, %v (oversold %d); want the sale's order alone and 1 unit left", a, aerr, a.Oversold())
				}
			})
		}
	}
}

// tokenGuard is a Guard for one caller at a time that hands out a newer
// fencing token with each hold, from the clock in microseconds as the
// lock's are (so newer than any fence a reset or a cancel moved on).
type tokenGuard struct{ last atomic.Int64 }

func newTokenGuard() *tokenGuard {
	g := &tokenGuard{}
	g.last.Store(time.Now().UnixMicro())
	return g
}

func (g *tokenGuard) Enter(context.Context, string, time.Time) (inventory.Held, error) {
	return tokenHold(g.last.Add(1)), nil
}

type tokenHold int64

func (h tokenHold) Token() int64                              { return int64(h) }
func (tokenHold) Context(ctx context.Context) context.Context { return ctx }
func (tokenHold) Err() error                                  { return nil }
func (tokenHold) Exit(context.Context) error                  { return nil }

// heldOrder is another session's order of the buyer "leaver", per kind.
var heldOrder = map[string]string{
	"products": "INSERT INTO orders (order_no, product_id, user_id, quantity, stage) VALUES ('held', 1, 'leaver', 1, 'test')",
	"coupons":  "INSERT INTO coupon_grabs (grab_no, batch_id, user_id, quantity, stage) VALUES ('held', 1, 'leaver', 1, 'test')",
}

// losableGuard grants one hold with the given fencing token, whose context
// ends, and whose Err turns to inventory.ErrLockLost, once lose is called:
// a lease lost while its holder works.
type losableGuard struct {
	token int64
	lost  chan struct{}
	once  sync.Once
}

func (g *losableGuard) lose() { g.once.Do(func() { close(g.lost) }) }

func (g *losableGuard) Enter(context.Context, string, time.Time) (inventory.Held, error) {
	return losableHold{g}, nil
}

type losableHold struct{ g *losableGuard }

func (h losableHold) Token() int64 { return h.g.token }

func (h losableHold) Context(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		defer cancel()
		select {
		case <-h.g.lost:
		case <-ctx.Done():
		}
	}()
	return ctx
}

func (h losableHold) Err() error {
	select {
	case <-h.g.lost:
		return fmt.Errorf("test lease: %w", inventory.ErrLockLost)
	default:
		return nil
	}
}

func (losableHold) Exit(context.Context) error { return nil }

// TestCommitInFlightKeepsTheGuard: local-mutex on one instance, which is
// safe there. Buyer A's write has sent everything but its COMMIT when A's
// request ends; the COMMIT goes on in the background and may still land
// (MySQL has all of A's statements, and A's answer is "outcome unknown").
// Until it has, the guard must stay taken: a buyer B who got it would read
// the stock A read (A's transaction is not committed), and B's write would
// follow A's late COMMIT, two orders for one unit. A review found this on
// the code before: the section gave the guard up as A's request ended.
//
// A's COMMIT is held in the client's dialer until the test lets it go. The
// guard is the test's own one-slot mutex, so the test can see whether it
// is taken and whether B is waiting for it.
func TestCommitInFlightKeepsTheGuard(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			db, commit := commitHoldingMySQL(t)
			l := k.ledger(db)
			if err := l.Reset(ctx, 1, 1); err != nil {
				t.Fatal(err)
			}
			guard := &probedMutex{slot: make(chan struct{}, 1), waiting: make(chan struct{}, 1)}
			readB := make(chan struct{})
			section := inventory.NewGuarded(guard, l, k.name, inventory.SectionOptions{
				BetweenReadAndWrite: func(_ context.Context, o inventory.Order) {
					if o.No == "late-b" {
						close(readB)
					}
				},
			})

			cut, hangUp := context.WithCancel(ctx)
			defer hangUp()
			commit.arm()
			boughtA := make(chan error, 1)
			go func() { boughtA <- section.Buy(cut, order("late-a", "leaver", 1)) }()
			<-commit.held
			hangUp()
			errA := <-boughtA
			if !errors.Is(errA, inventory.ErrOutcomeUnknown) {
				t.Fatalf("A, cut off with its COMMIT on the way, heard %v; want an unknown outcome", errA)
			}
			if len(guard.slot) == 0 {
				t.Errorf("the guard was given up while A's COMMIT was still on its way")
			}

			// B comes. It either waits for the guard or, on the code
			// before, reads the unit A is about to take; then A's COMMIT
			// goes through.
			boughtB := make(chan error, 1)
			go func() { boughtB <- section.Buy(ctx, order("late-b", "zed", 1)) }()
			select {
			case <-guard.waiting:
			case <-readB:
			}
			commit.release()
			errB := <-boughtB

			a, err := l.Audit(ctx, 1)
			switch {
			case err != nil:
				t.Fatal(err)
			case a.Oversold() != 0 || !a.Conserved() || a.Orders != 1:
				t.Fatalf("Audit = %+v (oversold %d); want A's order alone. B heard: %v", a, a.Oversold(), errB)
			case !errors.Is(errB, inventory.ErrSoldOut):
				t.Fatalf("B, after A's COMMIT landed, heard %v; want sold out", errB)
			}
		})
	}
}

// probedMutex is a Guard with one slot, whose tests can see it taken
// (len(slot) == 1) and hear, on waiting, that a buyer found it taken.
type probedMutex struct {
	slot    chan struct{}
	waiting chan struct{}
}

func (m *probedMutex) Enter(ctx context.Context, _ string, _ time.Time) (inventory.Held, error) {
	if len(m.slot) == 1 {
		select {
		case m.waiting <- struct{}{}:
		default:
		}
	}
	select {
	case m.slot <- struct{}{}:
		return probedHold{m}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type probedHold struct{ m *probedMutex }

func (probedHold) Token() int64                                { return 0 }
func (probedHold) Context(ctx context.Context) context.Context { return ctx }
func (probedHold) Err() error                                  { return nil }
func (h probedHold) Exit(context.Context) error {
	<-h.m.slot
	return nil
}

// commitHolder holds, once armed, the next COMMIT a connection sends, in
// the client, until release.
type commitHolder struct {
	armed    atomic.Bool
	held     chan struct{} // closed when a COMMIT is being held
	let      chan struct{} // closed by release
	released sync.Once
}

func (h *commitHolder) arm()     { h.armed.Store(true) }
func (h *commitHolder) release() { h.released.Do(func() { close(h.let) }) }

// commitPacket is the driver's COMMIT as it writes it: a 7-byte payload,
// sequence 0, COM_QUERY (3) and the statement.
var commitPacket = []byte("\x07\x00\x00\x00\x03COMMIT")

type commitHoldingConn struct {
	net.Conn
	h *commitHolder
}

func (c *commitHoldingConn) Write(b []byte) (int, error) {
	if bytes.Equal(b, commitPacket) && c.h.armed.CompareAndSwap(true, false) {
		close(c.h.held)
		<-c.h.let
	}
	return c.Conn.Write(b)
}

// commitHoldingMySQL opens a fresh test database through a dialer whose
// connections hold a COMMIT when the returned holder is armed. The held
// COMMIT is let go when the test ends, at the latest.
func commitHoldingMySQL(t *testing.T) (*store.DB, *commitHolder) {
	t.Helper()
	cfg, err := mysqldriver.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Net != "tcp" {
		t.Fatalf("the test MySQL is reached over %q; the holding dialer wraps tcp", cfg.Net)
	}
	h := &commitHolder{held: make(chan struct{}), let: make(chan struct{})}
	cfg.Net = fmt.Sprintf("seckill-commit-holding-%d", countedNets.Add(1))
	mysqldriver.RegisterDialContext(cfg.Net, func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &commitHoldingConn{Conn: c, h: h}, nil
	})
	db := openMySQL(t, cfg.FormatDSN(), store.Pool{MaxConns: 4})
	t.Cleanup(h.release) // before the database closes: cleanups run last first
	return db, h
}
