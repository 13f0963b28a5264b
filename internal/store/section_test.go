package store_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

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
			db, commit := commitHoldingMySQL(t, testenv.MySQLDSN(t))
			l := k.ledger(db)
			if err := l.Reset(ctx, 1, 1); err != nil {
				t.Fatal(err)
			}
			sc := newLateCommitScene(l, k.name)
			guard, section := sc.guard, sc.section

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

			sc.thenB(t, l, commit.release)
		})
	}
}

// lateCommitScene is a section under a probedMutex, for a buyer A whose
// COMMIT is still on its way and a buyer B ("late-b") who says when it has
// read the stock.
type lateCommitScene struct {
	guard   *probedMutex
	section inventory.Stage
	readB   chan struct{}
}

func newLateCommitScene(l *store.Ledger, kind string) *lateCommitScene {
	sc := &lateCommitScene{guard: &probedMutex{slot: make(chan struct{}, 1), waiting: make(chan struct{}, 1)}, readB: make(chan struct{})}
	sc.section = inventory.NewGuarded(sc.guard, l, kind, inventory.SectionOptions{
		BetweenReadAndWrite: func(_ context.Context, o inventory.Order) {
			if o.No == "late-b" {
				close(sc.readB)
			}
		},
	})
	return sc
}

// thenB sends B, which either waits for the guard or, on the code before,
// reads the unit A is about to take; then lets A's COMMIT go through
// (land), and checks that A's order alone was written and B heard sold
// out.
func (sc *lateCommitScene) thenB(t *testing.T, l *store.Ledger, land func()) {
	t.Helper()
	ctx := context.Background()
	boughtB := make(chan error, 1)
	go func() { boughtB <- sc.section.Buy(ctx, order("late-b", "zed", 1)) }()
	select {
	case <-sc.guard.waiting:
	case <-sc.readB:
	}
	land()
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

// commitHoldingMySQL opens the test database at dsn through a dialer whose
// connections hold a COMMIT when the returned holder is armed. The held
// COMMIT is let go when the test ends, at the latest.
func commitHoldingMySQL(t *testing.T, dsn string) (*store.DB, *commitHolder) {
	t.Helper()
	h := &commitHolder{held: make(chan struct{}), let: make(chan struct{})}
	db := mysqlThrough(t, dsn, "commit-holding", store.Pool{MaxConns: 4},
		func(c net.Conn) net.Conn { return &commitHoldingConn{Conn: c, h: h} })
	t.Cleanup(h.release) // before the database closes: cleanups run last first
	return db, h
}

// TestBrokenCommitKeepsTheGuard: as TestCommitInFlightKeepsTheGuard, but
// A's connection breaks for the client once its COMMIT is on its way (in
// a socket buffer, a proxy, a server waiting for its log), with no
// deadline involved; or A's deadline passes first and the connection
// breaks after. Either way the client's COMMIT call returns while MySQL
// can still commit, and the guard must stay taken until it has committed
// or rolled back. A review found both: the first gave the guard up as A's
// buy returned, the second as A's COMMIT call did.
func TestBrokenCommitKeepsTheGuard(t *testing.T) {
	for _, cutFirst := range []bool{false, true} {
		name := "broken"
		if cutFirst {
			name = "cut by the deadline, then broken"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			dsn := testenv.MySQLDSN(t)
			db, brk := commitBreakingMySQL(t, dsn)
			l := db.Products()
			if err := l.Reset(ctx, 1, 1); err != nil {
				t.Fatal(err)
			}
			admin, _ := otherSession(t, dsn)
			sc := newLateCommitScene(l, "product")
			guard, section := sc.guard, sc.section

			cut, hangUp := context.WithCancel(ctx)
			defer hangUp()
			brk.arm()
			boughtA := make(chan error, 1)
			if !cutFirst {
				close(brk.cut) // the client hears of the break at once
			}
			go func() { boughtA <- section.Buy(cut, order("broken-a", "leaver", 1)) }()
			<-brk.held
			if cutFirst {
				hangUp()
			}
			errA := <-boughtA
			if !errors.Is(errA, inventory.ErrOutcomeUnknown) {
				t.Fatalf("A, whose COMMIT was on its way, heard %v; want an unknown outcome", errA)
			}
			if cutFirst {
				close(brk.cut) // now A's COMMIT call returns, broken
				// Wait until the guard is given up (the code before) or
				// the wait for A's transaction shows in MySQL (a locking
				// read of the row, behind A's lock). Slower than MySQL
				// refreshes INNODB_TRX (see waitServer), for 30 s at most.
				end := time.Now().Add(30 * time.Second)
				for released := false; !released; time.Sleep(150 * time.Millisecond) {
					if time.Now().After(end) {
						t.Fatal("waited 30 s for the guard to be given up or a locking read of the row to wait")
					}
					if len(guard.slot) == 0 {
						t.Fatal("the guard was given up when A's COMMIT call returned, with the COMMIT still on its way")
					}
					released = rowWaiter(t, admin) > 0
				}
			} else if len(guard.slot) == 0 {
				t.Error("the guard was given up as A's buy returned, with its COMMIT still on its way")
			}

			sc.thenB(t, l, func() { brk.land(t) })
		})
	}
}

// rowWaiter is lockWaiter's one look: the session of a transaction of
// admin's database that waits for a row lock, or 0.
func rowWaiter(t *testing.T, admin *sql.DB) int64 {
	t.Helper()
	var session int64
	err := admin.QueryRow("SELECT COALESCE(MAX(t.trx_mysql_thread_id), 0) FROM information_schema.innodb_trx t JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id " +
		"WHERE t.trx_state = 'LOCK WAIT' AND p.db = DATABASE()").Scan(&session)
	if err != nil {
		t.Fatal(err)
	}
	return session
}

// commitBreaker, once armed, keeps the next COMMIT a connection writes
// and breaks that connection for the client: its reads fail with
// ECONNRESET once cut is closed, and what it writes after is dropped. land
// then sends the COMMIT to MySQL on the real connection, reads MySQL's
// answer and closes it: a COMMIT that was on its way when the client's
// connection broke.
type commitBreaker struct {
	armed  atomic.Bool
	held   chan struct{} // closed when a COMMIT was kept
	cut    chan struct{} // closed: the client's reads fail
	mu     sync.Mutex
	conn   net.Conn // the real connection of the kept COMMIT
	landed bool
}

func (b *commitBreaker) arm() { b.armed.Store(true) }

type commitBreakingConn struct {
	net.Conn
	b      *commitBreaker
	broken atomic.Bool
}

func (c *commitBreakingConn) Write(p []byte) (int, error) {
	if c.broken.Load() {
		return len(p), nil // a COM_QUIT, say: lost with the connection
	}
	if bytes.Equal(p, commitPacket) && c.b.armed.CompareAndSwap(true, false) {
		c.b.mu.Lock()
		c.b.conn = c.Conn
		c.b.mu.Unlock()
		c.broken.Store(true)
		close(c.b.held)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *commitBreakingConn) Read(p []byte) (int, error) {
	if c.broken.Load() {
		<-c.b.cut
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	return c.Conn.Read(p)
}

func (c *commitBreakingConn) Close() error {
	if c.broken.Load() {
		return nil // land closes the real connection
	}
	return c.Conn.Close()
}

// land sends the kept COMMIT and returns once MySQL answered it OK.
func (b *commitBreaker) land(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn == nil || b.landed {
		t.Fatal("no COMMIT is kept")
	}
	b.landed = true
	defer b.conn.Close()
	if _, err := b.conn.Write(commitPacket); err != nil {
		t.Fatalf("sending the kept COMMIT: %v", err)
	}
	var head [4]byte
	if _, err := io.ReadFull(b.conn, head[:]); err != nil {
		t.Fatalf("reading the COMMIT's answer: %v", err)
	}
	body := make([]byte, int(head[0])|int(head[1])<<8|int(head[2])<<16)
	if _, err := io.ReadFull(b.conn, body); err != nil || len(body) == 0 || body[0] != 0 {
		t.Fatalf("the COMMIT's answer: %x, %v; want an OK packet", body, err)
	}
}

// commitBreakingMySQL opens a fresh test database on dsn through a dialer
// whose connections keep a COMMIT and break when the returned breaker is
// armed. A kept COMMIT that the test did not land is dropped with its
// connection when the test ends, which MySQL rolls back.
func commitBreakingMySQL(t *testing.T, dsn string) (*store.DB, *commitBreaker) {
	t.Helper()
	b := &commitBreaker{held: make(chan struct{}), cut: make(chan struct{})}
	db := mysqlThrough(t, dsn, "commit-breaking", store.Pool{MaxConns: 4},
		func(c net.Conn) net.Conn { return &commitBreakingConn{Conn: c, b: b} })
	t.Cleanup(func() { // before the database closes: cleanups run last first
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.conn != nil && !b.landed {
			_ = b.conn.Close()
		}
		select {
		case <-b.cut:
		default:
			close(b.cut)
		}
	})
	return db, b
}

// TestCloseEndsTheWaitForALateCommit: a computed write's COMMIT is still
// on its way, and its Unsettled waits, with a locking read of the item's
// row, for the transaction to end. Closing the database ends that wait
// (the goroutine and its connection) at once: before, it went on until
// the server's lock wait timed out (50 s by default), long after Close had
// returned (a review found it). MySQL itself notices the dropped
// connection only when that wait ends, so the read's session is still
// waiting there when Settled closes: that is what tells the two apart.
func TestCloseEndsTheWaitForALateCommit(t *testing.T) {
	ctx := context.Background()
	dsn := testenv.MySQLDSN(t)
	db, commit := commitHoldingMySQL(t, dsn)
	l := db.Products()
	if err := l.Reset(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	admin, _ := otherSession(t, dsn)
	cut, hangUp := context.WithCancel(ctx)
	defer hangUp()
	commit.arm()
	wrote := make(chan error, 1)
	go func() { wrote <- l.WriteComputed(cut, order("close-a", "a", 1), 0, 0) }()
	<-commit.held
	hangUp()
	var u *inventory.Unsettled
	if err := <-wrote; !errors.As(err, &u) {
		t.Fatalf("a write cut off with its COMMIT on the way: %v; want an Unsettled", err)
	}
	probe := lockWaiter(t, admin, 0) // the locking read, behind A's row lock
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	<-u.Settled()
	time.Sleep(150 * time.Millisecond) // past MySQL's INNODB_TRX cache (see waitServer)
	if rowWaiter(t, admin) != probe {
		t.Fatal("Settled closed only once MySQL's lock wait had ended, not when the database was closed")
	}
}
