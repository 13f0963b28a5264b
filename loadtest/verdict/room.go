package verdict

import (
	"fmt"
	"strings"

	"github.com/seckill-lab/seckill/loadtest/results"
)

// The waiting-room scenario's rules (scenario/room.go, docs/lab.md). A
// room sizes the crowd that reaches the buy to its admission rate, gives
// the places of the opening by a shuffle and the later ones by arrival,
// tells every waiting buyer sold-out as soon as it is true, and gives an
// account nothing for polling harder.
const (
	RuleRoomExact     = "room-exact"      // waiting-room: sold other than its whole stock
	RuleRoomRate      = "room-rate"       // waiting-room: the buy endpoint's peak rate above RoomRateBound × the admission rate
	RuleRoomNo503     = "room-no-503"     // waiting-room: a join, a poll or a buy answered 503
	RuleRoomFirstCome = "room-first-come" // waiting-room: first-come score by queue order, or the late joiners' order, below RoomFirstCome
	RuleRoomSoldOut   = "room-sold-out"   // waiting-room: a waiting buyer's first answer after the last sale was not sold-out
	RuleRoomScalpers  = "room-scalpers"   // waiting-room: the scalpers' accounts surely won more than RoomScalperGain × their share of the tickets
)

// roomExact: every unit goes, through the room, to a pass holder: a room
// that admits too few, or passes that cannot buy, leave units unsold.
func roomExact(r *results.Row) []string {
	m := r.Room
	if m == nil {
		return nil
	}
	if want := min(r.InitialStock, m.Tickets); r.Sold != want || r.Oversold > 0 {
		return because("sold %d of %d through the room, want exactly %d (%d tickets)", r.Sold, r.InitialStock, want, m.Tickets)
	}
	return nil
}

func roomRate(r *results.Row) []string {
	m := r.Room
	if m == nil || m.RateRatio <= results.RoomRateBound {
		return nil
	}
	return because("the buy endpoint peaked at %.1f buys/s over %g ms, %.2f× the room's %d passes/s (at most %.1f×)",
		m.PeakBuyRate, m.RateWindowMS, m.RateRatio, m.PassesPerSecond, results.RoomRateBound)
}

func roomNo503(r *results.Row) []string {
	m := r.Room
	if m == nil || m.Unavailable == 0 {
		return nil
	}
	return because("%d answers of %d joins, %d polls and %d buys were 503", m.Unavailable, m.Joins, m.Polls, m.Buys)
}

func roomFirstCome(r *results.Row) []string {
	m := r.Room
	if m == nil {
		return nil
	}
	var why []string
	if m.FirstCome != nil && *m.FirstCome < results.RoomFirstCome {
		why = append(why, fmt.Sprintf("first-come score %.2f by queue order, below %.2f: the first %d tickets won %d of the %d units",
			*m.FirstCome, results.RoomFirstCome, m.Won, m.FirstWon, m.Won))
	}
	if m.LateOrder != nil && *m.LateOrder < results.RoomFirstCome {
		why = append(why, fmt.Sprintf("late joiners placed in arrival order %d of %d times (%.2f, below %.2f)",
			m.LateInOrder, m.LatePairs, *m.LateOrder, results.RoomFirstCome))
	}
	if len(why) == 0 {
		return nil
	}
	return because("%s", strings.Join(why, "; "))
}

func roomSoldOut(r *results.Row) []string {
	m := r.Room
	if m == nil || m.NotHeard == 0 {
		return nil
	}
	return because("%d of %d buyers waiting at the last sale did not hear sold-out at their first answer after it: %s",
		m.NotHeard, m.Waiting, firstFew(m.NotHeardWhy))
}

func roomScalpers(r *results.Row) []string {
	m := r.Room
	if m == nil || !m.GainMissed() {
		return nil
	}
	return because("the scalpers' %d accounts won %d of %d units with %d of %d tickets: %.2f× their share, above %.1f× (a true %.1f× would win this many %.2g of the time)",
		m.ScalperTickets, m.ScalperWon, m.Won, m.ScalperTickets, m.Tickets, *m.Gain, results.RoomScalperGain, results.RoomScalperGain, *m.GainMissedP)
}
