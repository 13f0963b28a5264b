// Package hotrow is the raw-hot-row baseline of the lab: db-atomic's
// transaction (a guarded UPDATE of the hot row, an order INSERT) straight
// on MySQL, with no HTTP and no service in between, on a scratch product
// it removes after, with the keys the fleet made for it in Redis. It is
// the floor under every stage that writes each sale to MySQL.
package hotrow

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill-lab/seckill/loadtest/resp"
	"github.com/seckill-lab/seckill/loadtest/results"
)

// maxConns bounds the raw loop's MySQL connections: one instance's
// default pool (SECKILL_MYSQL_MAX_CONNS), which also leaves room under the
// server's max_connections for the instances' own pools.
const maxConns = 32

// Redis are the Redis servers where the fleet may have made keys
// for a scratch product (resp.DropProductKeys).
type Redis struct {
	Addrs    []string
	Password string
	Timeout  time.Duration
}

// Run sells n units of a scratch product, one transaction per sale,
// from workers goroutines, and removes the product and its orders after,
// and the keys the fleet made for it in Redis meanwhile.
func Run(ctx context.Context, db *sql.DB, rs Redis, workers, n int) (b results.Ceiling) {
	b = results.Ceiling{Name: results.BaselineHotRow, Workers: workers, Requests: n}
	db.SetMaxOpenConns(min(workers, maxConns))
	db.SetMaxIdleConns(min(workers, maxConns))
	res, err := db.ExecContext(ctx, "INSERT INTO products (name, initial_stock, stock) VALUES ('lab ceiling (scratch)', ?, ?)", n, n)
	if err != nil {
		b.Note = "scratch product: " + err.Error()
		return b
	}
	id, err := res.LastInsertId()
	if err != nil {
		b.Note = "scratch product id: " + err.Error()
		return b
	}
	defer func() {
		cctx := context.WithoutCancel(ctx)
		_, _ = db.ExecContext(cctx, "DELETE FROM orders WHERE product_id = ?", id)
		_, _ = db.ExecContext(cctx, "DELETE FROM products WHERE id = ?", id)
		// After the rows: no job finds the product to make keys for again.
		if _, err := resp.DropProductKeys(cctx, rs.Addrs, rs.Password, id, rs.Timeout); err != nil {
			b.Note = results.JoinNotes(b.Note, "the scratch product's Redis keys: "+err.Error())
		}
	}()
	tag := randomHex()
	var sold atomic.Int64
	var firstErr sync.Once
	jobs := make(chan int)
	var wg sync.WaitGroup
	started := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := sellOne(ctx, db, id, fmt.Sprintf("B%s%07d", tag, i)); err != nil {
					firstErr.Do(func() { b.Note = "first error: " + err.Error() })
					continue
				}
				sold.Add(1)
			}
		}()
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	b.OK = int(sold.Load())
	b.PerSecond = float64(b.OK) / time.Since(started).Seconds()
	return b
}

// sellOne is db-atomic's transaction, with nothing around it.
func sellOne(ctx context.Context, db *sql.DB, id int64, orderNo string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, "UPDATE products SET stock = stock - 1 WHERE id = ? AND stock >= 1", id)
	if err == nil {
		var n int64
		if n, err = res.RowsAffected(); err == nil && n != 1 {
			err = fmt.Errorf("sold out")
		}
	}
	if err == nil {
		_, err = tx.ExecContext(ctx, "INSERT INTO orders (order_no, product_id, user_id, quantity, stage, instance) VALUES (?, ?, ?, 1, 'raw', 'lab')",
			orderNo, id, strings.ToLower(orderNo))
	}
	if err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// randomHex is 4 random bytes in hex: the run's order numbers' own.
func randomHex() string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b)
}
