package results

import (
	"fmt"
	"strings"
	"time"
)

// The waiting-room scenario's bounds (docs/lab.md): its verdict holds the
// buy endpoint's peak rate to RoomRateBound times the room's admission
// rate, the first-come score and the late joiners' order to at least
// RoomFirstCome, and the scalpers' gain to at most RoomScalperGain.
const (
	RoomRateBound   = 1.1
	RoomFirstCome   = 0.95
	RoomScalperGain = 1.5
)

// Room are the waiting-room scenario's figures (scenario/room.go): the
// room the lab set, the crowd that joined it, and what each rule reads.
type Room struct {
	// The room as the lab set it.
	PassesPerSecond int        `json:"passes_per_second"`
	MaxInside       int        `json:"max_inside"`
	ShuffleMS       float64    `json:"shuffle_ms"`
	OpensAt         *time.Time `json:"opens_at,omitempty"`
	// The crowd: People, of whom Scalpers have AccountsEach accounts
	// behind one address; Late of the others join one by one after the
	// opening's shuffle span, the rest before it ends.
	People       int `json:"people"`
	Scalpers     int `json:"scalpers"`
	AccountsEach int `json:"accounts_per_scalper"`
	Late         int `json:"late"`
	// Requests by route, and Tickets the joins answered with a ticket.
	Joins   int `json:"joins"`
	Polls   int `json:"polls"`
	Buys    int `json:"buys"`
	Tickets int `json:"tickets"`
	// Limited counts the joins and polls answered 429; Unavailable the
	// 503s of any route (joins, polls and buys), which the no-503 rule
	// reads; Refused the joins and polls answered another 4xx (a token
	// refused), by problem type.
	Limited     int            `json:"limited"`
	Unavailable int            `json:"unavailable"`
	Refused     map[string]int `json:"refused,omitempty"`

	// RateWindowMS is the window the buy endpoint's peak rate is taken
	// over; PeakBuyRate the most buys sent in one such window, per
	// second; RateRatio that over PassesPerSecond.
	RateWindowMS float64 `json:"rate_window_ms"`
	PeakBuyRate  float64 `json:"peak_buy_rate"`
	RateRatio    float64 `json:"rate_ratio"`
	// PeakBuyRate1s is the most buys sent in one second (reported: it
	// holds the bunching of the buyers' polls).
	PeakBuyRate1s float64 `json:"peak_buy_rate_1s"`

	// FirstCome is the first-come score by queue order (nil when nobody
	// won): the share of the Won units that went to the first Won
	// tickets in queue order; FirstWon those units. LatePairs are the
	// late joiners one after another whose first join was answered before
	// the second was sent, and LateInOrder those the room placed in that
	// order; LateOrder their share (nil without pairs).
	FirstCome   *float64 `json:"first_come_score"`
	FirstWon    int      `json:"first_won"`
	Won         int      `json:"won"`
	LatePairs   int      `json:"late_pairs"`
	LateInOrder int      `json:"late_in_order"`
	LateOrder   *float64 `json:"late_order,omitempty"`

	// Waiting are the ticket holders who had neither a unit nor heard
	// sold-out when the last unit's sale was answered; Heard those whose
	// first answer after it (a poll, or a buy with a pass) said
	// sold-out, and NotHeard the others, with a few of them described.
	// SoldOutP50ms to SoldOutMaxMs are the delays from the last sale to
	// the sold-out answer the Heard received.
	Waiting      int      `json:"waiting"`
	Heard        int      `json:"heard"`
	NotHeard     int      `json:"not_heard"`
	NotHeardWhy  []string `json:"not_heard_why,omitempty"`
	SoldOutP50ms float64  `json:"sold_out_p50_ms"`
	SoldOutP99ms float64  `json:"sold_out_p99_ms"`
	SoldOutMaxMs float64  `json:"sold_out_max_ms"`

	// The scalpers: their accounts' tickets and units, and their gain:
	// their share of the units over their accounts' share of the tickets
	// (the rule), and over their share of the people (reported).
	// GainMissedP is the chance that the scalpers' accounts would win as
	// many units as they did if their true gain were RoomScalperGain (a
	// one-sided binomial tail, as the scalper rows take it): below
	// MissedAt the bound is surely broken, not by the luck of one draw.
	ScalperTickets int      `json:"scalper_tickets"`
	ScalperWon     int      `json:"scalper_won"`
	Gain           *float64 `json:"gain"`
	PersonGain     *float64 `json:"person_gain"`
	GainMissedP    *float64 `json:"gain_missed_p,omitempty"`
}

// GainMissed reports whether the scalpers' accounts surely won more than
// RoomScalperGain times their share of the tickets.
func (m *Room) GainMissed() bool {
	return m.Gain != nil && *m.Gain > RoomScalperGain && m.GainMissedP != nil && *m.GainMissedP < MissedAt
}

// Note sums the room's figures up for the row's note.
func (m *Room) Note() string {
	score := "n/a (nobody won)"
	if m.FirstCome != nil {
		score = fmt.Sprintf("%.2f (%d of %d units to the first %d in queue order)", *m.FirstCome, m.FirstWon, m.Won, m.Won)
	}
	late := "no late pairs"
	if m.LateOrder != nil {
		late = fmt.Sprintf("%d of %d late pairs in arrival order", m.LateInOrder, m.LatePairs)
	}
	gain := "n/a"
	if m.Gain != nil {
		gain = fmt.Sprintf("%.2f× per account", *m.Gain)
		if m.PersonGain != nil {
			gain += fmt.Sprintf(", %.2f× per person", *m.PersonGain)
		}
	}
	refused := ""
	if len(m.Refused) > 0 {
		refused = fmt.Sprintf(" (refused: %s)", CountsText(m.Refused))
		for k := range m.Refused {
			if strings.Contains(k, "room-token-forged") {
				refused = fmt.Sprintf(" (refused: %s: the instances refuse each other's tickets; do they share SECKILL_ROOM_KEYS?)", CountsText(m.Refused))
			}
		}
	}
	return fmt.Sprintf("waiting room: %d passes/s, %d inside at most, shuffle %g ms; %d people (%d scalpers × %d accounts, %d late), %d tickets; "+
		"%d joins, %d polls%s, %d buys, %d × 429, %d × 503; buy rate peak %.1f/s over %g ms, %.2f× the admission rate (%.1f/s over 1 s); first-come %s, %s; "+
		"sold-out heard by %d of %d waiting at their first answer after the last sale, delay p50 %.0f ms, p99 %.0f ms, max %.0f ms; scalpers won %d with %d tickets: gain %s",
		m.PassesPerSecond, m.MaxInside, m.ShuffleMS, m.People, m.Scalpers, m.AccountsEach, m.Late, m.Tickets,
		m.Joins, m.Polls, refused, m.Buys, m.Limited, m.Unavailable, m.PeakBuyRate, m.RateWindowMS, m.RateRatio, m.PeakBuyRate1s, score, late,
		m.Heard, m.Waiting, m.SoldOutP50ms, m.SoldOutP99ms, m.SoldOutMaxMs, m.ScalperWon, m.ScalperTickets, gain)
}
