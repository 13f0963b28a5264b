package scenario

import (
	"fmt"
	"slices"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/seckill-lab/seckill/loadtest/results"
)

// at is a fixed instant plus ms milliseconds.
func at(ms float64) time.Time {
	return time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC).Add(time.Duration(ms * float64(time.Millisecond)))
}

func TestFirstComeScore(t *testing.T) {
	// Five arrivals planned 2 ms apart, stock 2.
	planned := func(won ...bool) []arrival {
		var out []arrival
		for i, w := range won {
			out = append(out, arrival{seq: i, intended: at(float64(2 * i)), sent: at(float64(2*i) + 0.1), won: w})
		}
		return out
	}
	tests := []struct {
		name          string
		arrivals      []arrival
		stock         int
		score         float64
		firstWon, won int
		ok            bool
	}{
		{"first come, first served", planned(true, true, false, false, false), 2, 1, 2, 2, true},
		{"a late arrival barged past the second", planned(true, false, false, true, false), 2, 0.5, 1, 2, true},
		{"the last two took both", planned(false, false, false, true, true), 2, 0, 0, 2, true},
		{"nobody won", planned(false, false, false), 2, 0, 0, 0, false},
		{
			// The lab wrote arrival 1 after arrival 2: the order the
			// buyers asked in is the written one, so 2 was among the
			// first two, and 1 was not.
			"scored by the written order, not the plan",
			[]arrival{
				{seq: 0, intended: at(0), sent: at(0.1), won: true},
				{seq: 1, intended: at(2), sent: at(5), won: false},
				{seq: 2, intended: at(4), sent: at(4.1), won: true},
			}, 2, 1, 2, 2, true,
		},
		{
			// An arrival whose request never left did not ask.
			"arrivals never written do not count",
			[]arrival{
				{seq: 0, intended: at(0), won: false},
				{seq: 1, intended: at(2), sent: at(2.1), won: true},
				{seq: 2, intended: at(4), sent: at(4.1), won: true},
			}, 2, 1, 2, 2, true,
		},
		{"oversold: the share is of the units won", planned(true, true, true, true, false), 2, 0.5, 2, 4, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			score, firstWon, won, ok := firstCome(tt.arrivals, tt.stock)
			if score != tt.score || firstWon != tt.firstWon || won != tt.won || ok != tt.ok {
				t.Errorf("firstCome = %.2f, %d, %d, %v; want %.2f, %d, %d, %v", score, firstWon, won, ok, tt.score, tt.firstWon, tt.won, tt.ok)
			}
		})
	}
}

func TestLateWins(t *testing.T) {
	// Ten arrivals 2 ms apart, stock 3; the winners are arrivals 1, 4
	// and 8 of the written order (arrival 0 was never written).
	var arrivals []arrival
	for i := range 10 {
		a := arrival{seq: i, intended: at(float64(2 * i)), sent: at(float64(2*i) + 0.2), won: i == 2 || i == 5 || i == 9}
		if i == 0 {
			a.sent = time.Time{}
		}
		arrivals = append(arrivals, a)
	}
	for _, tt := range []struct{ window, want int }{{0, 2}, {1, 2}, {2, 1}, {5, 1}, {6, 0}} {
		if got := lateWins(arrivals, 3, tt.window); got != tt.want {
			t.Errorf("lateWins with a window of %d = %d, want %d", tt.window, got, tt.want)
		}
	}
	for _, tt := range []struct {
		p99, pace float64
		want      int
	}{{0.5, 2, 1}, {2, 2, 1}, {2.1, 2, 2}, {0, 2, 0}, {9, 0, 0}} {
		if got := jitterWindow(tt.p99, tt.pace); got != tt.want {
			t.Errorf("jitterWindow(%g, %g) = %d, want %d", tt.p99, tt.pace, got, tt.want)
		}
	}
}

func TestSchedulingJitter(t *testing.T) {
	// 100 arrivals planned 2 ms apart: the first 98 written 0.5 ms late,
	// arrival 98 written 9 ms late, after arrival 99 (written 1 ms late):
	// one pair of neighbours swapped. One arrival never written.
	var arrivals []arrival
	for i := range 100 {
		late := 0.5
		switch i {
		case 98:
			late = 9
		case 99:
			late = 1
		}
		arrivals = append(arrivals, arrival{seq: i, intended: at(float64(2 * i)), sent: at(float64(2*i) + late)})
	}
	arrivals = append(arrivals, arrival{seq: 100, intended: at(200)})
	// The goroutines report in any order: shuffle them.
	slices.Reverse(arrivals)
	j := schedulingJitter(arrivals)
	want := jitter{P50ms: 0.5, P99ms: 1, MaxMs: 9, Reordered: 1, Measured: 100}
	if j != want {
		t.Errorf("schedulingJitter = %+v, want %+v", j, want)
	}
	// Written early counts as on time, not as negative lateness.
	j = schedulingJitter([]arrival{{seq: 0, intended: at(2), sent: at(1)}, {seq: 1, intended: at(4), sent: at(7)}})
	if j.P50ms != 0 || j.MaxMs != 3 || j.Reordered != 0 {
		t.Errorf("schedulingJitter with an early write = %+v, want p50 0, max 3, none swapped", j)
	}
}

// result is a made-up answer: status, problem, the order's user and
// created_at for a 201, sent at sent and answered latency later.
func result(code int, problem, user string, created, sent time.Time, latency time.Duration) sent {
	body := fmt.Sprintf(`{"type":%q}`, problem)
	if code == 201 {
		body = fmt.Sprintf(`{"user_id":%q,"created_at":%q}`, user, created.Format(time.RFC3339Nano))
	}
	return sentResult(&vegeta.Result{Code: uint16(code), Body: []byte(body), Timestamp: sent, Latency: latency})
}

func sentResult(r *vegeta.Result) sent { return sent{result: r} }

func TestT0FiguresReadTheOrdersCreatedAt(t *testing.T) {
	opens := at(3000)
	t0 := at(3000) // the lab's clock agrees with the reference clock here
	early := []sent{
		result(409, problemNotOpen, "", time.Time{}, at(1000), 5*time.Millisecond),
		result(409, problemNotOpen, "", time.Time{}, at(1000), 5*time.Millisecond),
		result(409, "/problems/sold-out", "", time.Time{}, at(1000), 5*time.Millisecond),
		// Sold before the opening: its created_at is before opens_at.
		result(201, "", "b3", at(1001), at(1000), 5*time.Millisecond),
	}
	buys := []sent{
		// Created a millisecond before opens_at, answered after T-0:
		// the database's record says it was sold early.
		result(201, "", "b0", at(2999), at(3000), 20*time.Millisecond),
		result(201, "", "b1", at(3040), at(3001), 60*time.Millisecond),
		result(201, "", "b3", at(1001), at(3001), 2*time.Millisecond), // the replay of b3's early order
		result(409, problemNotOpen, "", time.Time{}, at(3000), 3*time.Millisecond),
		result(409, "/problems/sold-out", "", time.Time{}, at(4200), 100*time.Millisecond), // sent after the first second
	}
	fig := results.T0{OpensAt: opens, Buyers: 4, EarlyOther: map[string]int{}}
	fillT0(&fig, early, buys, t0)
	if fig.RefusedEarly != 2 || fig.SoldEarly != 2 || fig.RefusedAtT0 != 1 {
		t.Errorf("refused early %d, sold early %d, refused at T-0 %d; want 2, 2 (b0 and b3), 1", fig.RefusedEarly, fig.SoldEarly, fig.RefusedAtT0)
	}
	if want := map[string]int{"409 /problems/sold-out": 1, "201": 1}; fmt.Sprint(fig.EarlyOther) != fmt.Sprint(want) {
		t.Errorf("early answers otherwise %v, want %v", fig.EarlyOther, want)
	}
	if fig.ToLastOrderMS == nil || *fig.ToLastOrderMS != 40 || fig.LastOrderBy != "answers" {
		t.Errorf("T-0 to the last unit %v by %q, want 40 ms by the answers' created_at", fig.ToLastOrderMS, fig.LastOrderBy)
	}
	if fig.ToLastSaleAnswerMS == nil || *fig.ToLastSaleAnswerMS != 61 {
		t.Errorf("T-0 to the last sale answer %v, want 61 ms", fig.ToLastSaleAnswerMS)
	}
	if fig.FirstSecond != 4 || fig.FirstSecondP50ms != 3 || fig.FirstSecondP99ms != 60 {
		t.Errorf("first second: %d buys, p50 %.1f, p99 %.1f; want 4, 3, 60", fig.FirstSecond, fig.FirstSecondP50ms, fig.FirstSecondP99ms)
	}
}
