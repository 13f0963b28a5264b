package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
	"github.com/tsenart/vegeta/v12/lib/plot"

	"github.com/seckill-lab/seckill/loadtest/results"
)

// The paced scenario: buyers arrive one after another, one every --pace,
// faster than a stage sells (5 ms apart is 200 a second), each a new
// buyer with one request. The lab records the instant each request was
// written, which is the order the buyers asked in, and scores the stage
// by who won (fairness.go). Arrivals stop once the answers say every unit
// is sold: later ones can only be told "sold out", and the score is
// decided.

// pacedAttack sends the paced arrivals of plan and returns what they came
// to, with the paced figures.
func pacedAttack(ctx context.Context, o Config, p Plan, stock int, pl *plot.Plot, progress io.Writer) (Result, results.Paced, error) {
	fig := results.Paced{PaceMS: results.MS(o.Pace), Planned: o.PacedBuyers, Stock: stock}
	// Connections are opened before the first arrival (as many as
	// --workers), so that the first buyers do not pay for a dial that
	// later ones skip.
	tr := newBuyerTransport(o.Workers, o.Timeout)
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: o.Timeout, CheckRedirect: noRedirect}
	if err := warm(ctx, client, p.Targets, o.Workers); err != nil {
		return Result{}, fig, err
	}

	run := &pacedRun{ctx: ctx, p: p, client: client, t: newTally(0), arrivals: make([]arrival, 0, o.PacedBuyers),
		clk: newClocks(results.SchedulePaced, perSecond(o.Pace), 0)}
	line := newProgress(progress, o.ProgressTTY, fmt.Sprintf("%-11s %-12s every %v", p.Scenario.Name, p.Stage, o.Pace), func() string {
		run.mu.Lock()
		defer run.mu.Unlock()
		return run.t.progressLine()
	})
	var wg sync.WaitGroup
	start := time.Now().Add(20 * time.Millisecond)
	for i := range o.PacedBuyers {
		intended := start.Add(time.Duration(i) * o.Pace)
		if d := time.Until(intended); d > 0 {
			sleepCtx(ctx, d)
		}
		if ctx.Err() != nil || run.sold.Load() >= int64(stock) {
			break
		}
		var tg vegeta.Target
		p.target(&tg, uint64(i), 0)
		wg.Go(func() { run.arrive(i, intended, tg) })
	}
	wg.Wait()
	run.m.Close()
	line.stop()
	if err := ctx.Err(); err != nil {
		return Result{}, fig, fmt.Errorf("%s under %s: %w", p.Scenario.Name, p.Stage, err)
	}
	if err := plotInOrder(pl, run.answers); err != nil {
		return Result{}, fig, fmt.Errorf("plotting %s under %s: %w", p.Scenario.Name, p.Stage, err)
	}
	fig.PeakInFlight = int(run.peak.Load())
	scorePaced(o, p, stock, run.arrivals, &fig)
	return Result{tally: run.t, metrics: run.m, clocks: run.clk}, fig, nil
}

// pacedRun is the paced arrivals in flight.
type pacedRun struct {
	ctx    context.Context
	p      Plan
	client *http.Client

	sold, inFlight, peak atomic.Int64

	mu       sync.Mutex // guards t, m, answers and arrivals
	t        *tally
	m        vegeta.Metrics
	answers  []sent
	arrivals []arrival
	clk      *clocks // guards itself
}

// arrive sends arrival i, planned for intended, and records who won.
func (run *pacedRun) arrive(i int, intended time.Time, tg vegeta.Target) {
	n := run.inFlight.Add(1)
	for {
		pk := run.peak.Load()
		if n <= pk || run.peak.CompareAndSwap(pk, n) {
			break
		}
	}
	s := sendOne(run.ctx, run.client, tg, run.p.Series, uint64(i))
	s.due = intended
	run.inFlight.Add(-1)
	run.clk.add(s.result, intended)
	a := classify(s.result)
	if a.outcome == outCreated {
		run.sold.Add(1)
	}
	run.mu.Lock()
	defer run.mu.Unlock()
	run.t.add(s.result, a)
	run.m.Add(s.result)
	run.answers = append(run.answers, s)
	run.arrivals = append(run.arrivals, arrival{seq: i, intended: intended, sent: s.wrote, won: a.outcome == outCreated})
}

// scorePaced sets the lab's jitter, who won, the first-come score and the
// stage's target.
func scorePaced(o Config, p Plan, stock int, arrivals []arrival, fig *results.Paced) {
	j := schedulingJitter(arrivals)
	fig.Arrivals, fig.JitterP50ms, fig.JitterP99ms, fig.JitterMaxMs, fig.Reordered = j.Measured, j.P50ms, j.P99ms, j.MaxMs, j.Reordered
	fig.JitterWindow = jitterWindow(j.P99ms, fig.PaceMS)
	fig.LateWins = lateWins(arrivals, stock, fig.JitterWindow)
	score, firstWon, won, ok := firstCome(arrivals, stock)
	fig.FirstWon, fig.Won = firstWon, won
	if ok {
		fig.Score = &score
	}
	if target, ok := o.FirstComeTargets[p.Stage]; ok {
		fig.Target = &target
	}
}

// warm opens n connections to each target (GET /healthz, n at once), for
// the transport to keep. It fails when a target does not answer.
func warm(ctx context.Context, client *http.Client, targets []string, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, n*len(targets))
	for _, target := range targets {
		for range n {
			wg.Go(func() {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, target+"/healthz", nil)
				if err == nil {
					var resp *http.Response
					if resp, err = client.Do(req); err == nil {
						_, err = io.Copy(io.Discard, resp.Body)
						err = errors.Join(err, resp.Body.Close())
					}
				}
				if err != nil {
					errs <- fmt.Errorf("opening connections to %s: %w", target, err)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	return <-errs // the first, if any: one says what is wrong
}

// sleepCtx sleeps for d, or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
	case <-tm.C:
	}
}

// noRedirect hands a redirect back as the answer, as the attack does.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
