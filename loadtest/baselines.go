package main

import (
	"github.com/seckill-lab/seckill/loadtest/resp"

	"github.com/seckill-lab/seckill/loadtest/cpu"

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
// Each baseline's CPU per answer is measured too (package cpu); the CPU targets
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
	cpu.Figures
	baselineTally
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

// baselineSlices is how many slices each HTTP baseline is sent in. The
// slices are taken in turn (a slice of every baseline, then the next
// slice of every one), so a drift of the machine over a round (a process
// warming up, another program's load, a GC cycle) meets every baseline
// alike instead of the one that ran while it lasted; each baseline's CPU
// and answers are the sums over its slices.
const baselineSlices = 4

// measureCeilings runs the baselines at workers buyers in flight, as many
// requests as a burst has buyers (or o.baselineRequests): the HTTP ones in
// interleaved slices (baselineSlices), each slice between two readings of
// meter, then the raw loop, which needs db (SECKILL_MYSQL_DSN). tag makes
// the sold-out buyers' ids unique to this round.
func measureCeilings(ctx context.Context, o options, f *fleet, db *sql.DB, meter *cpu.Meter, workers int, tag string, progress io.Writer) []ceiling {
	hot := o.buyers // the raw loop sells as many units as a burst has buyers
	if o.baselineRequests > 0 {
		o.buyers = o.baselineRequests
	}
	// Each baseline keeps its connections from slice to slice: a
	// baseline in slices dials as often as one in a piece.
	type baseline struct {
		ceiling
		unmeasured bool // its note says why
		send       func(conns *http.Transport, o options, slice int) ceiling
	}
	all := []*baseline{
		{ceiling: ceiling{Name: baselineHTTP}, send: func(conns *http.Transport, o options, _ int) ceiling { return httpCeiling(ctx, conns, o, workers) }},
		{ceiling: ceiling{Name: baselineRedis}, send: func(conns *http.Transport, o options, _ int) ceiling { return redisRoundTrip(ctx, conns, o, workers) }},
	}
	// The sold-out buys find the product sold out from their first slice
	// on: one reset before any slice.
	var soldOut string
	if miss := f.missing(o.soldOutStage); len(miss) > 0 {
		soldOut = "not measured: " + o.soldOutStage + " is not available on " + strings.Join(miss, ", ")
	} else if err := f.reset(ctx, buyScenario(), o.product, 0); err != nil {
		soldOut = "not measured: " + err.Error()
	}
	for _, keyed := range []bool{true, false} {
		name := baselineSoldOutNoKey
		if keyed {
			name = baselineSoldOutKeyed
		}
		all = append(all, &baseline{ceiling: ceiling{Name: name, Note: soldOut}, unmeasured: soldOut != "", send: func(conns *http.Transport, o options, slice int) ceiling {
			return soldOutBuys(ctx, conns, o, workers, name, keyed, fmt.Sprintf("%s-s%d", tag, slice))
		}})
	}
	conns := make([]*http.Transport, len(all))
	for i := range all {
		conns[i] = newAttackTransport(o.timeout)
		defer conns[i].CloseIdleConnections()
	}
	slices := min(baselineSlices, max(o.buyers, 1))
	for k := range slices {
		so := o
		so.buyers = o.buyers/slices + btoi(k < o.buyers%slices)
		for i, b := range all {
			if b.unmeasured {
				continue
			}
			before := meter.Read(ctx)
			c := b.send(conns[i], so, k)
			b.add(c, meter.Usage(before, meter.Read(ctx)))
		}
	}
	out := make([]ceiling, 0, len(all)+1)
	for _, b := range all {
		b.Workers = workers
		if !b.unmeasured {
			b.settle()
		}
		out = append(out, b.ceiling)
	}
	if db != nil {
		before := meter.Read(ctx)
		c := rawHotRow(ctx, db, scratchRedis{addrs: o.cpuRedis, password: o.redisPassword, timeout: min(o.timeout, 2*time.Second)}, workers, hot)
		c.setCPU(meter.Usage(before, meter.Read(ctx)))
		out = append(out, c)
	} else {
		out = append(out, ceiling{Name: baselineHotRow, Workers: workers, Note: "not measured: set SECKILL_MYSQL_DSN"})
	}
	for _, b := range out {
		fmt.Fprintf(progress, "lab: ceiling %s at %d in flight: %.0f/s (%d of %d ok), CPU %s µs per answer%s\n",
			b.Name, b.Workers, b.PerSecond, b.OK, b.Requests, cpuCell(b.Figures, b.CPUPerAnswerMS), noteSuffix(b.Note))
	}
	return out
}

// btoi is 1 for true, 0 for false.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// add counts one slice of a baseline into c: its requests, answers,
// other statuses, time and CPU.
func (c *ceiling) add(slice ceiling, used *cpu.Usage) {
	c.Requests += slice.Requests
	c.OK += slice.OK
	c.okStatus, c.limit = slice.okStatus, slice.limit
	c.asked += slice.asked
	c.capped = c.capped || slice.capped
	c.elapsed += slice.elapsed
	for code, n := range slice.others {
		if c.others == nil {
			c.others = map[int]int{}
		}
		c.others[code] += n
	}
	c.slicesCPU = cpu.Sum(c.slicesCPU, used)
}

// settle turns the sums of add into the baseline's figures.
func (c *ceiling) settle() {
	c.sum()
	if c.slicesCPU != nil {
		c.setCPU(c.slicesCPU)
	}
}

// setCPU keeps a baseline's CPU and its CPU per OK answer.
func (c *ceiling) setCPU(u *cpu.Usage) {
	c.CPU = u
	c.CPUPerAnswerMS, c.ServersPerAnswerMS = cpu.PerUnit(u.Seconds, c.OK), cpu.PerUnit(u.Servers(), c.OK)
	if n := u.Unavailable(); n != "" {
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
func httpCeiling(ctx context.Context, conns *http.Transport, o options, workers int) ceiling {
	return getBaseline(ctx, conns, o, workers, baselineHTTP, "/healthz", nil)
}

// redisRoundTrip is httpCeiling on GET /api/v1/admin/redis-ping, an admin
// route (as the lab's buys, which name their stage, are admin requests)
// that makes one round trip to Redis.
func redisRoundTrip(ctx context.Context, conns *http.Transport, o options, workers int) ceiling {
	return getBaseline(ctx, conns, o, workers, baselineRedis, "/api/v1/admin/redis-ping", http.Header{"Authorization": {"Bearer " + o.adminToken}})
}

// getBaseline fires buyers GETs of path, spread round-robin over the
// targets, workers at a time, and counts the 200s per second. Any other
// answer is counted in the note: a target without Redis answers the ping
// 404, and the baseline is then not measured.
func getBaseline(ctx context.Context, conns *http.Transport, o options, workers int, name, path string, header http.Header) ceiling {
	return fireBaseline(ctx, conns, o, workers, name, http.StatusOK, func(i uint64, t *vegeta.Target) {
		t.Method = http.MethodGet
		t.URL = o.targets[i%uint64(len(o.targets))] + path
		t.Header = header
	})
}

// soldOutBuys fires buyers buys of the product, already sold out, under
// o.soldOutStage, each buyer its own, with an Idempotency-Key when keyed,
// and counts the 409s per second.
func soldOutBuys(ctx context.Context, conns *http.Transport, o options, workers int, name string, keyed bool, tag string) ceiling {
	sc := buyScenario()
	path := sc.actionPath(o.product)
	return fireBaseline(ctx, conns, o, workers, name, http.StatusConflict, func(i uint64, t *vegeta.Target) {
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
// from 0), workers at a time over conns, and counts the answers of status
// ok per second; any other answer is counted in the note.
func fireBaseline(ctx context.Context, conns *http.Transport, o options, workers int, name string, ok int, target func(i uint64, t *vegeta.Target)) ceiling {
	b := ceiling{Name: name, Workers: workers, baselineTally: baselineTally{okStatus: ok, asked: o.buyers, others: map[int]int{}, limit: o.maxDuration}}
	var next atomic.Uint64
	targeter := func(t *vegeta.Target) error {
		target(next.Add(1)-1, t)
		return nil
	}
	atk := attackerOn(conns, uint64(workers), uint64(workers), o.timeout)
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	started := time.Now()
	var last time.Time
	for r := range atk.Attack(targeter, burstPacer{hits: uint64(o.buyers)}, o.maxDuration, name) {
		b.Requests++
		if int(r.Code) == ok {
			b.OK++
		} else {
			b.others[int(r.Code)]++
		}
		last = r.Timestamp.Add(r.Latency)
	}
	if el := last.Sub(started); el > 0 {
		b.elapsed = el
	}
	// A slow baseline meets the bursts' --max-duration cap too: its CPU
	// per answer still holds (CPU over the answers it got), but say so.
	b.capped = b.Requests < o.buyers && ctx.Err() == nil
	b.sum()
	return b
}

// baselineTally is what a baseline's requests came to before its figures
// are set (sum), over one attack or over its slices (add).
type baselineTally struct {
	okStatus int
	asked    int // requests it was to send
	others   map[int]int
	capped   bool // stopped at the --max-duration cap (limit)
	limit    time.Duration
	// The time from each attack's first request to its last answer,
	// summed, and the CPU of the slices.
	elapsed   time.Duration
	slicesCPU *cpu.Usage
}

// sum sets a baseline's answers per second and its note from its tally.
func (c *ceiling) sum() {
	if c.elapsed > 0 && c.OK > 0 {
		c.PerSecond = float64(c.OK) / c.elapsed.Seconds()
	}
	var note string
	if len(c.others) > 0 {
		note = fmt.Sprintf("not %d: %s", c.okStatus, statusCounts(&row{Statuses: c.others}, false))
	}
	if c.capped {
		note = joinNotes(note, fmt.Sprintf("stopped at the --max-duration cap (%v) after %d of %d requests", c.limit, c.Requests, c.asked))
	}
	c.Note = note
}

// scratchRedis are the Redis servers where the fleet may have made keys
// for a scratch product (resp.DropProductKeys).
type scratchRedis struct {
	addrs    []string
	password string
	timeout  time.Duration
}

// rawHotRow sells n units of a scratch product, one transaction per sale,
// from workers goroutines, and removes the product and its orders after,
// and the keys the fleet made for it in Redis meanwhile.
func rawHotRow(ctx context.Context, db *sql.DB, rs scratchRedis, workers, n int) (b ceiling) {
	b = ceiling{Name: baselineHotRow, Workers: workers, Requests: n}
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
		// After the rows: no job finds the product to make keys for again.
		if _, err := resp.DropProductKeys(cctx, rs.addrs, rs.password, id, rs.timeout); err != nil {
			b.Note = joinNotes(b.Note, "the scratch product's Redis keys: "+err.Error())
		}
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
