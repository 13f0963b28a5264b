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
// in the same run and with the same buyers in flight, ceilings that a
// stage cannot beat, and the cost of a sold-out answer, so a stage can be
// reported as a ratio of them:
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
//   - sold-out-keyed and sold-out-keyless: buys of a product already sold
//     out (its stock reset to 0), under --sold-out-stage, with an
//     Idempotency-Key and without: what the crowd that comes after a
//     sell-out costs, the bulk of a flash sale's requests.
//
// Each baseline's CPU per answer is measured too (cpu.go); the CPU targets
// (cpucompare.go) compare them within the same round.

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
	cpuFigures
}

const (
	baselineHTTP         = "http-ceiling"
	baselineRedis        = "redis-round-trip"
	baselineSoldOutKeyed = "sold-out-keyed"
	baselineSoldOutNoKey = "sold-out-keyless"
	baselineHotRow       = "raw-hot-row"
)

// rawLoopConns bounds the raw loop's MySQL connections: one instance's
// default pool (SECKILL_MYSQL_MAX_CONNS), which also leaves room under the
// server's max_connections for the instances' own pools.
const rawLoopConns = 32

// measureCeilings runs the baselines at workers buyers in flight, as many
// requests as a burst has buyers (or o.baselineRequests), each between two
// readings of meter. The raw loop needs db (SECKILL_MYSQL_DSN). tag makes
// the sold-out buyers' ids unique to this round.
func measureCeilings(ctx context.Context, o options, f *fleet, db *sql.DB, meter *cpuMeter, workers int, tag string, progress io.Writer) []ceiling {
	hot := o.buyers // the raw loop sells as many units as a burst has buyers
	if o.baselineRequests > 0 {
		o.buyers = o.baselineRequests
	}
	measured := func(run func() ceiling) ceiling {
		before := meter.read(ctx)
		c := run()
		c.setCPU(meter.usage(before, meter.read(ctx)))
		return c
	}
	out := []ceiling{
		measured(func() ceiling { return httpCeiling(ctx, o, workers) }),
		measured(func() ceiling { return redisRoundTrip(ctx, o, workers) }),
	}
	for _, keyed := range []bool{true, false} {
		name := baselineSoldOutNoKey
		if keyed {
			name = baselineSoldOutKeyed
		}
		c := ceiling{Name: name, Workers: workers}
		if miss := f.missing(o.soldOutStage); len(miss) > 0 {
			c.Note = "not measured: " + o.soldOutStage + " is not available on " + strings.Join(miss, ", ")
		} else if err := f.reset(ctx, buyScenario(), o.product, 0); err != nil {
			c.Note = "not measured: " + err.Error()
		} else {
			c = measured(func() ceiling { return soldOutBuys(ctx, o, workers, name, keyed, tag) })
		}
		out = append(out, c)
	}
	if db != nil {
		out = append(out, measured(func() ceiling { return rawHotRow(ctx, db, workers, hot) }))
	} else {
		out = append(out, ceiling{Name: baselineHotRow, Workers: workers, Note: "not measured: set SECKILL_MYSQL_DSN"})
	}
	for _, b := range out {
		fmt.Fprintf(progress, "lab: ceiling %s at %d in flight: %.0f/s (%d of %d ok), CPU %s µs per answer%s\n",
			b.Name, b.Workers, b.PerSecond, b.OK, b.Requests, cpuCell(b.cpuFigures, b.CPUPerAnswerMS), noteSuffix(b.Note))
	}
	return out
}

// setCPU keeps a baseline's CPU and its CPU per OK answer.
func (c *ceiling) setCPU(u *cpuUsage) {
	c.CPU = u
	c.CPUPerAnswerMS, c.ServersPerAnswerMS = perUnit(u.Seconds, c.OK), perUnit(u.servers(), c.OK)
	if n := u.unavailable(); n != "" {
		c.Note = joinNotes(c.Note, n)
	}
}

func joinNotes(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "; " + b
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
	return fireBaseline(ctx, o, workers, name, http.StatusOK, func(i uint64, t *vegeta.Target) {
		t.Method = http.MethodGet
		t.URL = o.targets[i%uint64(len(o.targets))] + path
		t.Header = header
	})
}

// soldOutBuys fires buyers buys of the product, already sold out, under
// o.soldOutStage, each buyer its own, with an Idempotency-Key when keyed,
// and counts the 409s per second.
func soldOutBuys(ctx context.Context, o options, workers int, name string, keyed bool, tag string) ceiling {
	sc := buyScenario()
	path := sc.actionPath(o.product)
	return fireBaseline(ctx, o, workers, name, http.StatusConflict, func(i uint64, t *vegeta.Target) {
		user := fmt.Sprintf("%s-%s-%d", tag, name, i)
		t.Method = http.MethodPost
		t.URL = o.targets[i%uint64(len(o.targets))] + path
		t.Body = sc.body(user)
		t.Header = http.Header{
			"Content-Type":    {"application/json"},
			"Authorization":   {"Bearer " + o.adminToken},
			"X-Seckill-Stage": {o.soldOutStage},
		}
		if keyed {
			t.Header.Set("Idempotency-Key", user)
		}
	})
}

// fireBaseline fires o.buyers requests that target makes (i counts them
// from 0), workers at a time, and counts the answers of status ok per
// second; any other answer is counted in the note.
func fireBaseline(ctx context.Context, o options, workers int, name string, ok int, target func(i uint64, t *vegeta.Target)) ceiling {
	b := ceiling{Name: name, Workers: workers, Requests: o.buyers}
	var next atomic.Uint64
	targeter := func(t *vegeta.Target) error {
		target(next.Add(1)-1, t)
		return nil
	}
	atk, release := newAttacker(uint64(workers), uint64(workers), o.timeout)
	defer release()
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	started := time.Now()
	var last time.Time
	others := map[int]int{}
	sent := 0
	for r := range atk.Attack(targeter, burstPacer{hits: uint64(o.buyers)}, o.maxDuration, name) {
		sent++
		if int(r.Code) == ok {
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
		b.Note = fmt.Sprintf("not %d: %s", ok, statusCounts(&row{Statuses: others}, false))
	}
	// A slow baseline meets the bursts' --max-duration cap too: its CPU
	// per answer still holds (CPU over the answers it got), but say so.
	if sent < o.buyers && ctx.Err() == nil {
		b.Requests = sent
		b.Note = joinNotes(b.Note, fmt.Sprintf("stopped at the --max-duration cap (%v) after %d of %d requests", o.maxDuration, sent, o.buyers))
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
