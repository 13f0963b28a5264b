// Package baseline measures what the lab's --baselines report beside the
// stages. A stage's answers per second mean little alone on a shared
// 2-core box: they move with everything else the machine does. The
// baselines measure,
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
// (report/cpucompare.go) compare them within the same round. The package
// reads a Config, never a flag.
package baseline

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/seckill-lab/seckill/loadtest/cpu"
	"github.com/seckill-lab/seckill/loadtest/fleet"
	"github.com/seckill-lab/seckill/loadtest/hotrow"
	"github.com/seckill-lab/seckill/loadtest/report"
	"github.com/seckill-lab/seckill/loadtest/results"
	"github.com/seckill-lab/seckill/loadtest/scenario"
)

// Config is what the baselines need of the run; the CLI fills it from
// its flags, and no baseline reads a flag itself.
type Config struct {
	// Targets are the instances' base URLs, asked round-robin, and Token
	// their admin token.
	Targets []string
	Token   string
	// Product is sold out (its stock reset to 0) for the sold-out buys,
	// sent under SoldOutStage.
	Product      int64
	SoldOutStage string
	// Requests is how many requests each HTTP baseline sends, and
	// HotRowUnits how many units the raw loop sells.
	Requests    int
	HotRowUnits int
	// Timeout is each request's; MaxDuration caps each HTTP baseline as
	// it caps a burst.
	Timeout     time.Duration
	MaxDuration time.Duration
	// Redis are the servers where the raw loop removes the keys the
	// fleet made for its scratch product.
	Redis hotrow.Redis
}

// Measure runs the baselines at workers buyers in flight, c.Requests
// requests each: the HTTP ones in interleaved slices
// (results.BaselineSlices), each slice between two readings of meter,
// then the raw loop, which needs db (SECKILL_MYSQL_DSN). tag makes the
// sold-out buyers' ids unique to this round.
func Measure(ctx context.Context, c Config, f *fleet.Fleet, db *sql.DB, meter *cpu.Meter, workers int, tag string, progress io.Writer) []results.Ceiling {
	all := httpBaselines(ctx, c, f, workers, tag)
	// Each baseline keeps its connections from slice to slice: a
	// baseline in slices dials as often as one in a piece.
	conns := make([]*http.Transport, len(all))
	for i := range all {
		conns[i] = scenario.NewAttackTransport(c.Timeout)
		defer conns[i].CloseIdleConnections()
	}
	slices := min(results.BaselineSlices, max(c.Requests, 1))
	for k := range slices {
		sc := c
		sc.Requests = c.Requests/slices + btoi(k < c.Requests%slices)
		for i, b := range all {
			if b.unmeasured {
				continue
			}
			before := meter.Read(ctx)
			got := b.send(conns[i], sc, k)
			b.Add(got, meter.Usage(before, meter.Read(ctx)))
		}
	}
	out := make([]results.Ceiling, 0, len(all)+1)
	for _, b := range all {
		b.Workers = workers
		if !b.unmeasured {
			b.Settle()
		}
		out = append(out, b.Ceiling)
	}
	if db != nil {
		before := meter.Read(ctx)
		hot := hotrow.Run(ctx, db, c.Redis, workers, c.HotRowUnits)
		hot.SetCPU(meter.Usage(before, meter.Read(ctx)))
		out = append(out, hot)
	} else {
		out = append(out, results.Ceiling{Name: results.BaselineHotRow, Workers: workers, Note: "not measured: set SECKILL_MYSQL_DSN"})
	}
	for _, b := range out {
		fmt.Fprintf(progress, "lab: ceiling %s at %d in flight: %.0f/s (%d of %d ok), CPU %s µs per answer%s\n",
			b.Name, b.Workers, b.PerSecond, b.OK, b.Requests, report.CPUCell(b.Figures, b.CPUPerAnswerMS), noteSuffix(b.Note))
	}
	return out
}

// httpBaseline is one HTTP baseline: its sums so far, and how to send
// one slice of it.
type httpBaseline struct {
	results.Ceiling
	unmeasured bool // its note says why
	send       func(conns *http.Transport, c Config, slice int) results.Ceiling
}

// httpBaselines are the HTTP baselines in the order each slice sends
// them. The sold-out buys find the product sold out from their first
// slice on: it is reset once, here, before any slice.
func httpBaselines(ctx context.Context, c Config, f *fleet.Fleet, workers int, tag string) []*httpBaseline {
	all := []*httpBaseline{
		{Ceiling: results.Ceiling{Name: results.BaselineHTTP}, send: func(conns *http.Transport, c Config, _ int) results.Ceiling {
			return HTTPCeiling(ctx, conns, c, workers)
		}},
		{Ceiling: results.Ceiling{Name: results.BaselineRedis}, send: func(conns *http.Transport, c Config, _ int) results.Ceiling {
			return RedisRoundTrip(ctx, conns, c, workers)
		}},
	}
	var soldOut string
	if miss := f.Missing(c.SoldOutStage); len(miss) > 0 {
		soldOut = "not measured: " + c.SoldOutStage + " is not available on " + strings.Join(miss, ", ")
	} else if err := f.Reset(ctx, scenario.Buy().Item(c.Product), 0); err != nil {
		soldOut = "not measured: " + err.Error()
	}
	for _, keyed := range []bool{true, false} {
		name := results.BaselineSoldOutNoKey
		if keyed {
			name = results.BaselineSoldOutKeyed
		}
		all = append(all, &httpBaseline{Ceiling: results.Ceiling{Name: name, Note: soldOut}, unmeasured: soldOut != "", send: func(conns *http.Transport, c Config, slice int) results.Ceiling {
			return SoldOutBuys(ctx, conns, c, workers, name, keyed, fmt.Sprintf("%s-s%d", tag, slice))
		}})
	}
	return all
}

// btoi is 1 for true, 0 for false.
func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func noteSuffix(n string) string {
	if n == "" {
		return ""
	}
	return "; " + n
}

// HTTPCeiling fires c.Requests GETs of /healthz, spread round-robin over
// the targets, workers at a time, with the attacker the stages get.
func HTTPCeiling(ctx context.Context, conns *http.Transport, c Config, workers int) results.Ceiling {
	return Get(ctx, conns, c, workers, results.BaselineHTTP, "/healthz", nil)
}

// RedisRoundTrip is HTTPCeiling on GET /api/v1/admin/redis-ping, an
// admin route (as the lab's buys, which name their stage, are admin
// requests) that makes one round trip to Redis.
func RedisRoundTrip(ctx context.Context, conns *http.Transport, c Config, workers int) results.Ceiling {
	return Get(ctx, conns, c, workers, results.BaselineRedis, "/api/v1/admin/redis-ping", http.Header{"Authorization": {"Bearer " + c.Token}})
}

// Get fires c.Requests GETs of path, spread round-robin over the
// targets, workers at a time, and counts the 200s per second. Any other
// answer is counted in the note: a target without Redis answers the ping
// 404, and the baseline is then not measured.
func Get(ctx context.Context, conns *http.Transport, c Config, workers int, name, path string, header http.Header) results.Ceiling {
	return fire(ctx, conns, c, workers, name, http.StatusOK, func(i uint64, t *vegeta.Target) {
		t.Method = http.MethodGet
		t.URL = c.Targets[i%uint64(len(c.Targets))] + path
		t.Header = header
	})
}

// SoldOutBuys fires c.Requests buys of the product, already sold out,
// under c.SoldOutStage, each buyer its own, with an Idempotency-Key when
// keyed, and counts the 409s per second.
func SoldOutBuys(ctx context.Context, conns *http.Transport, c Config, workers int, name string, keyed bool, tag string) results.Ceiling {
	sc := scenario.Buy()
	path := sc.ActionPath(c.Product)
	return fire(ctx, conns, c, workers, name, http.StatusConflict, func(i uint64, t *vegeta.Target) {
		user := fmt.Sprintf("%s-%s-%d", tag, name, i)
		t.Method = http.MethodPost
		t.URL = c.Targets[i%uint64(len(c.Targets))] + path
		t.Body = sc.Body(user)
		t.Header = http.Header{
			"Content-Type":    {"application/json"},
			"Authorization":   {"Bearer " + c.Token},
			"X-Seckill-Stage": {c.SoldOutStage},
		}
		if keyed {
			t.Header.Set("Idempotency-Key", user)
		}
	})
}

// fire fires c.Requests requests that target makes (i counts them from
// 0), workers at a time over conns, and counts the answers of status ok
// per second; any other answer is counted in the note.
func fire(ctx context.Context, conns *http.Transport, c Config, workers int, name string, ok int, target func(i uint64, t *vegeta.Target)) results.Ceiling {
	b := results.Ceiling{Name: name, Workers: workers, Tally: results.Tally{OKStatus: ok, Asked: c.Requests, Others: map[int]int{}, Limit: c.MaxDuration}}
	var next atomic.Uint64
	targeter := func(t *vegeta.Target) error {
		target(next.Add(1)-1, t)
		return nil
	}
	atk := scenario.AttackerOn(conns, uint64(workers), uint64(workers), c.Timeout)
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	started := time.Now()
	var last time.Time
	for r := range atk.Attack(targeter, scenario.BurstPacer{Hits: uint64(c.Requests)}, c.MaxDuration, name) {
		b.Requests++
		if int(r.Code) == ok {
			b.OK++
		} else {
			b.Others[int(r.Code)]++
		}
		last = r.Timestamp.Add(r.Latency)
	}
	if el := last.Sub(started); el > 0 {
		b.Elapsed = el
	}
	// A slow baseline meets the bursts' --max-duration cap too: its CPU
	// per answer still holds (CPU over the answers it got), but say so.
	b.Capped = b.Requests < c.Requests && ctx.Err() == nil
	b.Sum()
	return b
}
