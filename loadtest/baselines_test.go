package main

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/store"
	"github.com/seckill-lab/seckill/internal/testenv"
	"github.com/seckill-lab/seckill/loadtest/hotrow"
	"github.com/seckill-lab/seckill/loadtest/results"
	"github.com/seckill-lab/seckill/loadtest/scenario"
	"github.com/seckill-lab/seckill/loadtest/verdict"
)

// migratedMySQL is a fresh MySQL database with the service's schema, opened
// as the lab opens SECKILL_MYSQL_DSN, closed when the test ends.
func migratedMySQL(t *testing.T) *sql.DB {
	t.Helper()
	dsn := testenv.MySQLDSN(t)
	ctx := context.Background()
	sdb, err := store.OpenMySQL(ctx, dsn, store.Pool{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := sdb.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sdb.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := verdict.OpenMySQL(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestRawHotRowSellsEveryUnitAndCleansUp: the raw loop commits one sale per
// buyer on a scratch product, and leaves neither the product nor its orders
// behind.
func TestRawHotRowSellsEveryUnitAndCleansUp(t *testing.T) {
	ctx := context.Background()
	db := migratedMySQL(t)
	var products, orders int
	count := func() {
		t.Helper()
		if err := db.QueryRowContext(ctx, "SELECT (SELECT COUNT(*) FROM products), (SELECT COUNT(*) FROM orders)").Scan(&products, &orders); err != nil {
			t.Fatal(err)
		}
	}
	count()
	before := products
	b := hotrow.Run(ctx, db, hotrow.Redis{}, 8, 200)
	if b.OK != 200 || b.Requests != 200 || b.PerSecond <= 0 || b.Note != "" {
		t.Fatalf("raw loop: %+v, want 200 sales", b)
	}
	count()
	if products != before || orders != 0 {
		t.Fatalf("the raw loop left %d products (had %d) and %d orders behind", products, before, orders)
	}
}

// TestRawHotRowLeavesNoRedisKeysOfItsScratchProduct: while the scratch
// product exists the fleet makes keys for it (the reconcile job loads its
// Redis copy and buckets; a restock gives it an epoch). They are made
// here, under the names the fleet gives them, for the id the scratch
// product gets next. After the raw loop none is left, on the Redis the
// lab is told the instances use, and the keys of other products (one
// whose id starts with the scratch one's among them) are untouched.
func TestRawHotRowLeavesNoRedisKeysOfItsScratchProduct(t *testing.T) {
	ctx := context.Background()
	db := migratedMySQL(t)
	res, err := db.ExecContext(ctx, "INSERT INTO products (name, initial_stock, stock) VALUES ('before the scratch one', 0, 0)")
	if err != nil {
		t.Fatal(err)
	}
	last, err := res.LastInsertId()
	if err != nil {
		t.Fatal(err)
	}
	scratch, other := last+1, (last+1)*10 // the next id; one that starts with it
	r := testenv.StartRedis(t)
	rdb := r.Client()
	keysOf := func(id int64) []string {
		n := strconv.FormatInt(id, 10)
		return []string{"seckill:{product:" + n + "}:stock", "seckill:{product:" + n + "}:pending", "seckill:{product:" + n + "}:buyers",
			"seckill:{product:" + n + ":b0}:stock", "seckill:{product:" + n + ":b1}:stock", "seckill:epoch:{product:" + n + "}"}
	}
	count := func(id int64) int64 {
		t.Helper()
		n, err := rdb.Exists(ctx, keysOf(id)...).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, id := range []int64{scratch, other, last} {
		for _, k := range keysOf(id) {
			if err := rdb.Set(ctx, k, "1", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := count(scratch); n != 6 {
		t.Fatalf("%d keys of the scratch product before the loop, want 6", n)
	}
	b := hotrow.Run(ctx, db, hotrow.Redis{Addrs: []string{r.Addr}, Timeout: 5 * time.Second}, 4, 20)
	if b.OK != 20 || b.Note != "" {
		t.Fatalf("raw loop: %+v, want 20 sales", b)
	}
	var got int64
	if err := db.QueryRowContext(ctx, "SELECT COALESCE(MAX(id), 0) FROM products").Scan(&got); err != nil || got != last {
		t.Fatalf("the scratch product was not %d, or is still there (max id %d, %v)", scratch, got, err)
	}
	if n := count(scratch); n != 0 {
		t.Errorf("%d Redis keys of the scratch product %d are left after the raw loop; want none", n, scratch)
	}
	if n, m := count(other), count(last); n != 6 || m != 6 {
		t.Errorf("keys of other products: %d of product %d and %d of product %d are left; want 6 each", n, other, m, last)
	}
}

// TestCountInMySQLNamesForeignWriters: orders of the item written by an
// instance outside the fleet (another fleet sharing the database) are
// counted by instance, whatever their status; the fleet's own are not, nor
// are another item's.
func TestCountInMySQLNamesForeignWriters(t *testing.T) {
	ctx := context.Background()
	db := migratedMySQL(t)
	var ids [2]int64
	for i := range ids {
		res, err := db.ExecContext(ctx, "INSERT INTO products (name, initial_stock, stock) VALUES ('foreign writers', 10, 10)")
		if err != nil {
			t.Fatal(err)
		}
		if ids[i], err = res.LastInsertId(); err != nil {
			t.Fatal(err)
		}
	}
	for i, o := range []struct {
		item     int64
		instance string
		status   string
	}{
		{ids[0], "serve-1", "confirmed"}, {ids[0], "serve-2", "paid"},
		{ids[0], "wrk-1", "confirmed"}, {ids[0], "wrk-1", "cancelled"}, {ids[0], "wrk-2", "paid"},
		{ids[1], "elsewhere", "confirmed"},
	} {
		if _, err := db.ExecContext(ctx, "INSERT INTO orders (order_no, product_id, user_id, quantity, stage, instance, status) VALUES (?, ?, ?, 1, 'redis-atomic', ?, ?)",
			fmt.Sprintf("F%d", i), o.item, fmt.Sprintf("u%d", i), o.instance, o.status); err != nil {
			t.Fatal(err)
		}
	}
	own := map[string]bool{"serve-1": true, "serve-2": true}
	c, err := verdict.CountInMySQL(ctx, db, verdict.Item{Coupon: scenario.All()[0].Coupon, ID: ids[0]}, own, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"wrk-1": 2, "wrk-2": 1}; !maps.Equal(c.Foreign, want) {
		t.Errorf("foreign writers %v, want %v", c.Foreign, want)
	}
	own["wrk-1"], own["wrk-2"] = true, true
	if c, err = verdict.CountInMySQL(ctx, db, verdict.Item{Coupon: scenario.All()[0].Coupon, ID: ids[0]}, own, nil); err != nil || c.Foreign != nil {
		t.Errorf("with every writer in the fleet: foreign %v, %v; want none", c.Foreign, err)
	}
}

// TestForeignWriterSeenThroughItsDeletedOrders: another fleet on the same
// database sold the item and then reset it, as a second lab does between
// its rows. Its reset deleted its own orders, so none is left to name, and
// the lab's with them: the lab's buyers were answered 201 for orders MySQL
// no longer holds. The row fails foreign-writer. A row whose answered
// orders are all there (cancelled ones too: a status, not a deletion)
// does not.
func TestForeignWriterSeenThroughItsDeletedOrders(t *testing.T) {
	ctx := context.Background()
	db := migratedMySQL(t)
	res, err := db.ExecContext(ctx, "INSERT INTO products (name, initial_stock, stock) VALUES ('deleted foreign orders', 10, 10)")
	if err != nil {
		t.Fatal(err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		t.Fatal(err)
	}
	insert := func(no, instance, status string) {
		t.Helper()
		if _, err := db.ExecContext(ctx, "INSERT INTO orders (order_no, product_id, user_id, quantity, stage, instance, status) VALUES (?, ?, ?, 1, 'redis-atomic', ?, ?)",
			no, id, "u-"+no, instance, status); err != nil {
			t.Fatal(err)
		}
	}
	own := map[string]bool{"serve-1": true}
	written := []string{"L1", "L2", "L3"} // answered 201 to the lab's buyers
	judged := func() *results.Row {
		t.Helper()
		c, err := verdict.CountInMySQL(ctx, db, verdict.Item{Coupon: scenario.All()[0].Coupon, ID: id}, own, written)
		if err != nil {
			t.Fatal(err)
		}
		r := results.Row{Requests: 10, Buyers: 10, Created: 3, BuyersWithOrder: 3, SoldOut: 7, Sold: 3, InitialStock: 3, FinalStock: 0, Conserved: true,
			Statuses: map[int]int{201: 3, 409: 7}, MySQL: c}
		c.Sold, c.InitialStock, c.Stock = r.Sold, r.InitialStock, r.FinalStock // the audit agrees, whatever happened
		verdict.Judge(&r)
		return &r
	}
	insert("L1", "serve-1", "confirmed")
	insert("L2", "serve-1", "cancelled")
	insert("L3", "serve-1", "paid")
	if r := judged(); slices.Contains(r.Broken, verdict.RuleForeignWriter) {
		t.Fatalf("every answered order is in MySQL: %v: %s", r.Broken, r.Note)
	}
	// The other fleet sells, then resets: every order of the item goes.
	insert("W1", "wrk-1", "confirmed")
	if _, err := db.ExecContext(ctx, "DELETE FROM orders WHERE product_id = ?", id); err != nil {
		t.Fatal(err)
	}
	r := judged()
	if !slices.Contains(r.Broken, verdict.RuleForeignWriter) || !strings.Contains(r.Note, "3 orders the buyers were answered 201 for are gone from MySQL") {
		t.Fatalf("after another fleet's sale and reset deleted every order of the item: broken %v, note %q; want foreign-writer naming the 3 orders gone", r.Broken, r.Note)
	}
}
