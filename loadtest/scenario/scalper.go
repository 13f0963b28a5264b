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
	if limited {
		fig.LimitIntervalMS, fig.LimitBurst = results.MS(o.ScalperLimitInterval), o.ScalperLimitBurst
		fig.Target, fig.TargetVerdict = &o.ScalperTarget, o.ScalperTargetVerdict
		fig.DrawMS = results.MS(o.ScalperDraw)
		err = rl.Set(ctx, fig.LimitIntervalMS, fig.LimitBurst, []string{"address"}, fig.DrawMS)
	} else {
		err = rl.Set(ctx, 0, 1, []string{"account"}, 0)
	}
	if err != nil {
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

	t := newTally(0)
	var mu sync.Mutex // guards t, m, answers and the figures' counts
	var m vegeta.Metrics
	var answers []sent
	line := newProgress(progress, o.ProgressTTY, fmt.Sprintf("%-15s %-12s %d people", p.Scenario.Name, p.Stage, o.ScalperPeople), func() string {
		mu.Lock()
		defer mu.Unlock()
		return t.progressLine()
	})
	var soldOut atomic.Bool
	var seq atomic.Uint64
	// send sends one request of buyer from addr and counts it.
	send := func(buyer, attempt uint64, addr string, scalper bool) (answer, *vegeta.Result) {
		var tg vegeta.Target
		p.target(&tg, buyer, attempt)
		tg.Header.Set("X-Forwarded-For", addr)
		s := sendOne(ctx, client, tg, p.Series, seq.Add(1)-1)
		a := classify(s.result)
		mu.Lock()
		defer mu.Unlock()
		t.add(s.result, a)
		m.Add(s.result)
		answers = append(answers, s)
		won, limitedAnswer := a.outcome == outCreated, a.outcome == outTooMany && a.problem == "/problems/rate-limited"
		if scalper {
			fig.LastScalperAnswer = max(fig.LastScalperAnswer, s.result.Timestamp.Add(s.result.Latency).Sub(t0))
			fig.ScalperRequests++
			fig.ScalperWon += b2i(won)
			fig.ScalperLimited += b2i(limitedAnswer)
		} else {
			fig.NormalRequests++
			fig.NormalWon += b2i(won)
			fig.NormalLimited += b2i(limitedAnswer)
		}
		if a.outcome == outSoldOut || fig.NormalWon+fig.ScalperWon >= o.Stock {
			soldOut.Store(true)
		}
		return a, s.result
	}

	row := rand.Uint32()
	var wg sync.WaitGroup
	for i := range crowd.normals {
		at := t0.Add(rand.N(scalperWindow))
		wg.Go(func() {
			sleepCtx(ctx, time.Until(at))
			// One request, and again only when told to come back (a 429,
			// or a 503 with Retry-After), as the T-0 crowd does.
			for attempt := uint64(0); ctx.Err() == nil && !soldOut.Load(); attempt++ {
				a, r := send(uint64(i), attempt, personAddr(row, false, i), false)
				wait, again := comeBack(r, a)
				if !again || time.Since(t0)+wait > t0RetryFor {
					return
				}
				sleepCtx(ctx, wait)
			}
		})
	}
	var whoWon sync.Map
	for s := range crowd.scalpers {
		for acct := range scalperAccounts {
			wg.Go(func() {
				buyer := crowd.scalperAccount(s, acct)
				for k := 0; ; k++ {
					sleepCtx(ctx, time.Until(t0.Add(time.Duration(k)*scalperEvery)))
					if ctx.Err() != nil || soldOut.Load() || time.Since(t0) > scalperGiveUp {
						return
					}
					a, _ := send(buyer, uint64(k), personAddr(row, true, s), true)
					switch {
					case a.outcome == outCreated:
						whoWon.Store(s, true)
						return
					case a.outcome == outConflict && a.problem == problemNotOpen:
						// A shot a hair before the opening: a script fires on.
					case a.outcome == outSoldOut, a.outcome == outConflict: // sold out, or this account already bought
						return
					}
				}
			})
		}
	}
	wg.Wait()
	m.Close()
	line.stop()
	if err := ctx.Err(); err != nil {
		return res, fig, fmt.Errorf("%s under %s: %w", p.Scenario.Name, p.Stage, err)
	}
	if err := plotInOrder(pl, answers); err != nil {
		return res, fig, fmt.Errorf("plotting %s under %s: %w", p.Scenario.Name, p.Stage, err)
	}
	whoWon.Range(func(any, any) bool { fig.ScalpersWhoWon++; return true })
	if won := fig.NormalWon + fig.ScalperWon; won > 0 {
		share := float64(fig.ScalperWon) / float64(won)
		gain := share / fig.ShareOfPeople
		fig.ShareOfUnits, fig.Gain = &share, &gain
	}
	if limited {
		// What the limit lets through: a burst per address, and one more
		// per interval the scalpers kept firing.
		refills := int(fig.LastScalperAnswer / o.ScalperLimitInterval)
		fig.LimitAllows = fig.Scalpers * (o.ScalperLimitBurst + refills)
		met := fig.Gain != nil && *fig.Gain <= o.ScalperTarget
		fig.TargetMet = &met
		if won := fig.NormalWon + fig.ScalperWon; won > 0 {
			pv := results.BinomialTail(won, fig.ScalperWon, min(1, o.ScalperTarget*fig.ShareOfPeople))
			fig.MissedP = &pv
		}
	}
	return Result{tally: t, metrics: m}, fig, nil
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
