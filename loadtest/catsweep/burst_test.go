package main

import (
	"context"
	"encoding/json"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func TestTallyOfSortsEveryStatusIntoOneKind(t *testing.T) {
	got := tallyOf([]int{201, 201, 202, 409, 409, 429, 503, 500, 502, 0, 200})
	want := tally{Created: 2, Accepted: 1, Refused: 3, Unavailable: 1, Other5xx: 2, Unanswered: 1, Unexpected: 1}
	if got != want {
		t.Fatalf("tallyOf = %+v, want %+v", got, want)
	}
}

func TestJudgeWantsSoldEqualStockEqualOrdersAndNoFailure(t *testing.T) {
	sold := tally{Created: 100, Refused: 195, Unavailable: 5}
	cases := []struct {
		name     string
		t        tally
		orders   int
		exact    bool
		oversold int
	}{
		{"exact, with 503s allowed", sold, 100, true, 0},
		{"202s written count as sold", tally{Created: 40, Accepted: 60, Refused: 200}, 100, true, 0},
		{"an order more than stock", tally{Created: 101, Refused: 199}, 101, false, 1},
		{"a buyer told yes without an order", sold, 99, false, 0},
		{"a unit left unsold", tally{Created: 99, Refused: 201}, 99, false, 0},
		{"a 500 among exact sales", tally{Created: 100, Refused: 199, Other5xx: 1}, 100, false, 0},
		{"a request never answered", tally{Created: 100, Refused: 199, Unanswered: 1}, 100, false, 0},
	}
	for _, c := range cases {
		got := judge(7, 100, 300, c.t, c.orders)
		if got.Exact != c.exact || got.Oversold != c.oversold || got.Product != 7 || got.Orders != c.orders {
			t.Errorf("%s: judge = %+v, want exact %v, oversold %d", c.name, got, c.exact, c.oversold)
		}
	}
}

func TestPickProductsDrawsDistinctIDsRepeatablyBySeed(t *testing.T) {
	a := pickProducts(rand.New(rand.NewSource(42)), 100000, 20)
	b := pickProducts(rand.New(rand.NewSource(42)), 100000, 20)
	if len(a) != 20 {
		t.Fatalf("drew %d ids, want 20", len(a))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("the same seed drew %v and %v", a, b)
		}
		if a[i] < 1 || a[i] > 100000 || (i > 0 && a[i] <= a[i-1]) {
			t.Fatalf("ids %v: want distinct, ascending, within 1..100000", a)
		}
	}
	if got := pickProducts(rand.New(rand.NewSource(1)), 3, 20); len(got) != 3 {
		t.Errorf("a catalogue of 3 gave %v, want all 3 once", got)
	}
}

func TestSizeVerdictsHoldTheWorstRowToEachBound(t *testing.T) {
	o := options{fleet: "serve", instances: 3, bursts: 2}
	share := func(v float64) *float64 { return &v }
	row := func(phase string, cpu, rss, each float64) point {
		return point{Phase: phase, Ready: true, ReadySeconds: 0.1, Idle: idle{CPUMsPerS: cpu, RSSMB: rss, RedisCmdsPerS: share(each * 3), RedisCmdsPerInstance: share(each)}}
	}
	exact := burstResult{Exact: true, Answers: tally{Unavailable: 2}}
	r := sizeRun{Items: 100000, Points: []point{row(phaseIdle, 1, 30, 2), row(phaseAfter, 12, 31, 25)}, Bursts: []burstResult{exact, exact}}
	pass := map[string]bool{}
	for _, v := range sizeVerdicts(o, r) {
		pass[strings.Fields(v.Bound)[0]] = v.Pass
	}
	want := map[string]bool{"ready": true, "CPU": false, "RSS": true, "Redis": false, "every": true}
	for k, w := range want {
		if pass[k] != w {
			t.Errorf("bound %s: pass %v, want %v (all: %v)", k, pass[k], w, pass)
		}
	}
	r.Bursts = r.Bursts[:1] // one product never burst
	if v := exactVerdict(o, r); v.Pass || !strings.Contains(v.Worst, "1 of 2 exact, 0 oversold, 2 answered 503") {
		t.Errorf("exactVerdict with a burst missing = %+v", v)
	}
	r.Points = r.Points[:1] // no window after the bursts: the bounds cannot pass
	for _, v := range sizeVerdicts(o, r)[1:] {
		if v.Pass && !strings.HasPrefix(v.Bound, "every") {
			t.Errorf("%s passed without the after-bursts window", v.Bound)
		}
	}
}

func TestPerInstanceSplitsTheSharedRedisEvenly(t *testing.T) {
	if got := perInstance(21, 3); got != 7 {
		t.Errorf("perInstance(21, 3) = %v, want 7", got)
	}
	if got := perInstance(21, 0); got != 21 {
		t.Errorf("perInstance(21, 0) = %v, want 21 (one instance)", got)
	}
}

func TestBurstFlagsRefuseWhatTheSweepCannotRun(t *testing.T) {
	for _, args := range [][]string{{"-instances", "0"}, {"-fleet", "demo", "-instances", "3"}, {"-bursts", "1001"}, {"-bursts", "2", "-burst-buyers", "0"}} {
		if _, err := parseFlags(args, &strings.Builder{}); err == nil {
			t.Errorf("parseFlags(%v) took it", args)
		}
	}
	o, err := parseFlags([]string{"-instances", "3", "-bursts", "20", "-seed", "7"}, &strings.Builder{})
	if err != nil || o.instances != 3 || o.bursts != 20 || o.seed != 7 || o.burstStock != 100 || o.burstBuyers != 300 {
		t.Errorf("parseFlags = %+v, %v", o, err)
	}
}

func TestBurstSpreadsDistinctBuyersAndJudgesByTheCounter(t *testing.T) {
	// A fake instance: the first 100 distinct buyers get 201, a repeat 500,
	// the rest 409; a fake answer set holds 100 units of product 5.
	var mu sync.Mutex
	seen := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			UserID string `json:"user_id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.URL.Path != "/api/v1/products/5/buy" || seen[body.UserID]:
			w.WriteHeader(http.StatusInternalServerError)
		case len(seen) < 100:
			w.WriteHeader(http.StatusCreated)
		default:
			w.WriteHeader(http.StatusConflict)
		}
		seen[body.UserID] = true
	}))
	defer srv.Close()
	b := burster{urls: []string{srv.URL, srv.URL}, stock: 100, buyers: 300, inFlight: 8, client: srv.Client(),
		orders: func(context.Context, int64) (int, error) { return 100, nil }}
	got, err := b.burst(context.Background(), 5, "t")
	if err != nil || !got.Exact || got.Answers.Created != 100 || got.Answers.Refused != 200 || len(seen) != 300 {
		t.Fatalf("burst = %+v, %v, %d buyers seen; want exact, 100 sold, 200 refused, 300 distinct", got, err, len(seen))
	}
}

func TestTableListsEveryBurstAndEndsWithTheVerdicts(t *testing.T) {
	o := options{fleet: "serve", instances: 3, bursts: 1, seed: 9, burstStock: 100, burstBuyers: 300, inFlight: 64}
	over := burstResult{Product: 42, Stock: 100, Buyers: 300, Answers: tally{Created: 101, Refused: 198, Unavailable: 1}, Orders: 101, Oversold: 1}
	runs := []sizeRun{{Items: 1000, Points: []point{{Items: 1000, Instance: "catsweep-1", Phase: phaseIdle, Ready: true}}, Bursts: []burstResult{over}}}
	md := table(o, runs, []verdict{exactVerdict(o, runs[0])})
	for _, want := range []string{
		"3 idle `seckill serve` on one database and Redis, stage default",
		"| 1000 | 42 | 100 | 300 | 101 | 0 | 198 | 1 | 0 | 0 | 101 | 1 | **no** |",
		"- FAIL 1000 items: every burst product sells exactly (1 products) (worst: 0 of 1 exact, 1 oversold, 1 answered 503)",
		"seed 9",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the table lacks %q:\n%s", want, md)
		}
	}
}
