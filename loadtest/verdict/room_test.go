package verdict

import (
	"slices"
	"strings"
	"testing"

	"github.com/seckill-lab/seckill/loadtest/results"
)

// TestRoomRules checks each waiting-room rule on its own: a row whose
// room kept every rule, edited to break one, must fail naming exactly that
// rule, with its counts; a gain above the bound that one draw can explain
// is no breach.
func TestRoomRules(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	sound := func() results.Row {
		return results.Row{Requests: 100, Buyers: 100, Created: 100, BuyersWithOrder: 100, Sold: 100, InitialStock: 100, Conserved: true,
			Statuses: map[int]int{201: 100}, Room: &results.Room{PassesPerSecond: 20, Tickets: 345, Joins: 345, Polls: 4000, Buys: 100,
				RateWindowMS: 5000, PeakBuyRate: 20, RateRatio: 1, FirstCome: f(1), FirstWon: 100, Won: 100, LatePairs: 50, LateInOrder: 50, LateOrder: f(1),
				Waiting: 245, Heard: 245, ScalperTickets: 50, ScalperWon: 15, Gain: f(1.03), GainMissedP: f(0.9)}}
	}
	tests := []struct {
		name string
		edit func(r *results.Row)
		rule string // "" for a pass
		note string
	}{
		{"sound", func(*results.Row) {}, "", "waiting room: 20 passes/s"},
		{"sold short", func(r *results.Row) { r.Sold, r.FinalStock, r.Created, r.BuyersWithOrder = 90, 10, 90, 90 }, RuleRoomExact, "sold 90 of 100 through the room, want exactly 100"},
		{"buys too fast", func(r *results.Row) { r.Room.PeakBuyRate, r.Room.RateRatio = 23, 1.15 }, RuleRoomRate, "1.15× the room's 20 passes/s"},
		{"a poll answered 503", func(r *results.Row) { r.Room.Unavailable = 1 }, RuleRoomNo503, "1 answers of 345 joins, 4000 polls and 100 buys were 503"},
		{"admitted out of queue order", func(r *results.Row) { r.Room.FirstCome, r.Room.FirstWon = f(0.9), 90 }, RuleRoomFirstCome, "first-come score 0.90 by queue order"},
		{"late joiners out of arrival order", func(r *results.Row) { r.Room.LateOrder, r.Room.LateInOrder = f(0.9), 45 }, RuleRoomFirstCome, "late joiners placed in arrival order 45 of 50 times"},
		{"a waiting buyer not told", func(r *results.Row) {
			r.Room.Heard, r.Room.NotHeard, r.Room.NotHeardWhy = 244, 1, []string{"buyer 7: a poll sent 3 ms after the last sale answered 200 waiting"}
		}, RuleRoomSoldOut, "1 of 245 buyers waiting at the last sale did not hear sold-out at their first answer after it: buyer 7"},
		{"scalpers surely ahead", func(r *results.Row) { r.Room.ScalperWon, r.Room.Gain, r.Room.GainMissedP = 40, f(2.76), f(1e-6) }, RuleRoomScalpers, "2.76× their share, above 1.5×"},
		{"scalpers ahead by one draw's luck", func(r *results.Row) { r.Room.Gain, r.Room.GainMissedP = f(1.66), f(0.27) }, "", "gain 1.66× per account"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := sound()
			tt.edit(&r)
			Judge(&r)
			switch {
			case tt.rule == "" && (r.Verdict != results.Pass || len(r.Broken) > 0):
				t.Errorf("want a pass, got %s %v: %q", r.Verdict, r.Broken, r.Note)
			case tt.rule != "" && (r.Verdict != results.Fail || !slices.Equal(r.Broken, []string{tt.rule})):
				t.Errorf("want a fail naming %s alone, got %s %v: %q", tt.rule, r.Verdict, r.Broken, r.Note)
			}
			if !strings.Contains(r.Note, tt.note) {
				t.Errorf("the note lacks %q: %q", tt.note, r.Note)
			}
		})
	}
}
