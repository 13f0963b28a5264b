package scenario

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
	"github.com/tsenart/vegeta/v12/lib/plot"

	"github.com/seckill-lab/seckill/loadtest/fleet"
	"github.com/seckill-lab/seckill/loadtest/results"
)

// The closed scenario: --closed-users virtual users, each of which buys,
// reads its answer, thinks for --closed-think and comes back, until
// --closed-duration has passed or it has bought --closed-iterations
// times. Every iteration is a new buyer (a new user id and
// Idempotency-Key), since a buyer may buy an item once. It is the traffic
// behind a waiting room: never more than the users in flight, and a slow
// shop slows the arrivals down with it. Each user's arrival is the end of
// its think time, so buyer time less response time is how late the lab
// sent it after that (a goroutine or the CPU); there is no rate to fall
// behind, and fell-behind does not apply.

// closedClock is a user's time: the wall clock in a run, a fake one in a
// test, so that think time can be counted without waiting it out.
type closedClock interface {
	Now() time.Time
	Sleep(ctx context.Context, d time.Duration)
}

type wallClock struct{}

func (wallClock) Now() time.Time                             { return time.Now() }
func (wallClock) Sleep(ctx context.Context, d time.Duration) { sleepCtx(ctx, d) }

// closedLoop is the population at work.
type closedLoop struct {
	users, iterations int
	think, duration   time.Duration
	// clockOf is user i's clock; send sends, for user i, the one
	// request of buyer n.
	clockOf func(user int) closedClock
	send    func(ctx context.Context, user int, buyer uint64) sent
	// record takes each answer, with its buyer's arrival set.
	record func(s sent)
	next   atomic.Uint64 // the next buyer's number
}

// run starts every user at once and returns when the last one stopped.
func (l *closedLoop) run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range l.users {
		wg.Go(func() { l.user(ctx, i) })
	}
	wg.Wait()
}

// user is one virtual user's loop: buy as a new buyer, read the answer,
// think, come back. Its first arrival is the run's start; each later one
// is its last answer plus the think time.
func (l *closedLoop) user(ctx context.Context, i int) {
	clk := l.clockOf(i)
	arrives := clk.Now()
	until := arrives.Add(l.duration)
	for k := 0; l.iterations == 0 || k < l.iterations; k++ {
		if ctx.Err() != nil || (l.duration > 0 && !arrives.Before(until)) {
			return
		}
		s := l.send(ctx, i, l.next.Add(1)-1)
		s.due = arrives
		l.record(s)
		arrives = clk.Now().Add(l.think)
		clk.Sleep(ctx, l.think)
	}
}

// closedCrowd is the closed scenario's crowd.
type closedCrowd struct{}

func (closedCrowd) Attack(ctx context.Context, o Config, _ *fleet.Fleet, p Plan, pl *plot.Plot, progress io.Writer) (Result, error) {
	tr := newBuyerTransport(o.ClosedUsers, o.Timeout)
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: o.Timeout, CheckRedirect: noRedirect}
	if err := warm(ctx, client, p.Targets, o.ClosedUsers); err != nil {
		return Result{}, err
	}
	var mu sync.Mutex // guards t, m and answers
	t, clk := newTally(0), newClocks(results.ScheduleClosed, 0, o.ClosedUsers)
	var m vegeta.Metrics
	var answers []sent
	line := newProgress(progress, o.ProgressTTY, fmt.Sprintf("%-11s %-12s %4d users", p.Scenario.Name, p.Stage, o.ClosedUsers), func() string {
		mu.Lock()
		defer mu.Unlock()
		return t.progressLine()
	})
	l := &closedLoop{users: o.ClosedUsers, iterations: o.ClosedIterations, think: o.ClosedThink, duration: o.ClosedDuration,
		clockOf: func(int) closedClock { return wallClock{} },
		send: func(ctx context.Context, _ int, buyer uint64) sent {
			var tg vegeta.Target
			p.target(&tg, buyer, 0)
			return sendOne(ctx, client, tg, p.Series, buyer)
		},
		record: func(s sent) {
			clk.add(s.result, s.due)
			mu.Lock()
			defer mu.Unlock()
			t.add(s.result, classify(s.result))
			m.Add(s.result)
			answers = append(answers, s)
		},
	}
	l.run(ctx)
	m.Close()
	line.stop()
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("%s under %s: %w", p.Scenario.Name, p.Stage, err)
	}
	if err := plotInOrder(pl, answers); err != nil {
		return Result{}, fmt.Errorf("plotting %s under %s: %w", p.Scenario.Name, p.Stage, err)
	}
	return Result{tally: t, metrics: m, clocks: clk}, nil
}

// ClosedProblems says what is wrong with the closed scenario's settings
// in o, flag by flag; none when they make a run that ends.
func ClosedProblems(o Config) []string {
	var bad []string
	if o.ClosedUsers < 1 {
		bad = append(bad, "--closed-users must be at least 1")
	}
	if o.ClosedThink < 0 || o.ClosedDuration < 0 || o.ClosedIterations < 0 {
		bad = append(bad, "--closed-think, --closed-duration and --closed-iterations must not be negative")
	}
	if o.ClosedDuration == 0 && o.ClosedIterations == 0 {
		bad = append(bad, "--closed-duration or --closed-iterations must be set, or the closed users never stop")
	}
	return bad
}
