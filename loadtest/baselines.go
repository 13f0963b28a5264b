package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// A stage's answers per second mean little alone on a shared 2-core box:
// they move with everything else the machine does. --baselines measures,
// in the same run and with the same buyers in flight, three ceilings that a
// stage cannot beat, so a stage can be reported as a ratio of them:
//
//   - http-ceiling: GET /healthz on the same targets: the HTTP stack, the
//     load generator and the machine, with none of a buy's work.
//   - redis-round-trip: GET /api/v1/admin/redis-ping on the same targets:
//     the same, plus one round trip to the Redis of the Idempotency-Key
//     records, the hop a keyed buy makes before anything else. The lab's
//     buys carry keys, so no stage that answers one can beat it, and its
//     gap to http-ceiling is what that hop alone costs.
//   - raw-hot-row: db-atomic's work alone, straight on MySQL with no HTTP:
//     the guarded UPDATE of one hot row and the order INSERT in one
//     transaction, per buyer.

// ceiling is one baseline measured at one level of buyers in flight.
type ceiling struct {
	Name      string  `json:"name"`
	Workers   int     `json:"workers"`
	Requests  int     `json:"requests"`
	OK        int     `json:"ok"`
	PerSecond float64 `json:"per_second"` // OK answers (or committed sales) per second
	Note      string  `json:"note,omitempty"`
	// With --repeat: the per-second figure of every round, in order; the
	// fields above are the median round's.
	Runs []float64 `json:"runs,omitempty"`
}

const (
	baselineHTTP   = "http-ceiling"
	baselineRedis  = "redis-round-trip"
	baselineHotRow = "raw-hot-row"
)

// rawLoopConns bounds the raw loop's MySQL connections: one instance's
// default pool (SECKILL_MYSQL_MAX_CONNS), which also leaves room under the
// server's max_connections for the instances' own pools.
const rawLoopConns = 32

// measureCeilings runs the ceilings at workers buyers in flight, as many
// requests as a burst has buyers. The raw loop needs db (SECKILL_MYSQL_DSN).
func measureCeilings(ctx context.Context, o options, db *sql.DB, workers int, progress io.Writer) []ceiling {
	out := []ceiling{httpCeiling(ctx, o, workers), redisRoundTrip(ctx, o, workers)}
	if db != nil {
		out = append(out, rawHotRow(ctx, db, workers, o.buyers))
	} else {
		out = append(out, ceiling{Name: baselineHotRow, Workers: workers, Note: "not measured: set SECKILL_MYSQL_DSN"})
	}
	for _, b := range out {
		fmt.Fprintf(progress, "lab: ceiling %s at %d in flight: %.0f/s (%d of %d ok)%s\n",
			b.Name, b.Workers, b.PerSecond, b.OK, b.Requests, noteSuffix(b.Note))
	}
	return out
}

func noteSuffix(n string) string {
	if n == "" {
		return ""
	}
	return "; " + n
}

// httpCeiling fires buyers GETs of /healthz, spread round-robin over the
// targets, workers at a time, with the attacker the stages get.
func httpCeiling(ctx context.Context, o options, workers int) ceiling {
	return getBaseline(ctx, o, workers, baselineHTTP, "/healthz", nil)
}

// redisRoundTrip is httpCeiling on GET /api/v1/admin/redis-ping, an admin
// route (as the lab's buys, which name their stage, are admin requests)
// that makes one round trip to Redis.
func redisRoundTrip(ctx context.Context, o options, workers int) ceiling {
	return getBaseline(ctx, o, workers, baselineRedis, "/api/v1/admin/redis-ping", http.Header{"Authorization": {"Bearer " + o.adminToken}})
}

// getBaseline fires buyers GETs of path, spread round-robin over the
// targets, workers at a time, and counts the 200s per second. Any other
// answer is counted in the note: a target without Redis answers the ping
// 404, and the baseline is then not measured.
func getBaseline(ctx context.Context, o options, workers int, name, path string, header http.Header) ceiling {
	b := ceiling{Name: name, Workers: workers, Requests: o.buyers}
	var next atomic.Uint64
	targeter := func(t *vegeta.Target) error {
		t.Method = http.MethodGet
		t.URL = o.targets[next.Add(1)%uint64(len(o.targets))] + path
		t.Header = header
		return nil
	}
	atk, release := newAttacker(uint64(workers), uint64(workers), o.timeout)
	defer release()
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	started := time.Now()
	var last time.Time
	others := map[int]int{}
	for r := range atk.Attack(targeter, burstPacer{hits: uint64(o.buyers)}, o.maxDuration, name) {
		if r.Code == http.StatusOK {
			b.OK++
		} else {
			others[int(r.Code)]++
		}
		last = r.Timestamp.Add(r.Latency)
	}
	if el := last.Sub(started); el > 0 && b.OK > 0 {
		b.PerSecond = float64(b.OK) / el.Seconds()
	}
	if len(others) > 0 {
		b.Note = "not 200: " + statusCounts(&row{Statuses: others}, false)
	}
	return b
}

// rawHotRow sells n units of a scratch product, one transaction per sale,
// from workers goroutines, and removes the product and its orders after.
func rawHotRow(ctx context.Context, db *sql.DB, workers, n int) ceiling {
	b := ceiling{Name: baselineHotRow, Workers: workers, Requests: n}
	db.SetMaxOpenConns(min(workers, rawLoopConns))
	db.SetMaxIdleConns(min(workers, rawLoopConns))
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
	}()
	tag := randomHex(4)
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
