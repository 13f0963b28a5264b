package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/store"
)

// idleConnectionIDs leaves n connections idle in db's pool, each taken at
// once so that each is its own, and returns their MySQL connection ids.
func idleConnectionIDs(t *testing.T, db *sql.DB, n int) []int64 {
	t.Helper()
	ctx := context.Background()
	ids := make([]int64, n)
	held := make([]*sql.Conn, n)
	for i := range held {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held[i] = c
		if err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range held {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if idle := db.Stats().Idle; idle != n {
		t.Fatalf("%d idle connections, want %d", idle, n)
	}
	return ids
}

// poolOf opens a store whose pool holds at most n MySQL connections, and
// returns it with its database/sql pool.
func poolOf(t *testing.T, n int) (*store.DB, *sql.DB) {
	t.Helper()
	db := openPool(t, store.Pool{MaxConns: n})
	sqlDB, err := store.Gorm(db).DB()
	if err != nil {
		t.Fatal(err)
	}
	return db, sqlDB
}

// killIdle leaves n connections idle in db's pool and kills them through
// admin, a pool of its own on the same server.
func killIdle(t *testing.T, admin *store.DB, db *sql.DB, n int) {
	t.Helper()
	for _, id := range idleConnectionIDs(t, db, n) {
		if err := admin.Exec(context.Background(), fmt.Sprintf("KILL %d", id)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKilledConnectionCostsOneSale: the store does not ask the driver to
// check a pooled connection before each use (checkConnLiveness=false,
// store.go), nor checks one itself that came back within its idle window
// (idleCheckAfter, bounded.go), so after MariaDB or MySQL killed the pool's idle connections
// (KILL, a restart, a proxy's idle timeout), each fails the next sale
// that takes it, once, and is dropped. That sale's error tells the truth:
// inventory.ErrUnavailable (nothing was written) or
// inventory.ErrOutcomeUnknown, and the item's audit counts exactly the
// sales that succeeded.
func TestKilledConnectionCostsOneSale(t *testing.T) {
	// Connections back within the idle window go unchecked: here, all.
	store.SetIdleCheckAfter(t, time.Hour)
	const pool = 3
	db, sqlDB := poolOf(t, pool)
	ctx := context.Background()
	if err := db.Products().Reset(ctx, 1, 100); err != nil {
		t.Fatal(err)
	}
	killIdle(t, openPool(t, store.Pool{MaxConns: 1}), sqlDB, pool)
	sold, failed := 0, 0
	for i, ok := 0, 0; ok < 2*pool; i++ {
		err := db.Products().Deduct(ctx, order(fmt.Sprintf("killed-%d", i), fmt.Sprintf("buyer-%d", i), 1))
		if err == nil {
			sold++
			ok++
			continue
		}
		if !errors.Is(err, inventory.ErrUnavailable) && !errors.Is(err, inventory.ErrOutcomeUnknown) {
			t.Fatalf("sale %d on a killed connection: %v; want unavailable or outcome unknown", i, err)
		}
		if failed++; failed > pool {
			t.Fatalf("%d sales failed after %d pooled connections were killed; the last: %v", failed, pool, err)
		}
	}
	if failed != pool {
		t.Fatalf("%d sales failed after %d pooled connections were killed, want one each: a check of each connection before use, which the store turns off, hid them", failed, pool)
	}
	a, err := db.Products().Audit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if a.Orders != sold {
		t.Fatalf("the audit counts %d orders; %d sales succeeded", a.Orders, sold)
	}
}

// TestKilledConnectionsCostNoGroup: a group of sales (DeductAll, DeductAcross)
// carries several buyers, so its batch goes out only on a connection the
// store checked first (a non-blocking read of its socket, once a group):
// after MySQL killed every idle connection of the pool, each group is
// written on a live one, and no buyer of a group pays for a stale
// connection. Before, each killed connection failed the whole group that
// took it (109 buyers answered 503 for 94 killed connections in a burst
// on three serve).
func TestKilledConnectionsCostNoGroup(t *testing.T) {
	const pool = 3
	db, sqlDB := poolOf(t, pool)
	ctx := context.Background()
	for _, id := range []int64{1, 2} {
		if err := db.Products().Reset(ctx, id, 100); err != nil {
			t.Fatal(err)
		}
	}
	admin := openPool(t, store.Pool{MaxConns: 1})
	for round, across := range []bool{false, true} {
		killIdle(t, admin, sqlDB, pool)
		for g := range pool + 1 {
			var orders []inventory.Order
			for i := range 3 {
				item := int64(1)
				if across && i == 2 {
					item = 2
				}
				orders = append(orders, order(fmt.Sprintf("grp-%d-%d-%d", round, g, i), fmt.Sprintf("grp-buyer-%d-%d-%d", round, g, i), item))
			}
			var err error
			if across {
				err = db.Products().DeductAcross(ctx, orders)
			} else {
				err = db.Products().DeductAll(ctx, orders)
			}
			if err != nil {
				t.Fatalf("group %d (across items: %v) after the pool's %d idle connections were killed: %v; want it written on a live connection", g, across, pool, err)
			}
		}
	}
	for id, want := range map[int64]int{1: 2*(pool+1)*3 - (pool + 1), 2: pool + 1} {
		a, err := db.Products().Audit(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if a.Orders != want {
			t.Fatalf("product %d: the audit counts %d orders, want %d", id, a.Orders, want)
		}
	}
}

// TestIdleKilledConnectionsCostNoStatement: a connection that sat in the
// pool past its idle window has its socket read as the pool hands it out
// (bounded.go), so after MySQL killed the pool's idle connections, the
// statements that follow (an admin's reset, an audit, lone sales) each go
// out on a live connection and none fails. Before, each killed connection
// failed the statement that took it: a reset by hand answered 503 once per
// stale connection.
func TestIdleKilledConnectionsCostNoStatement(t *testing.T) {
	store.SetIdleCheckAfter(t, 0) // every connection handed out again is read first
	const pool = 3
	db, sqlDB := poolOf(t, pool)
	ctx := context.Background()
	admin := openPool(t, store.Pool{MaxConns: 1})
	killIdle(t, admin, sqlDB, pool)
	for i := range pool + 1 {
		if err := db.Products().Reset(ctx, 1, 100); err != nil {
			t.Fatalf("reset %d after the pool's %d idle connections were killed: %v", i, pool, err)
		}
	}
	killIdle(t, admin, sqlDB, pool)
	for i := range pool + 1 {
		if _, err := db.Products().Audit(ctx, 1); err != nil {
			t.Fatalf("audit %d after the pool's %d idle connections were killed: %v", i, pool, err)
		}
	}
	killIdle(t, admin, sqlDB, pool)
	for i := range pool + 1 {
		if err := db.Products().Deduct(ctx, order(fmt.Sprintf("idle-killed-%d", i), fmt.Sprintf("idle-buyer-%d", i), 1)); err != nil {
			t.Fatalf("sale %d after the pool's %d idle connections were killed: %v", i, pool, err)
		}
	}
	a, err := db.Products().Audit(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if a.Orders != pool+1 {
		t.Fatalf("the audit counts %d orders, want %d", a.Orders, pool+1)
	}
}

// TestIdleWindowCountsFromTheReturn: the idle window of a pooled
// connection counts from its return to the pool, not from when it was
// handed out: a connection held for longer than the window (a sale that
// waited for a row lock, a long audit) and handed out again at once is
// not read. The clock is the test's.
func TestIdleWindowCountsFromTheReturn(t *testing.T) {
	store.SetIdleCheckAfter(t, time.Second)
	var clock atomic.Int64
	checks := store.SetIdleClock(t, clock.Load)
	_, sqlDB := poolOf(t, 1)
	ctx := context.Background()
	c, err := sqlDB.Conn(ctx) // dialled at 0, handed out
	if err != nil {
		t.Fatal(err)
	}
	clock.Add(int64(5 * time.Second)) // held for 5 s
	if err := c.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil { // back in the pool at 5 s
		t.Fatal(err)
	}
	before := checks()
	if err := sqlDB.PingContext(ctx); err != nil { // handed out again at 5 s
		t.Fatal(err)
	}
	if n := checks() - before; n != 0 {
		t.Fatalf("a connection handed out again the instant it came back had its socket read %d times, want 0", n)
	}
	clock.Add(int64(2 * time.Second)) // idle for 2 s
	before = checks()
	if err := sqlDB.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	if n := checks() - before; n != 1 {
		t.Fatalf("a connection idle past its window had its socket read %d times, want 1", n)
	}
}
