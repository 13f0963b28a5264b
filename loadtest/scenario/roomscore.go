package scenario

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/seckill-lab/seckill/loadtest/results"
)

// The waiting-room scenario's scores, from the history its buyers
// recorded (room.go): every answer each ticket holder received. They read
// the history alone, so that a test can feed one that breaks a rule.

// The kinds of a room step.
const (
	stepJoin = 'j'
	stepPoll = 'p'
	stepBuy  = 'b'
)

// The states a step can say: a join's or a poll's (api.RoomStatus), and
// a buy's.
const (
	roomDrawing  = "drawing"
	roomWaiting  = "waiting"
	roomAdmitted = "admitted"
	roomSoldOut  = "sold-out"
	roomBought   = "bought"
)

// roomStep is one answer a room buyer received: a join, a poll or a buy,
// when it was sent and answered, its status, and what it said (a join's
// or a poll's state and place; a buy's roomBought, for a 201 or a 202,
// roomSoldOut or its problem type).
type roomStep struct {
	kind           byte
	sent, answered time.Time
	code           int
	state          string
	place          int64
}

// decided says whether the step told its buyer something about the sale:
// a poll answered 200, a buy answered 201 or 409. A 429 or a 503 asks it
// to come back, and a join only gives the place.
func (s roomStep) decided() bool {
	switch s.kind {
	case stepPoll:
		return s.code == 200
	case stepBuy:
		return s.state == roomBought || s.code == 409
	}
	return false
}

// roomTicket is one account's history in the room.
type roomTicket struct {
	buyer   uint64
	scalper bool
	steps   []roomStep
}

// join is the account's join that gave it a ticket.
func (t *roomTicket) join() (roomStep, bool) {
	for _, s := range t.steps {
		if s.kind == stepJoin && s.code == 201 {
			return s, true
		}
	}
	return roomStep{}, false
}

// early says whether the account joined during the opening's span: the
// room answered its join drawing, and its place came by the shuffle.
func (t *roomTicket) early() bool {
	j, ok := t.join()
	return ok && j.state == roomDrawing
}

// queuePlace is the ticket's place in the room's queue, as the room said
// it: a late joiner's at its join; an early joiner's at the first poll
// after the draw. ok is false when the room never said it.
func (t *roomTicket) queuePlace() (int64, bool) {
	for _, s := range t.steps {
		if (s.kind == stepJoin && s.code == 201 || s.kind == stepPoll && s.code == 200) && s.state != roomDrawing {
			return s.place, true
		}
	}
	return 0, false
}

// won says whether a buy of t was answered with a sale: 201, or 202 (a
// sale accepted, its order written behind a queue).
func (t *roomTicket) won() bool {
	return slices.ContainsFunc(t.steps, func(s roomStep) bool { return s.kind == stepBuy && s.state == roomBought })
}

// scoreRoom fills fig's scores from the tickets' history, the instants
// the buys were sent, and the instant the last unit's sale was answered
// (zero: none was).
func scoreRoom(fig *results.Room, tickets []roomTicket, buys []time.Time, lastSale time.Time, window time.Duration) {
	fig.RateWindowMS = results.MS(window)
	fig.PeakBuyRate, fig.PeakBuyRate1s = peakRate(buys, window), peakRate(buys, time.Second)
	if fig.PassesPerSecond > 0 {
		fig.RateRatio = fig.PeakBuyRate / float64(fig.PassesPerSecond)
	}
	if score, first, won, ok := queueFirstCome(tickets); ok {
		fig.FirstCome, fig.FirstWon = &score, first
		fig.Won = won
	}
	fig.LatePairs, fig.LateInOrder = lateOrder(tickets)
	if fig.LatePairs > 0 {
		v := float64(fig.LateInOrder) / float64(fig.LatePairs)
		fig.LateOrder = &v
	}
	scoreSoldOut(fig, tickets, lastSale)
	scoreRoomScalpers(fig, tickets)
}

// peakRate is the fastest rate of the instants over any window of length
// w, or of their whole span when that is shorter (a sale quicker than the
// window is judged over its own length): the most instants within w of a
// first one, less that first, per second of w. Instants exactly 1/r
// apart have rate r over every window.
func peakRate(at []time.Time, w time.Duration) float64 {
	if len(at) < 2 || w <= 0 {
		return 0
	}
	s := slices.SortedFunc(slices.Values(at), time.Time.Compare)
	if w = min(w, s[len(s)-1].Sub(s[0])); w <= 0 {
		return 0
	}
	most, j := 0, 0
	for i := range s {
		for j < len(s) && s[j].Sub(s[i]) <= w {
			j++
		}
		most = max(most, j-i)
	}
	return float64(most-1) / w.Seconds()
}

// queueFirstCome is the first-come score by queue order: the early
// joiners first, by the places the shuffle gave them, then the late ones
// by the places they were given at their joins (that those follow
// arrival, lateOrder checks: joins in flight together may be placed in
// either order, so the lab's send order is no queue order). Of the units
// won, the share that went to the first `won` tickets in that order. A
// ticket whose place the room never said goes after the others of its
// group. ok is false when nobody won.
func queueFirstCome(tickets []roomTicket) (score float64, firstWon, won int, ok bool) {
	type key struct {
		late, unplaced bool
		place          int64
		sent           time.Time
		won            bool
	}
	var q []key
	for i := range tickets {
		t := &tickets[i]
		j, joined := t.join()
		if !joined {
			continue
		}
		k := key{late: !t.early(), sent: j.sent, won: t.won()}
		var placed bool
		k.place, placed = t.queuePlace()
		k.unplaced = !placed
		if k.won {
			won++
		}
		q = append(q, k)
	}
	b2n := func(b bool) int { return b2i(b) }
	sort.SliceStable(q, func(i, j int) bool {
		a, b := q[i], q[j]
		return cmp.Or(cmp.Compare(b2n(a.late), b2n(b.late)), cmp.Compare(b2n(a.unplaced), b2n(b.unplaced)),
			cmp.Compare(a.place, b.place), a.sent.Compare(b.sent)) < 0
	})
	for _, k := range q[:min(won, len(q))] {
		firstWon += b2i(k.won)
	}
	if won == 0 {
		return 0, firstWon, 0, false
	}
	return float64(firstWon) / float64(won), firstWon, won, true
}

// lateOrder counts the late joiners one after another (in the order their
// joins were sent) whose first join was answered before the second was
// sent: the room saw them in that order, and must place them so. inOrder
// counts those it did.
func lateOrder(tickets []roomTicket) (pairs, inOrder int) {
	var late []roomStep
	for i := range tickets {
		if j, ok := tickets[i].join(); ok && !tickets[i].early() {
			late = append(late, j)
		}
	}
	slices.SortFunc(late, func(a, b roomStep) int { return a.sent.Compare(b.sent) })
	for i := 1; i < len(late); i++ {
		a, b := late[i-1], late[i]
		if !a.answered.Before(b.sent) {
			continue // in flight together: either order is true
		}
		pairs++
		inOrder += b2i(a.place < b.place)
	}
	return pairs, inOrder
}

// scoreSoldOut checks, for every ticket holder still waiting when the
// last unit's sale was answered, that its first decided answer sent after
// that instant said sold-out, and takes the delays. A holder is waiting
// when it has no unit and heard no decision that ended its wait (sold-out,
// or a refusal) before the sale.
func scoreSoldOut(fig *results.Room, tickets []roomTicket, lastSale time.Time) {
	if lastSale.IsZero() {
		return
	}
	var delays []time.Duration
	for i := range tickets {
		t := &tickets[i]
		if _, ok := t.join(); !ok || t.won() || endedBefore(t, lastSale) {
			continue
		}
		fig.Waiting++
		why := ""
		first, ok := firstHeardAfter(t, lastSale)
		switch {
		case !ok:
			why = fmt.Sprintf("buyer %d: no answer to a poll or a buy sent after the last sale", t.buyer)
		case first.state != roomSoldOut:
			why = fmt.Sprintf("buyer %d: a %s sent %.0f ms after the last sale answered %d %s", t.buyer, stepName(first.kind),
				results.MS(first.sent.Sub(lastSale)), first.code, first.state)
		default:
			fig.Heard++
			delays = append(delays, first.answered.Sub(lastSale))
			continue
		}
		fig.NotHeard++
		if len(fig.NotHeardWhy) < 5 {
			fig.NotHeardWhy = append(fig.NotHeardWhy, why)
		}
	}
	if len(delays) > 0 {
		fig.SoldOutP50ms, fig.SoldOutP99ms = percentileMS(delays, 0.50), percentileMS(delays, 0.99)
		fig.SoldOutMaxMs = results.MS(slices.Max(delays))
	}
}

// endedBefore says whether t heard, before at, an answer that ended its
// wait: sold-out, or a refusal of its ticket or pass.
func endedBefore(t *roomTicket, at time.Time) bool {
	for _, s := range t.steps {
		if s.answered.After(at) {
			continue
		}
		if s.state == roomSoldOut || s.code >= 400 && s.code != 429 && s.code != 503 {
			return true
		}
	}
	return false
}

// firstHeardAfter is what t first heard about the sale after at: its
// first decided step answered after at that says sold-out or was sent
// after at. A step sent before at may honestly say what was true when it
// was read (admitted: the buy that follows hears sold-out), so only a
// sold-out from it counts.
func firstHeardAfter(t *roomTicket, at time.Time) (roomStep, bool) {
	steps := slices.Clone(t.steps)
	slices.SortStableFunc(steps, func(a, b roomStep) int { return a.sent.Compare(b.sent) })
	for _, s := range steps {
		if s.decided() && s.answered.After(at) && (s.state == roomSoldOut || s.sent.After(at)) {
			return s, true
		}
	}
	return roomStep{}, false
}

func stepName(kind byte) string {
	switch kind {
	case stepJoin:
		return "join"
	case stepPoll:
		return "poll"
	}
	return "buy"
}

// scoreRoomScalpers sets the scalpers' tickets, units and gain.
func scoreRoomScalpers(fig *results.Room, tickets []roomTicket) {
	won := 0
	fig.Tickets, fig.ScalperTickets, fig.ScalperWon = 0, 0, 0
	for i := range tickets {
		t := &tickets[i]
		if _, ok := t.join(); !ok {
			continue
		}
		w := t.won()
		fig.Tickets++
		won += b2i(w)
		if t.scalper {
			fig.ScalperTickets++
			fig.ScalperWon += b2i(w)
		}
	}
	if won == 0 || fig.ScalperTickets == 0 {
		return
	}
	share := float64(fig.ScalperWon) / float64(won)
	ticketShare := float64(fig.ScalperTickets) / float64(fig.Tickets)
	gain := share / ticketShare
	missedP := results.BinomialTail(won, fig.ScalperWon, min(1, results.RoomScalperGain*ticketShare))
	fig.Gain, fig.GainMissedP = &gain, &missedP
	if fig.People > 0 && fig.Scalpers > 0 {
		pg := share / (float64(fig.Scalpers) / float64(fig.People))
		fig.PersonGain = &pg
	}
}
