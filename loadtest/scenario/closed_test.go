package scenario

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
	"github.com/tsenart/vegeta/v12/lib/plot"

	"github.com/seckill-lab/seckill/loadtest/results"
)

// waveShop is a fake shop that holds every buy until users of them are
// in its hands at once, then answers them all 201: a closed crowd of
// users moves through it in waves, and one request beyond users in
// flight would show as a peak above users. It counts the buyers it saw.
type waveShop struct {
	users int

	mu       sync.Mutex
	wake     *sync.Cond
	inFlight int
	peak     int
	wave     int
	buyers   map[string]int
}

func newWaveShop(users int) *waveShop {
	s := &waveShop{users: users, buyers: map[string]int{}}
	s.wake = sync.NewCond(&s.mu)
	return s
}

func (s *waveShop) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		return
	}
	var body struct {
		UserID string `json:"user_id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.buyers[body.UserID]++
	s.inFlight++
	s.peak = max(s.peak, s.inFlight)
	if s.inFlight == s.users {
		s.wave++
		s.wake.Broadcast()
	} else {
		for wave := s.wave; wave == s.wave; {
			s.wake.Wait()
		}
	}
	s.inFlight-- // before the answer leaves: the user's next buy counts anew
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"user_id":"`+body.UserID+`","order_no":"o-`+body.UserID+`"}`)
}

// TestClosedCrowdKeepsItsUsersInFlight: 8 users, 4 buys each, no think
// time, against a shop that answers only when 8 buys are in its hands.
// The peak in flight is the users, exactly, at the shop and by the lab's
// own clocks: reached, since the shop answers nothing before, and never
// passed. Every buy is a new buyer.
func TestClosedCrowdKeepsItsUsersInFlight(t *testing.T) {
	const users, iterations = 8, 4
	shop := newWaveShop(users)
	srv := httptest.NewServer(shop)
	defer srv.Close()
	o := Config{ClosedUsers: users, ClosedIterations: iterations, Timeout: 10 * time.Second}
	sc, _ := Lookup("closed")
	p := Plan{Scenario: sc, Stage: "db-atomic", Targets: []string{srv.URL}, Token: "tok", ItemID: 1, Tag: "closed", Series: "closed"}
	res, err := closedCrowd{}.Attack(context.Background(), o, nil, p, plot.New(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if shop.peak != users {
		t.Errorf("the shop saw %d buys in flight at most, want %d (the users)", shop.peak, users)
	}
	if res.tally.requests != users*iterations || len(shop.buyers) != users*iterations || len(res.tally.buyers) != users*iterations {
		t.Errorf("%d requests, %d buyers at the shop, %d answered 201: want %d of each (a new buyer every iteration)",
			res.tally.requests, len(shop.buyers), len(res.tally.buyers), users*iterations)
	}
	var r results.Row
	res.clocks.fill(&r)
	if r.Send == nil || r.Send.Schedule != results.ScheduleClosed || r.Send.MaxInFlight != users || r.Send.PeakInFlight != users || r.Send.Scheduled() {
		t.Errorf("send %+v: want the closed schedule, %d in flight at most and at the peak (the lab's clocks), no rate", r.Send, users)
	}
}

// fakeUserClock is one user's time: it moves only when the user thinks
// or waits for an answer.
type fakeUserClock struct{ now time.Time }

func (c *fakeUserClock) Now() time.Time                           { return c.now }
func (c *fakeUserClock) Sleep(_ context.Context, d time.Duration) { c.now = c.now.Add(d) }

// TestClosedUsersComeBackAfterTheirThinkTime counts iterations on fake
// clocks: each answer takes 50 ms and each user thinks 100 ms, so in a
// second a user arrives at 0, 150, ..., 900 ms: 7 buys, each arrival
// 150 ms after the one before. Without think time it would be 20.
func TestClosedUsersComeBackAfterTheirThinkTime(t *testing.T) {
	start := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		think time.Duration
		want  []int64 // one user's arrivals, in ms
	}{
		{100 * time.Millisecond, []int64{0, 150, 300, 450, 600, 750, 900}},
		{0, []int64{0, 50, 100, 150, 200, 250, 300, 350, 400, 450, 500, 550, 600, 650, 700, 750, 800, 850, 900, 950}},
	} {
		const users = 3
		clocks := make([]*fakeUserClock, users)
		for i := range clocks {
			clocks[i] = &fakeUserClock{now: start}
		}
		var mu sync.Mutex
		arrivals := map[int][]int64{}
		var buyers []uint64
		l := &closedLoop{users: users, think: tt.think, duration: time.Second,
			clockOf: func(i int) closedClock { return clocks[i] },
			record: func(s sent) {
				if !s.due.Equal(s.result.Timestamp) {
					t.Errorf("a buy sent at %v recorded its buyer's arrival at %v: the fake clock has no lag", s.result.Timestamp, s.due)
				}
			},
		}
		l.send = func(_ context.Context, user int, buyer uint64) sent {
			c := clocks[user]
			mu.Lock()
			arrivals[user] = append(arrivals[user], c.now.Sub(start).Milliseconds())
			buyers = append(buyers, buyer)
			mu.Unlock()
			r := &vegeta.Result{Timestamp: c.now, Latency: 50 * time.Millisecond, Code: 201}
			c.now = c.now.Add(r.Latency)
			return sent{result: r}
		}
		l.run(context.Background())
		for u := range users {
			if !slices.Equal(arrivals[u], tt.want) {
				t.Errorf("think %v: user %d arrived at %v ms, want %v", tt.think, u, arrivals[u], tt.want)
			}
		}
		slices.Sort(buyers)
		if n := len(slices.Compact(buyers)); n != users*len(tt.want) {
			t.Errorf("think %v: %d distinct buyers, want %d: one per buy", tt.think, n, users*len(tt.want))
		}
	}
}

// TestEveryScenarioStatesItsModel: the report's model column reads each
// scenario's, so none may leave it out, and the closed scenario is the
// closed one.
func TestEveryScenarioStatesItsModel(t *testing.T) {
	for _, sc := range All() {
		if sc.Model != results.ModelOpen && sc.Model != results.ModelClosed {
			t.Errorf("%s states model %q, want open or closed", sc.Name, sc.Model)
		}
		if closed := sc.Kind == results.CrowdClosed; closed != (sc.Model == results.ModelClosed) {
			t.Errorf("%s: crowd %d with model %q", sc.Name, sc.Kind, sc.Model)
		}
	}
}
