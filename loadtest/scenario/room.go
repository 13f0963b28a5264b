package scenario

import (
	"context"
	"encoding/json"
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

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/loadtest/fleet"
	"github.com/seckill-lab/seckill/loadtest/results"
)

// The waiting-room scenario: the lab sets a room on the item (--room-rate
// passes per second, --room-max-inside, a --room-shuffle opening span,
// the opening --room-lead ahead), and a crowd of --room-people joins it.
// Most join in the half lead before the opening or within the first half
// of the span, and get their places by the shuffle; a fifth of the
// ordinary people join one by one after the span (late joiners, whose
// places must follow their arrival). --room-scalpers of the people have
// roomAccounts accounts each behind one address, all joining at once and
// polling every roomScalperEvery whatever the room advises. Every other
// account polls when poll_after_ms says (Retry-After after a 429 or a
// 503), buys with its pass once admitted, and stops on sold-out. The
// room is removed after the row. Scores: roomscore.go.

const (
	roomAccounts     = 10
	roomScalperEvery = 200 * time.Millisecond
	// roomLatePace is the time between two late joiners.
	roomLatePace = 50 * time.Millisecond
	// roomLateShare is the late joiners' part of the ordinary people, in
	// tenths.
	roomLateShare = 2
)

// roomCrowd is the waiting-room scenario's crowd.
type roomCrowd struct{}

// roomPlan is one row's people: accounts 0..ordinary-1 are ordinary
// people (the first early ones early, the rest late), then each
// scalper's accounts.
type roomPlan struct {
	ordinary, late, scalpers int
}

func newRoomPlan(o Config) roomPlan {
	ordinary := max(0, o.RoomPeople-o.RoomScalpers)
	return roomPlan{ordinary: ordinary, late: ordinary * roomLateShare / 10, scalpers: o.RoomScalpers}
}

func (pl roomPlan) accounts() int { return pl.ordinary + pl.scalpers*roomAccounts }

func (roomCrowd) Attack(ctx context.Context, o Config, f *fleet.Fleet, p Plan, pl *plot.Plot, progress io.Writer) (res Result, err error) {
	plan := newRoomPlan(o)
	fig := &results.Room{PassesPerSecond: o.RoomRate, MaxInside: o.RoomMaxInside, ShuffleMS: results.MS(o.RoomShuffle),
		People: o.RoomPeople, Scalpers: o.RoomScalpers, AccountsEach: roomAccounts, Late: plan.late}
	res.Room = fig
	t0, err := openRoom(ctx, o, f, p, fig)
	if err != nil {
		return res, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if rerr := f.RemoveRoom(rctx, p.ItemID); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	tr := newBuyerTransport(plan.accounts(), o.Timeout)
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: o.Timeout, CheckRedirect: noRedirect}
	if err := warm(ctx, client, p.Targets, min(plan.accounts(), 64)); err != nil {
		return res, err
	}
	run := &roomRun{ctx: ctx, o: o, p: p, client: client, t0: t0, giveUp: t0.Add(o.RoomShuffle + o.RoomGiveUp),
		row: rand.Uint32(), t: newTally(0), clk: newClocks(results.ScheduleRoom, 0, 0), tickets: make([]roomTicket, plan.accounts())}
	line := newProgress(progress, o.ProgressTTY, fmt.Sprintf("%-15s %-12s %d people", p.Scenario.Name, p.Stage, o.RoomPeople), func() string {
		run.mu.Lock()
		defer run.mu.Unlock()
		return run.t.progressLine()
	})
	run.fire(plan)
	run.m.Close()
	line.stop()
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("%s under %s: %w", p.Scenario.Name, p.Stage, err)
	}
	if err := plotInOrder(pl, run.answers); err != nil {
		return res, fmt.Errorf("plotting %s under %s: %w", p.Scenario.Name, p.Stage, err)
	}
	countRoom(fig, run.tickets)
	scoreRoom(fig, run.tickets, buySends(run.tickets), lastSale(run.tickets), o.RoomRateWindow)
	return Result{tally: run.t, metrics: run.m, clocks: run.clk, Room: fig}, nil
}

// openRoom sets the row's room with its opening o.RoomLead ahead on the
// reference clock, restocked, and returns the opening on the lab's clock.
func openRoom(ctx context.Context, o Config, f *fleet.Fleet, p Plan, fig *results.Room) (time.Time, error) {
	offset, err := f.ClockOffset(ctx, p.Scenario.Item(p.ItemID))
	if err != nil {
		return time.Time{}, err
	}
	opens := time.Now().Add(offset).Add(o.RoomLead).UTC().Truncate(time.Millisecond)
	room, err := f.SetRoom(ctx, p.ItemID, api.RoomSettings{PassesPerSecond: o.RoomRate, MaxInside: o.RoomMaxInside,
		ShuffleMS: o.RoomShuffle.Milliseconds(), OpensAt: &opens})
	if err != nil {
		return time.Time{}, err
	}
	at := room.OpensAt.UTC()
	fig.OpensAt = &at
	t0 := at.Add(-offset)
	if time.Until(t0) <= 0 {
		return time.Time{}, fmt.Errorf("the room was set after the opening it names (%v ahead): give --room-lead more", o.RoomLead)
	}
	return t0, nil
}

// roomRun is one waiting-room row in flight.
type roomRun struct {
	ctx    context.Context
	o      Config
	p      Plan
	client *http.Client
	t0     time.Time
	giveUp time.Time // no account asks after it
	row    uint32    // the row's addresses, one per person

	mu      sync.Mutex // guards t, m, answers and bought: the buys
	t       *tally
	m       vegeta.Metrics
	answers []sent
	bought  int
	clk     *clocks // guards itself
	// soldOutAt is when the stock's last unit's sale was answered, once
	// it was (a time.Time).
	soldOutAt atomic.Value

	// tickets are the accounts' histories, each written by its own
	// account alone.
	tickets []roomTicket
}

// fire starts every account at its moment and waits for the last.
func (run *roomRun) fire(plan roomPlan) {
	lead, span := run.o.RoomLead, run.o.RoomShuffle
	early := func() time.Time { return run.t0.Add(-lead/2 + rand.N(lead/2+span/2+1)) }
	var wg sync.WaitGroup
	for i := range plan.ordinary {
		at := early()
		if k := i - (plan.ordinary - plan.late); k >= 0 {
			at = run.t0.Add(span + 200*time.Millisecond + time.Duration(k)*roomLatePace)
		}
		run.tickets[i] = roomTicket{buyer: uint64(i)}
		wg.Go(func() { run.account(&run.tickets[i], personAddr(run.row, false, i), at) })
	}
	for s := range plan.scalpers {
		at := early()
		for a := range roomAccounts {
			n := plan.ordinary + s*roomAccounts + a
			run.tickets[n] = roomTicket{buyer: uint64(n), scalper: true}
			wg.Go(func() { run.account(&run.tickets[n], personAddr(run.row, true, s), at) })
		}
	}
	wg.Wait()
}

// over says whether the account must stop asking.
func (run *roomRun) over() bool { return run.ctx.Err() != nil || time.Now().After(run.giveUp) }

// account is one account's life in the room: join, poll until admitted
// or sold out, buy with the pass.
func (run *roomRun) account(t *roomTicket, addr string, at time.Time) {
	sleepCtx(run.ctx, time.Until(at))
	tk, ok := run.join(t, addr)
	if !ok {
		return
	}
	ticket, st := tk.Ticket, tk.RoomStatus
	for !run.over() {
		switch st.State {
		case roomSoldOut:
			return
		case roomAdmitted:
			wait, again := run.buy(t, addr, st.Pass)
			if !again {
				return
			}
			sleepCtx(run.ctx, wait)
		default:
			wait := time.Duration(max(st.PollAfterMS, 50)) * time.Millisecond
			if t.scalper {
				wait = roomScalperEvery
			}
			sleepCtx(run.ctx, wait)
			next, retry, ok := run.poll(t, addr, ticket)
			if !ok {
				return
			}
			if retry > 0 {
				sleepCtx(run.ctx, retry)
				continue
			}
			if run.toldAfterSellOut(t) && next.State != roomAdmitted {
				return // it heard what it hears after the sell-out: the rule has its answer
			}
			st = next
		}
	}
}

// toldAfterSellOut says whether t's last step was sent after the lab saw
// the stock's last unit sold: a room that keeps a buyer waiting then is
// judged on that answer, and the buyer need not wait out the give-up.
func (run *roomRun) toldAfterSellOut(t *roomTicket) bool {
	at, ok := run.soldOutAt.Load().(time.Time)
	return ok && len(t.steps) > 0 && t.steps[len(t.steps)-1].sent.After(at)
}

// roomTarget is a join's or a poll's request of account t.
func (run *roomRun) roomTarget(t *roomTicket, addr, route string, body any, k int) vegeta.Target {
	b, err := json.Marshal(body)
	if err != nil {
		panic(err) // the bodies are plain structs
	}
	url := run.p.Targets[(t.buyer+uint64(k))%uint64(len(run.p.Targets))] + fmt.Sprintf("/api/v1/products/%d/room/%s", run.p.ItemID, route)
	return vegeta.Target{Method: http.MethodPost, URL: url, Body: b, Header: http.Header{
		"Content-Type": {"application/json"}, "Authorization": {"Bearer " + run.p.Token}, "X-Forwarded-For": {addr}}}
}

// ask sends one join or poll of t, records it, and decodes a 2xx answer
// into out. It returns the answer's status and, for a 429 or a 503, how
// long to wait before asking again.
func (run *roomRun) ask(t *roomTicket, kind byte, tg vegeta.Target, out *api.RoomTicket) (code int, wait time.Duration) {
	s := sendOne(run.ctx, run.client, tg, run.p.Series, 0)
	r := s.result
	step := roomStep{kind: kind, sent: r.Timestamp, answered: r.End(), code: int(r.Code)}
	if r.Code/100 == 2 && json.Unmarshal(r.Body, out) == nil {
		step.state, step.place = out.State, out.Place
	} else if r.Code != 0 {
		step.state = problemType(r.Body)
	}
	t.steps = append(t.steps, step)
	if w, again := comeBack(r, classify(r)); again {
		return step.code, w
	}
	return step.code, 0
}

// join asks for a ticket until one comes; ok is false when the account
// must stop (refused, or past the give-up).
func (run *roomRun) join(t *roomTicket, addr string) (tk api.RoomTicket, ok bool) {
	for k := 0; !run.over(); k++ {
		tg := run.roomTarget(t, addr, "join", api.RoomJoin{UserID: run.p.userID(t.buyer)}, k)
		code, retry := run.ask(t, stepJoin, tg, &tk)
		switch {
		case code == http.StatusCreated:
			return tk, true
		case retry == 0:
			return tk, false
		}
		sleepCtx(run.ctx, retry)
	}
	return tk, false
}

// poll asks how ticket stands. retry is set when told to come back (the
// status is then stale); ok is false when the ticket was refused.
func (run *roomRun) poll(t *roomTicket, addr, ticket string) (st api.RoomStatus, retry time.Duration, ok bool) {
	var out api.RoomTicket
	tg := run.roomTarget(t, addr, "poll", api.RoomPoll{UserID: run.p.userID(t.buyer), Ticket: ticket}, len(t.steps))
	code, wait := run.ask(t, stepPoll, tg, &out)
	switch {
	case code == http.StatusOK:
		return out.RoomStatus, 0, true
	case wait > 0:
		return st, wait, true
	}
	return st, 0, false
}

// buy buys with pass; again says the buy was told to come back after
// wait (the pass was given back).
func (run *roomRun) buy(t *roomTicket, addr, pass string) (wait time.Duration, again bool) {
	var tg vegeta.Target
	run.p.target(&tg, t.buyer, uint64(len(t.steps)))
	tg.Header.Set(api.PassHeader, pass)
	tg.Header.Set("X-Forwarded-For", addr)
	due := time.Now()
	if n := len(t.steps); n > 0 {
		due = t.steps[n-1].answered // the pass came then
	}
	s := sendOne(run.ctx, run.client, tg, run.p.Series, 0)
	s.due = due
	r := s.result
	a := classify(r)
	step := roomStep{kind: stepBuy, sent: r.Timestamp, answered: r.End(), code: int(r.Code), state: a.problem}
	switch a.outcome {
	case outCreated:
		step.state = roomBought
	case outSoldOut:
		step.state = roomSoldOut
	}
	t.steps = append(t.steps, step)
	run.clk.add(r, due)
	run.mu.Lock()
	run.t.add(r, a)
	run.m.Add(r)
	run.answers = append(run.answers, s)
	if step.state == roomBought {
		if run.bought++; run.bought == run.o.Stock {
			run.soldOutAt.Store(step.answered)
		}
	}
	run.mu.Unlock()
	return comeBack(r, a)
}

// countRoom counts the requests of each route and their refusals.
func countRoom(fig *results.Room, tickets []roomTicket) {
	for i := range tickets {
		for _, s := range tickets[i].steps {
			switch s.kind {
			case stepJoin:
				fig.Joins++
			case stepPoll:
				fig.Polls++
			case stepBuy:
				fig.Buys++
			}
			switch {
			case s.code == http.StatusServiceUnavailable:
				fig.Unavailable++
			case s.kind != stepBuy && s.code == http.StatusTooManyRequests:
				fig.Limited++
			case s.kind != stepBuy && s.code >= 400:
				if fig.Refused == nil {
					fig.Refused = map[string]int{}
				}
				fig.Refused[fmt.Sprintf("%d %s", s.code, s.state)]++
			}
		}
	}
}

// buySends are the instants the buys were sent.
func buySends(tickets []roomTicket) []time.Time {
	var at []time.Time
	for i := range tickets {
		for _, s := range tickets[i].steps {
			if s.kind == stepBuy {
				at = append(at, s.sent)
			}
		}
	}
	return at
}

// lastSale is when the last buy answered with a sale (201 or 202) was
// answered (zero: none).
func lastSale(tickets []roomTicket) time.Time {
	var last time.Time
	for i := range tickets {
		for _, s := range tickets[i].steps {
			if s.kind == stepBuy && s.state == roomBought && s.answered.After(last) {
				last = s.answered
			}
		}
	}
	return last
}

// RoomProblems says what is wrong with the waiting-room scenario's
// settings in o, flag by flag.
func RoomProblems(o Config) []string {
	var bad []string
	if o.RoomPeople < 1 || o.RoomScalpers < 0 || o.RoomScalpers > o.RoomPeople {
		bad = append(bad, "--room-people must be at least 1, and --room-scalpers between 0 and --room-people")
	}
	if o.RoomRate < 1 || o.RoomMaxInside < 1 {
		bad = append(bad, "--room-rate and --room-max-inside must be at least 1")
	}
	if o.RoomShuffle < 0 || o.RoomLead <= 0 || o.RoomRateWindow <= 0 || o.RoomGiveUp <= 0 {
		bad = append(bad, "--room-shuffle must not be negative, and --room-lead, --room-rate-window and --room-give-up must be positive")
	}
	return bad
}
