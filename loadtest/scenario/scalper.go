package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
	"github.com/tsenart/vegeta/v12/lib/plot"

	"github.com/seckill-lab/seckill/loadtest/fleet"
	"github.com/seckill-lab/seckill/loadtest/results"
)

// The scalper scenarios: the people of a sale are ordinary buyers (90%),
// each one account sending one request at a random instant of the first
// second (and coming back when told to, as the T-0 crowd does), and
// scalpers (10%), each with scalperAccounts accounts behind
// one client address, every account firing one request every
// scalperEvery from T-0 until it wins, is told it already bought, or the
// Item is sold out. Each person's address reaches the instances in
// X-Forwarded-For, which they believe only from a trusted proxy
// (SECKILL_TRUSTED_PROXIES; lab.sh sets it for the fleets it starts).
//
// "scalper" runs with the fleet's rate limit off, and shows what the
// scalpers gain; "scalper-limited" turns a per-address limit on (PUT
// /api/v1/admin/rate-limit on every target: --scalper-limit-burst buys at
// once, then one per --scalper-limit-interval) and restores each target's
// own afterwards. The gain is the scalpers' share of the units sold over
// their share of the people; a limited row fails above --scalper-target.

const (
	scalperAccounts = 10
	scalperEvery    = 50 * time.Millisecond
	// scalperShare is the scalpers' part of the people, in tenths.
	scalperShare = 10
	// scalperWindow is how long the ordinary buyers take to arrive.
	scalperWindow = time.Second
	// scalperGiveUp ends a scalper's account that has not won by then.
	scalperGiveUp = 10 * time.Second
)

// scalperCrowd is the people of one scalper row.
type scalperCrowd struct {
	normals, scalpers int
}

func newScalperCrowd(people int) scalperCrowd {
	s := max(1, people*scalperShare/100)
	return scalperCrowd{normals: people - s, scalpers: s}
}

// buyer numbers: the ordinary buyers first, then each scalper's accounts.
func (c scalperCrowd) scalperAccount(s, a int) uint64 {
	return uint64(c.normals + s*scalperAccounts + a)
}

// personAddr is the client address person n of a row sends from: an IPv6
// address of a unique local prefix made of the row's random id, ordinary
// buyers and scalpers apart. The limiter's counts of an address outlive
// the row in Redis, so no two rows may share one.
func personAddr(row uint32, scalper bool, n int) string {
	kind := 1
	if scalper {
		kind = 2
	}
	return fmt.Sprintf("fd00:%x:%x::%x:%x", row>>16, row&0xffff, kind, n)
}

// scalperAttack runs one scalper row of plan: the limit set (limited) or
// off, the crowd, and each target's own limit restored.
func scalperAttack(ctx context.Context, o Config, f *fleet.Fleet, p Plan, limited bool, pl *plot.Plot, progress io.Writer) (res Result, fig results.Scalper, err error) {
	crowd := newScalperCrowd(o.ScalperPeople)
	fig = results.Scalper{People: o.ScalperPeople, Scalpers: crowd.scalpers, Accounts: scalperAccounts, Limited: limited,
		ShareOfPeople: float64(crowd.scalpers) / float64(o.ScalperPeople)}
	rl, err := fleet.TakeRateLimits(ctx, f)
	if err != nil {
		return res, fig, err
	}
	defer func() {
		// The limit goes back even when the row was cancelled.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if rerr := rl.Restore(rctx); rerr != nil {
			err = errors.Join(err, fmt.Errorf("restoring the targets' rate limits: %w", rerr))
		}
	}()
	if err := setScalperLimit(ctx, o, rl, limited, &fig); err != nil {
		return res, fig, err
	}
	t0 := time.Now().Add(50 * time.Millisecond) // T-0: the scalpers' first shot
	if fig.DrawMS > 0 {
		// A draw holds the buyers of an opening: the sale opens at T-0,
		// set on the reference clock.
		if t0, err = openAhead(ctx, o, f, p, &fig); err != nil {
			return res, fig, err
		}
	}

	conns := crowd.normals + crowd.scalpers*scalperAccounts
	tr := newBuyerTransport(conns, o.Timeout)
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: o.Timeout, CheckRedirect: noRedirect}
	if err := warm(ctx, client, p.Targets, min(conns, 64)); err != nil {
		return res, fig, err
	}

	run := &scalperRun{ctx: ctx, o: o, p: p, client: client, t0: t0, t: newTally(0), fig: &fig, row: rand.Uint32(),
		clk: newClocks(results.ScheduleScalper, 0, 0)}
	line := newProgress(progress, o.ProgressTTY, fmt.Sprintf("%-15s %-12s %d people", p.Scenario.Name, p.Stage, o.ScalperPeople), func() string {
		run.mu.Lock()
		defer run.mu.Unlock()
		return run.t.progressLine()
	})
	run.fire(crowd)
	run.m.Close()
	line.stop()
	if err := ctx.Err(); err != nil {
		return res, fig, fmt.Errorf("%s under %s: %w", p.Scenario.Name, p.Stage, err)
	}
	if err := plotInOrder(pl, run.answers); err != nil {
		return res, fig, fmt.Errorf("plotting %s under %s: %w", p.Scenario.Name, p.Stage, err)
	}
	run.whoWon.Range(func(any, any) bool { fig.ScalpersWhoWon++; return true })
	scoreScalpers(o, limited, &fig)
	return Result{tally: run.t, metrics: run.m, clocks: run.clk}, fig, nil
}

// setScalperLimit sets the row's limit on every target: per address, with
// the opening draw, when limited; else one unit per account, as ever.
func setScalperLimit(ctx context.Context, o Config, rl *fleet.RateLimits, limited bool, fig *results.Scalper) error {
	if !limited {
		return rl.Set(ctx, 0, 1, []string{"account"}, 0)
	}
	fig.LimitIntervalMS, fig.LimitBurst = results.MS(o.ScalperLimitInterval), o.ScalperLimitBurst
	fig.Target, fig.TargetVerdict = &o.ScalperTarget, o.ScalperTargetVerdict
	fig.DrawMS = results.MS(o.ScalperDraw)
	return rl.Set(ctx, fig.LimitIntervalMS, fig.LimitBurst, []string{"address"}, fig.DrawMS)
}

// scalperRun is one scalper row in flight: the people firing, and what
// their answers add up to.
type scalperRun struct {
	ctx    context.Context
	o      Config
	p      Plan
	client *http.Client
	t0     time.Time
	row    uint32 // the row's addresses, one per person

	mu      sync.Mutex // guards t, m, answers and the figures' counts
	t       *tally
	m       vegeta.Metrics
	answers []sent
	fig     *results.Scalper

	clk *clocks // guards itself

	soldOut atomic.Bool
	seq     atomic.Uint64
	whoWon  sync.Map // scalpers with a unit
}

// fire sends every person's requests and waits for the last.
func (run *scalperRun) fire(crowd scalperCrowd) {
	var wg sync.WaitGroup
	for i := range crowd.normals {
		at := run.t0.Add(rand.N(scalperWindow))
		wg.Go(func() { run.normal(i, at) })
	}
	for s := range crowd.scalpers {
		for acct := range scalperAccounts {
			wg.Go(func() { run.scalper(s, crowd.scalperAccount(s, acct)) })
		}
	}
	wg.Wait()
}

// normal is ordinary buyer i: one request at its moment, and again only
// when told to come back (a 429, or a 503 with Retry-After), as the T-0
// crowd does.
func (run *scalperRun) normal(i int, at time.Time) {
	ctx := run.ctx
	sleepCtx(ctx, time.Until(at))
	for attempt, due := uint64(0), at; ctx.Err() == nil && !run.soldOut.Load(); attempt++ {
		a, r := run.send(uint64(i), attempt, personAddr(run.row, false, i), false, due)
		wait, again := comeBack(r, a)
		if !again || time.Since(run.t0)+wait > t0RetryFor {
			return
		}
		due = time.Now().Add(wait)
		sleepCtx(ctx, wait)
	}
}

// scalper is one account of scalper s: a shot every scalperEvery from
// T-0, until it wins, the sale is sold out, or it gives up.
func (run *scalperRun) scalper(s int, buyer uint64) {
	ctx := run.ctx
	for k := 0; ; k++ {
		due := run.t0.Add(time.Duration(k) * scalperEvery)
		sleepCtx(ctx, time.Until(due))
		if ctx.Err() != nil || run.soldOut.Load() || time.Since(run.t0) > scalperGiveUp {
			return
		}
		a, _ := run.send(buyer, uint64(k), personAddr(run.row, true, s), true, due)
		switch {
		case a.outcome == outCreated:
			run.whoWon.Store(s, true)
			return
		case a.outcome == outConflict && a.problem == problemNotOpen:
			// A shot a hair before the opening: a script fires on.
		case a.outcome == outSoldOut, a.outcome == outConflict: // sold out, or this account already bought
			return
		}
	}
}

// send sends one request of buyer from addr, due at due, and counts it.
func (run *scalperRun) send(buyer, attempt uint64, addr string, scalper bool, due time.Time) (answer, *vegeta.Result) {
	var tg vegeta.Target
	run.p.target(&tg, buyer, attempt)
	tg.Header.Set("X-Forwarded-For", addr)
	s := sendOne(run.ctx, run.client, tg, run.p.Series, run.seq.Add(1)-1)
	s.due = due
	run.clk.add(s.result, due)
	a := classify(s.result)
	run.mu.Lock()
	defer run.mu.Unlock()
	run.t.add(s.result, a)
	run.m.Add(s.result)
	run.answers = append(run.answers, s)
	fig := run.fig
	won, limitedAnswer := a.outcome == outCreated, a.outcome == outTooMany && a.problem == "/problems/rate-limited"
	if scalper {
		fig.LastScalperAnswer = max(fig.LastScalperAnswer, s.result.Timestamp.Add(s.result.Latency).Sub(run.t0))
		fig.ScalperRequests++
		fig.ScalperWon += b2i(won)
		fig.ScalperLimited += b2i(limitedAnswer)
	} else {
		fig.NormalRequests++
		fig.NormalWon += b2i(won)
		fig.NormalLimited += b2i(limitedAnswer)
	}
	if a.outcome == outSoldOut || fig.NormalWon+fig.ScalperWon >= run.o.Stock {
		run.soldOut.Store(true)
	}
	return a, s.result
}

// scoreScalpers sets the scalpers' share of the units and their gain and,
// on a limited row, what the limit lets through and whether the target
// was met.
func scoreScalpers(o Config, limited bool, fig *results.Scalper) {
	if won := fig.NormalWon + fig.ScalperWon; won > 0 {
		share := float64(fig.ScalperWon) / float64(won)
		gain := share / fig.ShareOfPeople
		fig.ShareOfUnits, fig.Gain = &share, &gain
	}
	if !limited {
		return
	}
	// What the limit lets through: a burst per address, and one more per
	// interval the scalpers kept firing.
	refills := int(fig.LastScalperAnswer / o.ScalperLimitInterval)
	fig.LimitAllows = fig.Scalpers * (o.ScalperLimitBurst + refills)
	met := fig.Gain != nil && *fig.Gain <= o.ScalperTarget
	fig.TargetMet = &met
	if won := fig.NormalWon + fig.ScalperWon; won > 0 {
		pv := results.BinomialTail(won, fig.ScalperWon, min(1, o.ScalperTarget*fig.ShareOfPeople))
		fig.MissedP = &pv
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// openAhead resets the row's item with its sale opening ahead on the
// reference clock (the reset must answer before it) and returns the
// opening on the lab's clock.
func openAhead(ctx context.Context, o Config, f *fleet.Fleet, p Plan, fig *results.Scalper) (time.Time, error) {
	offset, err := f.ClockOffset(ctx, p.Scenario.Item(p.ItemID))
	if err != nil {
		return time.Time{}, err
	}
	want := time.Now().Add(offset).Add(o.T0Lead).UTC().Truncate(time.Millisecond)
	reply, err := f.ResetSale(ctx, p.Scenario.Item(p.ItemID), o.Stock, want)
	if err != nil {
		return time.Time{}, err
	}
	if reply.OpensAt == nil {
		return time.Time{}, fmt.Errorf("the reset answered no opens_at: the targets keep no sale window, and a draw needs an opening")
	}
	opens := reply.OpensAt.UTC()
	fig.OpensAt = &opens
	t0 := opens.Add(-offset)
	if time.Until(t0) <= 0 {
		return time.Time{}, fmt.Errorf("the reset answered after the opening it set (%v ahead): give --t0-lead more", o.T0Lead)
	}
	return t0, nil
}
