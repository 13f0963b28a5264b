package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
	"github.com/tsenart/vegeta/v12/lib/plot"

	"github.com/seckill-lab/seckill/loadtest/fleet"
	"github.com/seckill-lab/seckill/loadtest/results"
)

// The T-0 scenario: a sale that opens at a set instant, and a crowd that
// is there before it. The lab reads the reference clock (the item's
// server_time), resets the item with opens_at --t0-lead ahead of it, and
// gives every buyer a connection of its own. Each buyer sends its buy at
// once, early: the answer must be 409 sale-not-open, which both proves the
// buyer early and leaves its connection open. Then every buyer waits at a
// barrier that the lab opens at T-0, the opening on the reference clock
// translated to its own, and all of them buy again, with the same
// Idempotency-Key (a refusal lets the key go). A buyer told to come back
// (429, or 503 with Retry-After) does, after the Retry-After it was given,
// with the same key, for up to t0RetryFor after T-0: a crowd that all
// arrives at once is partly turned away, and the units left must still
// sell to those who come back.
//
// The verdict adds two rules: nothing sold before opens_at (each order's
// created_at, the value the database stores, against the opens_at it
// stores) and, for a safe stage, the whole stock sold: no more, no less.

// errT0Late means the early crowd was still being answered at T-0: an
// answer after the opening may be a sale, and the early requests would no
// longer prove anything. A longer --t0-lead gives them time.
var errT0Late = errors.New("the early crowd was not answered before T-0")

// problemNotOpen is the problem type of a buy before the sale opens.
const problemNotOpen = "/problems/sale-not-open"

// t0RetryFor bounds how long after T-0 a buyer told to come back does.
const t0RetryFor = 15 * time.Second

// comeBack is how long a buyer waits before it asks again after r, and
// whether r told it to ask again at all: a 429, or a 503 with Retry-After,
// decided nothing. It waits what Retry-After says (seconds), at least
// 50 ms.
func comeBack(r *vegeta.Result, a answer) (time.Duration, bool) {
	if a.outcome != outTooMany && a.outcome != outOverloaded {
		return 0, false
	}
	wait := 50 * time.Millisecond
	if secs, err := strconv.ParseFloat(r.Headers.Get("Retry-After"), 64); err == nil && secs > 0 {
		wait = max(wait, time.Duration(secs*float64(time.Second)))
	}
	return wait, true
}

// t0Tries is how many times a T-0 row is tried, doubling the lead each
// time, before an early crowd that overruns T-0 fails it.
const t0Tries = 3

// t0Leads runs t0Attack, and when the early crowd was still being answered
// at T-0 (a machine busier than the lead allowed for), runs it again with
// twice the lead and new buyers: the reset clears whatever the late early
// answers sold, and new Idempotency-Keys keep their records out of it.
func t0Leads(ctx context.Context, o Config, f *fleet.Fleet, p Plan, stock int, pl *plot.Plot, progress io.Writer) (Result, results.T0, error) {
	tag := p.Tag
	for try := 1; ; try++ {
		res, fig, err := t0Attack(ctx, o, f, p, stock, pl, progress)
		fig.Tries = try
		if !errors.Is(err, errT0Late) || try == t0Tries {
			return res, fig, err
		}
		fmt.Fprintf(progress, "lab: %s under %s: %v; trying again with the opening %v ahead\n", p.Scenario.Name, p.Stage, err, 2*o.T0Lead)
		o.T0Lead *= 2
		p.Tag = fmt.Sprintf("%s-t%d", tag, try+1)
	}
}

// t0Attack resets the item with its sale opening --t0-lead ahead, sends
// the early crowd, and releases it at T-0.
func t0Attack(ctx context.Context, o Config, f *fleet.Fleet, p Plan, stock int, pl *plot.Plot, progress io.Writer) (Result, results.T0, error) {
	fig := results.T0{LeadMS: results.MS(o.T0Lead), Buyers: o.T0Buyers, EarlyOther: map[string]int{}}
	t0, err := openAtT0(ctx, o, f, p, stock, &fig)
	if err != nil {
		return Result{}, fig, err
	}
	// The buyers who come back make more requests than buyers.
	run := &t0Run{ctx: ctx, p: p, t0: t0, t: newTally(0), open: make(chan struct{}), abort: make(chan struct{}),
		clk: newClocks(results.ScheduleT0, 0, 0)}
	line := newProgress(progress, o.ProgressTTY, fmt.Sprintf("%-11s %-12s %4d at T-0", p.Scenario.Name, p.Stage, o.T0Buyers), func() string {
		run.mu.Lock()
		defer run.mu.Unlock()
		return run.t.progressLine()
	})
	defer line.stop()

	transports := make([]*http.Transport, o.T0Buyers)
	defer func() {
		for _, tr := range transports {
			tr.CloseIdleConnections()
		}
	}()
	for b := range o.T0Buyers {
		tr := newBuyerTransport(1, o.Timeout)
		transports[b] = tr
		client := &http.Client{Transport: tr, Timeout: o.Timeout, CheckRedirect: noRedirect}
		var tg vegeta.Target
		p.target(&tg, uint64(b), 0)
		run.answeredEarly.Add(1)
		run.done.Go(func() { run.buyer(uint64(b), client, tg) })
	}
	run.answeredEarly.Wait()
	fig.MarginMS = results.MS(time.Until(t0))
	if fig.MarginMS <= 0 || ctx.Err() != nil {
		close(run.abort)
		run.done.Wait()
		if err := ctx.Err(); err != nil {
			return Result{}, fig, err
		}
		return Result{}, fig, fmt.Errorf("%w: the last early answer came %.0f ms after it, %v after the reset; raise --t0-lead", errT0Late, -fig.MarginMS, o.T0Lead)
	}
	sleepCtx(ctx, time.Until(t0))
	fig.ReleaseLateMS = results.MS(time.Since(t0))
	close(run.open)
	run.done.Wait()
	run.m.Close()
	if err := ctx.Err(); err != nil {
		return Result{}, fig, fmt.Errorf("%s under %s: %w", p.Scenario.Name, p.Stage, err)
	}
	if err := plotInOrder(pl, run.buys); err != nil {
		return Result{}, fig, fmt.Errorf("plotting %s under %s: %w", p.Scenario.Name, p.Stage, err)
	}
	fillT0(&fig, run.early, run.buys, t0)
	return Result{tally: run.t, metrics: run.m, clocks: run.clk}, fig, nil
}

// openAtT0 resets the item with its sale opening o.T0Lead ahead on the
// reference clock, and returns the opening on the lab's clock.
func openAtT0(ctx context.Context, o Config, f *fleet.Fleet, p Plan, stock int, fig *results.T0) (time.Time, error) {
	offset, err := f.ClockOffset(ctx, p.Scenario.Item(p.ItemID))
	if err != nil {
		return time.Time{}, err
	}
	fig.ClockOffsetMS = results.MS(offset)
	want := time.Now().Add(offset).Add(o.T0Lead).UTC().Truncate(time.Millisecond)
	reply, err := f.ResetSale(ctx, p.Scenario.Item(p.ItemID), stock, want)
	if err != nil {
		return time.Time{}, err
	}
	if reply.OpensAt == nil {
		return time.Time{}, fmt.Errorf("the reset answered no opens_at: the targets keep no sale window")
	}
	fig.OpensAt = reply.OpensAt.UTC()
	return fig.OpensAt.Add(-offset), nil
}

// t0Run is the T-0 crowd in flight: every buyer asks once early, waits at
// the barrier, and buys when it opens.
type t0Run struct {
	ctx                 context.Context
	p                   Plan
	t0                  time.Time // the opening on the lab's clock
	open, abort         chan struct{}
	answeredEarly, done sync.WaitGroup

	mu          sync.Mutex // guards t, m, early, buys
	t           *tally
	m           vegeta.Metrics
	early, buys []sent
	clk         *clocks // the buys at T-0 and the come-backs; guards itself
}

// buyer b asks once before the opening, then buys at T-0, and again only
// when told to come back.
func (run *t0Run) buyer(b uint64, client *http.Client, tg vegeta.Target) {
	ctx := run.ctx
	s := sendOne(ctx, client, tg, run.p.Series, b)
	run.mu.Lock()
	run.early = append(run.early, s)
	run.mu.Unlock()
	run.answeredEarly.Done()
	select {
	case <-run.open:
	case <-run.abort:
		return
	}
	// The buyer arrives at T-0, and again when told to come back.
	for due := run.t0; ctx.Err() == nil; {
		s = sendOne(ctx, client, tg, run.p.Series, b)
		s.due = due
		run.clk.add(s.result, due)
		a := classify(s.result)
		run.mu.Lock()
		run.buys = append(run.buys, s)
		run.t.add(s.result, a)
		run.m.Add(s.result)
		run.mu.Unlock()
		wait, again := comeBack(s.result, a)
		if !again || time.Since(run.t0)+wait > t0RetryFor {
			return
		}
		due = time.Now().Add(wait)
		sleepCtx(ctx, wait)
	}
}

// fill counts the early answers and the T-0 buys' into fig; t0 is the
// opening on the lab's clock.
func fillT0(fig *results.T0, early, buys []sent, t0 time.Time) {
	soldEarly := map[string]bool{}
	for _, s := range early {
		a := classify(s.result)
		switch {
		case a.problem == problemNotOpen:
			fig.RefusedEarly++
		default:
			fig.EarlyOther[answerName(s.result, a)]++
		}
		// A sale before the opening, whatever its created_at says (an
		// answer without one is read as the zero time).
		if a.outcome == outCreated && a.createdAt.Before(fig.OpensAt) {
			soldEarly[a.user] = true
		}
	}
	var lastOrder, lastAnswer time.Time
	var first []time.Duration
	for _, s := range buys {
		r := s.result
		a := classify(r)
		if a.problem == problemNotOpen {
			fig.RefusedAtT0++
		}
		if r.Timestamp.Before(t0.Add(time.Second)) { // come-backs in it too
			first = append(first, r.Latency)
		}
		if a.outcome != outCreated {
			continue
		}
		if a.createdAt.Before(fig.OpensAt) {
			soldEarly[a.user] = true
		}
		if a.createdAt.After(lastOrder) {
			lastOrder = a.createdAt
		}
		if e := r.End(); e.After(lastAnswer) {
			lastAnswer = e
		}
	}
	fig.SoldEarly = len(soldEarly)
	if !lastOrder.IsZero() {
		d := results.MS(lastOrder.Sub(fig.OpensAt))
		fig.ToLastOrderMS, fig.LastOrderBy = &d, "answers"
	}
	if !lastAnswer.IsZero() {
		d := results.MS(lastAnswer.Sub(t0))
		fig.ToLastSaleAnswerMS = &d
	}
	fig.FirstSecond = len(first)
	fig.FirstSecondP50ms, fig.FirstSecondP99ms = percentileMS(first, 0.50), percentileMS(first, 0.99)
}

// answerName names an answer for a count: its status and problem type,
// or "no answer".
func answerName(r *vegeta.Result, a answer) string {
	switch {
	case r.Code == 0:
		return "no answer"
	case a.problem != "":
		return fmt.Sprintf("%d %s", r.Code, a.problem)
	}
	return fmt.Sprintf("%d", r.Code)
}
