package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
)

// sentConn counts the packets a MySQL client writes. The driver writes each
// command (a query, a prepare, an execute, a COMMIT) in one Write, so the
// count is the commands sent, and every one but a statement close waits for
// the server's answer.
type sentConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c *sentConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

var countedNets atomic.Int64

// countedMySQL opens a fresh test database through a dialer that counts the
// commands sent on its connections.
func countedMySQL(t *testing.T, pool store.Pool) (*store.DB, *atomic.Int64) {
	t.Helper()
	writes := new(atomic.Int64)
	db := mysqlThrough(t, testenv.MySQLDSN(t), "counted", pool,
		func(c net.Conn) net.Conn { return &sentConn{Conn: c, writes: writes} })
	return db, writes
}

// mysqlThrough opens the MySQL database at dsn with the store's settings
// and pool, migrated, through a dialer (named after what) that wraps each
// connection it makes with wrap.
func mysqlThrough(t *testing.T, dsn, what string, pool store.Pool, wrap func(net.Conn) net.Conn) *store.DB {
	t.Helper()
	cfg, err := mysqldriver.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Net != "tcp" {
		t.Fatalf("the test MySQL is reached over %q; the %s dialer wraps tcp", cfg.Net, what)
	}
	cfg.Net = fmt.Sprintf("seckill-%s-%d", what, countedNets.Add(1))
	mysqldriver.RegisterDialContext(cfg.Net, func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return wrap(c), nil
	})
	return openMySQL(t, cfg.FormatDSN(), pool)
}

// openMySQL opens the MySQL database at dsn with the store's settings and
// pool, migrated, and closes it when the test ends.
func openMySQL(t *testing.T, dsn string, pool store.Pool) *store.DB {
	t.Helper()
	ctx := context.Background()
	db, err := store.OpenMySQL(ctx, dsn, pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := db.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return db
}

// otherSession opens a pool of its own on dsn, as another buyer's would,
// and a transaction on it; both end with the test (the transaction rolled
// back, if not committed before).
func otherSession(t *testing.T, dsn string) (*sql.DB, *sql.Tx) {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() }) // ErrTxDone after a Commit
	return db, tx
}

// holdRow locks product 1's row from a session of its own, as another
// buyer's transaction would, and returns that transaction (rolled back when
// the test ends, if not committed before) and the stock it read.
func holdRow(t *testing.T, dsn string) (*sql.Tx, int) {
	t.Helper()
	_, tx := otherSession(t, dsn)
	var stock int
	if err := tx.QueryRow("SELECT stock FROM products WHERE id = 1 FOR UPDATE").Scan(&stock); err != nil {
		t.Fatal(err)
	}
	return tx, stock
}

// TestSaleIsOneRoundTrip: on MySQL, a sale (Deduct, and DeductAll of many
// orders) sends one command and waits for one answer, whatever the
// outcome; the transaction of separate statements sent eight (four with
// interpolated arguments), with the row locked across the last of them.
func TestSaleIsOneRoundTrip(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			db, writes := countedMySQL(t, store.Pool{MaxConns: 1})
			l := k.ledger(db)
			if err := l.Reset(ctx, 1, 6); err != nil {
				t.Fatal(err)
			}
			group := func(prefix string, n int) []inventory.Order {
				var out []inventory.Order
				for i := range n {
					out = append(out, order(fmt.Sprintf("%s-%d", prefix, i), fmt.Sprintf("%s%d", prefix, i), 1))
				}
				return out
			}
			steps := []struct {
				name string
				run  func() error
				want error
			}{
				{"Deduct", func() error { return l.Deduct(ctx, order("one", "one", 1)) }, nil},
				{"DeductAll of 5", func() error { return l.DeductAll(ctx, group("five", 5)) }, nil},
				{"Deduct when sold out", func() error { return l.Deduct(ctx, order("late", "late", 1)) }, inventory.ErrSoldOut},
			}
			for _, s := range steps {
				before := writes.Load()
				err := s.run()
				sent := writes.Load() - before
				if !errors.Is(err, s.want) || (s.want == nil && err != nil) {
					t.Fatalf("%s: %v, want %v", s.name, err, s.want)
				}
				// A refusal reads the stock after, to tell sold out from
				// no such item: one more.
				want := int64(1)
				if s.want != nil {
					want = 2
				}
				if sent != want {
					t.Errorf("%s sent %d commands to MySQL, want %d", s.name, sent, want)
				}
			}
			a, err := l.Audit(ctx, 1)
			if err != nil || a.Stock != 0 || a.Orders != 6 || !a.Conserved() {
				t.Fatalf("Audit = %+v, %v; want all 6 sold in 6 orders", a, err)
			}
		})
	}
}

// TestSaleCutOffByItsDeadline: a sale whose deadline passes while another
// session holds the item's row returns the deadline's error, not a
// verdict. Whether MySQL still ran the rest of the batch once the row was
// free, the sale is all or nothing (the audit is conserved), and the pool
// goes on selling.
func TestSaleCutOffByItsDeadline(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	ctx := context.Background()
	l := openMySQL(t, dsn, store.Pool{MaxConns: 2}).Products()
	if err := l.Reset(ctx, 1, 10); err != nil {
		t.Fatal(err)
	}
	tx, _ := holdRow(t, dsn)

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := l.Deduct(short, order("cut-1", "cut", 1)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a sale past its deadline on a locked row: %v, want the deadline's error", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := l.Deduct(ctx, order("after-1", "after", 1)); err != nil {
		t.Fatalf("the next sale on the same pool: %v", err)
	}
	a, err := l.Audit(ctx, 1)
	if err != nil || !a.Conserved() || a.Orders < 1 || a.Orders > 2 || a.Sold != a.Orders {
		t.Fatalf("Audit = %+v, %v; want the cut-off sale all or nothing, and the next one written", a, err)
	}
}

// TestSaleThatNeverLeftHasAKnownOutcome: a sale whose deadline passed
// before it had a connection sent MySQL nothing, so its outcome is known:
// the deadline's error, not inventory.ErrOutcomeUnknown, which says that
// the write was sent and its answer lost.
func TestSaleThatNeverLeftHasAKnownOutcome(t *testing.T) {
	ctx := context.Background()
	db, writes := countedMySQL(t, store.Pool{MaxConns: 1})
	l := db.Products()
	if err := l.Reset(ctx, 1, 5); err != nil {
		t.Fatal(err)
	}
	late, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	before := writes.Load()
	err := l.Deduct(late, order("late-1", "late", 1))
	switch {
	case !errors.Is(err, context.DeadlineExceeded):
		t.Fatalf("a sale past its deadline before it began: %v, want the deadline's error", err)
	case errors.Is(err, inventory.ErrOutcomeUnknown):
		t.Fatalf("a sale that sent nothing (%d commands) is said to have an unknown outcome: %v", writes.Load()-before, err)
	}
	if sent := writes.Load() - before; sent != 0 {
		t.Fatalf("a sale past its deadline sent %d commands", sent)
	}
	if a, err := l.Audit(ctx, 1); err != nil || a.Orders != 0 || a.Stock != 5 {
		t.Fatalf("Audit = %+v, %v; want nothing written", a, err)
	}
}

// TestSaleWhoseBuyerLeftWhileItWaited: a buyer who hangs up while the sale
// waits inside MySQL, here its INSERT behind another session's uncommitted
// order of the same buyer, leaves MySQL to run the rest of the batch with
// nobody listening. The sale must still be all or nothing: an item sold out
// gets no order, and a unit that was there leaves the stock with its order,
// or stays. (MariaDB 10.11 answers ROW_COUNT() with -1 in a batch whose
// client has gone; a batch that read it kept its orders and committed them
// without their units, which oversold db-atomic under wrk.)
func TestSaleWhoseBuyerLeftWhileItWaited(t *testing.T) {
	for _, k := range kinds {
		for _, stock := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s/stock=%d", k.name, stock), func(t *testing.T) {
				dsn := testenv.MySQLDSN(t)
				ctx := context.Background()
				l := k.ledger(openMySQL(t, dsn, store.Pool{MaxConns: 2}))
				if err := l.Reset(ctx, 1, stock); err != nil {
					t.Fatal(err)
				}
				admin, holder := otherSession(t, dsn)
				if _, err := holder.ExecContext(ctx, heldOrder[k.name]); err != nil {
					t.Fatal(err)
				}

				no := fmt.Sprintf("leaver-%s-%d", k.name, stock)
				cut, hangUp := context.WithCancel(ctx)
				defer hangUp()
				sold := make(chan error, 1)
				go func() { sold <- l.Deduct(cut, order(no, "leaver", 1)) }()
				session := waitingFor(t, admin, "the sale's INSERT", no)
				hangUp()
				if err := <-sold; !errors.Is(err, context.Canceled) {
					t.Fatalf("a sale whose buyer hung up: %v, want the context's error", err)
				}
				if err := holder.Rollback(); err != nil {
					t.Fatal(err)
				}
				// MySQL runs the rest of the batch, then finds the client
				// gone and ends the session.
				sessionGone(t, admin, session)

				a, err := l.Audit(ctx, 1)
				switch {
				case err != nil:
					t.Fatal(err)
				case !a.Conserved() || a.Stock < 0 || a.Orders != stock-a.Stock:
					t.Fatalf("Audit = %+v; want the sale all or nothing (stock %d)", a, stock)
				}
			})
		}
	}
}

// TestSalesCutOffAtRandomStayConserved: a crowd of buyers, many hanging up
// at random moments of their sale (some before it reaches MySQL, some while
// it waits for the row or for another session's order of the same buyer),
// singly and in batches of three. Whatever each buyer heard, the stock and
// the orders agree after every round. Before sales read their outcome from
// the row's mark, the first or second round of this test oversold.
func TestSalesCutOffAtRandomStayConserved(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	ctx := context.Background()
	l := openMySQL(t, dsn, store.Pool{MaxConns: 16}).Products()
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	const rounds, buyers, stock = 8, 240, 20
	for r := range rounds {
		if err := l.Reset(ctx, 1, stock); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range buyers {
			wg.Go(func() {
				// Up to 20 ms: most sales of a round are cut somewhere.
				cut, cancel := context.WithTimeout(ctx, time.Duration(rand.IntN(20_000))*time.Microsecond)
				defer cancel()
				// Buyers repeat (80 names for 240 buys), so INSERTs wait on
				// each other's uncommitted orders.
				o := func(j int) inventory.Order {
					return order(fmt.Sprintf("r%d-b%d-%d", r, i, j), fmt.Sprintf("u%d", rand.IntN(80)), 1)
				}
				if i%4 == 0 {
					_ = l.DeductAll(cut, []inventory.Order{o(0), o(1), o(2)})
				} else {
					_ = l.DeductInWindow(cut, o(0))
				}
			})
		}
		wg.Wait()
		// A batch whose buyer left may still run in MySQL: wait for it.
		waitServer(t, admin, "MySQL to finish the batches nobody waits for", func(n int64) bool { return n == 0 },
			"SELECT COUNT(*) FROM information_schema.processlist WHERE db = DATABASE() AND command = 'Query' AND id <> CONNECTION_ID()")
		a, err := l.Audit(ctx, 1)
		if err != nil || !a.Conserved() || a.Stock < 0 {
			t.Fatalf("round %d: Audit = %+v, %v; want the stock and the orders to agree", r, a, err)
		}
	}
}

// waitingFor returns the session of a statement of admin's database that
// waits for a row lock and names order no (what names it), once MySQL
// shows it waiting.
// INNODB_TRX is a cache that MySQL refreshes only when it was not read for
// 0.1 s: waitServer polls slower.
func waitingFor(t *testing.T, admin *sql.DB, what, no string) int64 {
	t.Helper()
	var session int64
	waitServer(t, admin, what+" to wait for the held order", func(n int64) bool { session = n; return n > 0 },
		"SELECT COALESCE(MAX(t.trx_mysql_thread_id), 0) FROM information_schema.innodb_trx t JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id "+
			"WHERE t.trx_state = 'LOCK WAIT' AND p.db = DATABASE() AND t.trx_query LIKE ?", "%'"+no+"'%")
	return session
}

// sessionGone waits until MySQL ended the session: it ran the rest of a
// batch whose client hung up, then found the client gone.
func sessionGone(t *testing.T, admin *sql.DB, session int64) {
	t.Helper()
	waitServer(t, admin, "MySQL to finish the batch nobody waits for", func(n int64) bool { return n == 0 },
		"SELECT COUNT(*) FROM information_schema.processlist WHERE id = ?", session)
}

// waitServer polls query, which reads one integer, on db until done holds
// for it, for at most 30 s, and fails the test with what it waited for if
// it never does. It polls every 150 ms, slower than MySQL refreshes its
// INNODB_TRX cache.
func waitServer(t *testing.T, db *sql.DB, what string, done func(int64) bool, query string, args ...any) {
	t.Helper()
	var got int64
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(150 * time.Millisecond) {
		if err := db.QueryRow(query, args...).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if done(got) {
			return
		}
	}
	t.Fatalf("waited 30 s for %s: %s reads %d", what, query, got)
}

// TestSaleArgumentsAreData: the driver fills a sale batch's arguments in
// itself, so a buyer's words must arrive as data, whatever they hold:
// quotes, backslashes, semicolons and statements, on a server that treats
// a backslash as an escape and on one that does not (NO_BACKSLASH_ESCAPES).
// Each order reads back exactly as sent, and nothing else ran.
func TestSaleArgumentsAreData(t *testing.T) {
	users := []string{
		`o'brien`,
		`back\slash\`,
		`x'; DROP TABLE orders; --`,
		`"; UPDATE products SET stock = 999; #`,
		`\'; DELETE FROM orders; /*`,
		"née 秒杀 \u00a0tab\there",
		`?`, `@seckill_sold`,
	}
	for _, mode := range []string{"", "NO_BACKSLASH_ESCAPES"} {
		t.Run("sql_mode="+mode, func(t *testing.T) {
			dsn := testenv.MySQLDSN(t)
			if mode != "" {
				cfg, err := mysqldriver.ParseDSN(dsn)
				if err != nil {
					t.Fatal(err)
				}
				if cfg.Params == nil {
					cfg.Params = map[string]string{}
				}
				cfg.Params["sql_mode"] = "'STRICT_TRANS_TABLES," + mode + "'"
				dsn = cfg.FormatDSN()
			}
			ctx := context.Background()
			db := openMySQL(t, dsn, store.Pool{})
			var got string
			if err := db.Raw(ctx, "SELECT @@SESSION.sql_mode").Scan(&got); err != nil || !strings.Contains(got, mode) {
				t.Fatalf("session sql_mode %q, %v; want it to hold %q", got, err, mode)
			}
			l := db.Products()
			if err := l.Reset(ctx, 1, len(users)); err != nil {
				t.Fatal(err)
			}
			var group []inventory.Order
			for i, u := range users {
				o := order(fmt.Sprintf("q-%d", i), u, 1)
				o.Instance = u
				if i%2 == 0 {
					if err := l.Deduct(ctx, o); err != nil {
						t.Fatalf("Deduct for %q: %v", u, err)
					}
				} else {
					group = append(group, o)
				}
			}
			if err := l.DeductAll(ctx, group); err != nil {
				t.Fatalf("DeductAll: %v", err)
			}
			for i, u := range users {
				o, err := l.OrderOf(ctx, 1, u)
				if err != nil || o.UserID != u || o.Instance != u || o.No != fmt.Sprintf("q-%d", i) {
					t.Errorf("the order of %q reads back as %+v, %v", u, o, err)
				}
			}
			a, err := l.Audit(ctx, 1)
			if err != nil || a.Stock != 0 || a.Orders != len(users) || !a.Conserved() {
				t.Fatalf("Audit = %+v, %v; want %d orders and nothing else changed", a, err, len(users))
			}
		})
	}
}
