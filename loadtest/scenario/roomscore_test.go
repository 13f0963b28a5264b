package scenario

import (
	"testing"
	"time"

	"github.com/seckill-lab/seckill/loadtest/results"
)

// roomAt is an instant ms milliseconds into a recorded history.
func roomAt(ms int) time.Time {
	return time.Date(2026, 12, 7, 13, 0, 0, 0, time.UTC).Add(time.Duration(ms) * time.Millisecond)
}

// lateJoiner is a ticket that joined late at ms, answered 5 ms later,
// with place.
func lateJoiner(buyer uint64, ms int, place int64) roomTicket {
	return roomTicket{buyer: buyer, steps: []roomStep{{kind: stepJoin, sent: roomAt(ms), answered: roomAt(ms + 5), code: 201, state: roomWaiting, place: place}}}
}

// TestLateOrderCountsPairsTheRoomSawInOrder feeds the late joiners' order
// histories: places that follow arrival, places that do not, and joins in
// flight together, which either order answers truly.
func TestLateOrderCountsPairsTheRoomSawInOrder(t *testing.T) {
	tests := []struct {
		name           string
		tickets        []roomTicket
		pairs, inOrder int
	}{
		{"in arrival order", []roomTicket{lateJoiner(1, 0, 10), lateJoiner(2, 20, 11), lateJoiner(3, 40, 12)}, 2, 2},
		{"reversed", []roomTicket{lateJoiner(1, 0, 12), lateJoiner(2, 20, 11), lateJoiner(3, 40, 10)}, 2, 0},
		{"in flight together", []roomTicket{lateJoiner(1, 0, 11), lateJoiner(2, 2, 10)}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pairs, inOrder := lateOrder(tt.tickets)
			if pairs != tt.pairs || inOrder != tt.inOrder {
				t.Errorf("got %d pairs, %d in order; want %d, %d", pairs, inOrder, tt.pairs, tt.inOrder)
			}
		})
	}
}

// TestSoldOutHeardAtTheFirstAnswerAfterTheSale feeds histories around the
// last sale (at 1000 ms): a poll answered sold-out counts its delay; a
// poll sent after the sale that says waiting breaks the rule; a poll sent
// before it that says admitted may, and the buy after it hears sold-out;
// so does a buy sent before the sale and answered after it.
func TestSoldOutHeardAtTheFirstAnswerAfterTheSale(t *testing.T) {
	poll := func(sent, answered int, state string) roomStep {
		return roomStep{kind: stepPoll, sent: roomAt(sent), answered: roomAt(answered), code: 200, state: state}
	}
	joined := roomStep{kind: stepJoin, sent: roomAt(0), answered: roomAt(5), code: 201, state: roomDrawing}
	buyer := func(n uint64, steps ...roomStep) roomTicket {
		return roomTicket{buyer: n, steps: append([]roomStep{joined}, steps...)}
	}
	tickets := []roomTicket{
		buyer(1, poll(900, 905, roomWaiting), poll(1200, 1210, roomSoldOut)),
		buyer(2, poll(990, 1010, roomAdmitted), roomStep{kind: stepBuy, sent: roomAt(1015), answered: roomAt(1020), code: 409, state: roomSoldOut}),
		buyer(3, poll(1100, 1105, roomWaiting), poll(1400, 1405, roomSoldOut)),
		buyer(4, poll(800, 805, roomWaiting)), // gave up: nothing after the sale
		buyer(5, poll(700, 705, roomSoldOut)), // heard before: not waiting
		buyer(6, poll(950, 955, roomAdmitted), roomStep{kind: stepBuy, sent: roomAt(995), answered: roomAt(1010), code: 409, state: roomSoldOut}),
	}
	fig := &results.Room{}
	scoreSoldOut(fig, tickets, roomAt(1000))
	if fig.Waiting != 5 || fig.Heard != 3 || fig.NotHeard != 2 || len(fig.NotHeardWhy) != 2 {
		t.Fatalf("waiting %d, heard %d, not heard %d %q; want 5, 3, 2", fig.Waiting, fig.Heard, fig.NotHeard, fig.NotHeardWhy)
	}
	if fig.SoldOutMaxMs != 210 || fig.SoldOutP50ms < 10 || fig.SoldOutP50ms > 20 {
		t.Errorf("delays p50 %.0f ms, max %.0f ms; want 10 to 20, and 210", fig.SoldOutP50ms, fig.SoldOutMaxMs)
	}
}

// TestPeakRateOverASaleShorterThanTheWindow: buys 50 ms apart are 20/s
// over any window, and a sale shorter than the window is judged over its
// own span, so a room twice too fast is not hidden by a long window.
func TestPeakRateOverASaleShorterThanTheWindow(t *testing.T) {
	spaced := func(n, every int) []time.Time {
		var at []time.Time
		for i := range n {
			at = append(at, roomAt(i*every))
		}
		return at
	}
	for _, tt := range []struct {
		name   string
		at     []time.Time
		window time.Duration
		want   float64
	}{
		{"20/s over 1 s", spaced(100, 50), time.Second, 20},
		{"20/s over the whole sale", spaced(100, 50), time.Minute, 20},
		{"40/s in a sale shorter than the window", spaced(100, 25), 5 * time.Second, 40},
	} {
		if got := peakRate(tt.at, tt.window); got < tt.want-0.01 || got > tt.want+0.01 {
			t.Errorf("%s: %.2f/s, want %.0f/s", tt.name, got, tt.want)
		}
	}
}

// TestAcceptedBuysWin: a stage that queues its orders answers a buy 202,
// a sale accepted; the room's scores count it as a unit won, and its
// answer as the sale.
func TestAcceptedBuysWin(t *testing.T) {
	tk := roomTicket{buyer: 1, steps: []roomStep{
		{kind: stepJoin, sent: roomAt(0), answered: roomAt(5), code: 201, state: roomWaiting, place: 1},
		{kind: stepPoll, sent: roomAt(100), answered: roomAt(105), code: 200, state: roomAdmitted, place: 1},
		{kind: stepBuy, sent: roomAt(110), answered: roomAt(120), code: 202, state: roomBought},
	}}
	if _, _, won, ok := queueFirstCome([]roomTicket{tk}); !ok || won != 1 {
		t.Errorf("first-come over a 202: won %d, ok %v; want 1 unit won", won, ok)
	}
	if got := lastSale([]roomTicket{tk}); !got.Equal(roomAt(120)) {
		t.Errorf("last sale %v, want the 202's answer at %v", got, roomAt(120))
	}
}
