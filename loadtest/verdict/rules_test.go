package verdict

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/loadtest/results"
)

// at is ms milliseconds into a fixed day.
func at(ms float64) time.Time {
	return time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC).Add(time.Duration(ms * float64(time.Millisecond)))
}

// TestJudge checks each verdict rule on its own: a row that keeps every
// rule, edited to break one, must fail naming exactly that rule (and the
// counts), and the edits that are no fault must still pass.
func TestJudge(t *testing.T) {
	// 200 buyers on stock 40: 40 sold, 160 told sold-out.
	safe := results.Row{Requests: 200, Buyers: 200, Created: 40, SoldOut: 160, BuyersWithOrder: 40, Sold: 40, InitialStock: 40,
		FinalStock: 0, Conserved: true, Statuses: map[int]int{201: 40, 409: 160}}
	tests := []struct {
		name    string
		edit    func(*results.Row)
		verdict string
		broken  []string // the rules named, in order
		note    string
	}{
		{"safe and sound", func(*results.Row) {}, results.Pass, nil, "safe: 40 sold of 40"},
		{"capped with stock unsold", func(r *results.Row) {
			// Every buyer served got a unit, so no other rule sees a fault.
			r.Planned, r.Requests, r.Buyers, r.SoldOut, r.BuyersWithOrder, r.Sold, r.Created, r.FinalStock = 200, 30, 30, 0, 30, 30, 30, 10
			r.Statuses = map[int]int{201: 30}
		}, results.Fail, []string{RuleCapped}, "capped: the --max-duration cap stopped the burst after 30 of 200 requests with 10 units unsold"},
		{"capped after the sell-out", func(r *results.Row) { r.Planned = 400 }, results.Pass, nil, "stopped at the --max-duration cap after 200 of 400 requests"},
		{"nothing sent", func(r *results.Row) { r.Requests = 0 }, results.Fail, []string{RuleNothingSent}, "no request was sent"},
		{"rate row that kept its schedule", func(r *results.Row) {
			r.SendLag = &results.Latencies{P99ms: 12, MaxMs: 30}
			r.Send = &results.Send{Schedule: results.ScheduleRate, TargetPerS: 500, AchievedPerS: 480, PeakInFlight: 40, MaxInFlight: 500}
		}, results.Pass, nil, "safe: 40 sold of 40"},
		{"rate row starved of workers", func(r *results.Row) {
			r.SendLag = &results.Latencies{P99ms: 180, MaxMs: 200}
			r.Send = &results.Send{Schedule: results.ScheduleRate, TargetPerS: 20, AchievedPerS: 13.3, PeakInFlight: 20, MaxInFlight: 20}
		}, results.Fail, []string{RuleFellBehind}, "fell-behind: the lab fell behind its rate schedule: sent 13.3 requests/s of the 20 its schedule claims (66%, below 95%); its workers were at their maximum (20 in flight of 20)"},
		{"paced row late on the CPU", func(r *results.Row) {
			r.SendLag = &results.Latencies{P99ms: 1046, MaxMs: 1100}
			r.Send = &results.Send{Schedule: results.SchedulePaced, TargetPerS: 200, AchievedPerS: 199, PeakInFlight: 70}
		}, results.Fail, []string{RuleFellBehind}, "fell-behind: the lab fell behind its paced schedule: p99 send lag 1046 ms, above 250 ms (max 1100 ms); no worker bound (at most 70 in flight)"},
		{"burst queued behind its workers", func(r *results.Row) {
			r.SendLag = &results.Latencies{P99ms: 2000, MaxMs: 2500}
			r.Send = &results.Send{Schedule: results.ScheduleBurst, PeakInFlight: 16, MaxInFlight: 16}
		}, results.Pass, nil, "safe: 40 sold of 40"},
		{"oversold", func(r *results.Row) { r.Sold, r.Oversold, r.BuyersWithOrder = 45, 5, 45 }, results.Fail,
			[]string{RuleOversold}, "oversold: oversold by 5 (45 sold of 40)"},
		{"stock not conserved", func(r *results.Row) { r.FinalStock, r.Conserved = 3, false }, results.Fail,
			[]string{RuleConservation}, "conservation: 37 units left the stock but 40 were sold"},
		{"201 without an order", func(r *results.Row) { r.BuyersWithOrder = 41 }, results.Fail,
			[]string{RuleOrdersMatch}, "orders-match: 41 buyers were answered 201 but the audit counts 40"},
		{"sold to buyers told outcome-unknown", func(r *results.Row) {
			// Three writes cut off by their deadline on the way to MySQL,
			// which committed them: their buyers heard 503 outcome-unknown.
			r.Created, r.BuyersWithOrder, r.Overloaded = 37, 37, 3
			r.Problems = map[string]int{"/problems/outcome-unknown": 3}
			r.Statuses = map[int]int{201: 37, 409: 160, 503: 3}
		}, results.Pass, nil, "3 of the 3 buyers answered 503 outcome-unknown hold an order"},
		{"sold beyond the 201s and the outcome-unknowns", func(r *results.Row) {
			r.Created, r.BuyersWithOrder, r.Overloaded = 37, 37, 3
			r.Problems = map[string]int{"/problems/outcome-unknown": 2, "/problems/timeout": 1}
			r.Statuses = map[int]int{201: 37, 409: 160, 503: 3}
		}, results.Fail, []string{RuleOrdersMatch}, "orders-match: 37 buyers were answered 201 (and 2 503 outcome-unknown) but the audit counts 40 sold"},
		{"500s beside a clean sale", func(r *results.Row) {
			r.SoldOut, r.ServerErrors, r.Statuses = 10, 150, map[int]int{201: 40, 409: 10, 500: 150}
		}, results.Fail, []string{RuleServerErrors}, "server-errors: 150 of 200 requests were answered 5xx without Retry-After (500 ×150)"},
		{"503 without Retry-After is an error", func(r *results.Row) {
			r.SoldOut, r.Overloaded, r.ServerErrors, r.Statuses = 100, 40, 20, map[int]int{201: 40, 409: 100, 503: 60}
		}, results.Fail, []string{RuleServerErrors}, "20 of 200 requests were answered 5xx without Retry-After (503 ×20)"},
		{"503 with Retry-After is overload", func(r *results.Row) {
			r.SoldOut, r.Overloaded, r.Statuses = 100, 60, map[int]int{201: 40, 409: 100, 503: 60}
		}, results.Pass, nil, "safe: 40 sold of 40"},
		{"503 during the sale is overload, noted with its share", func(r *results.Row) {
			r.SoldOut, r.Overloaded, r.Statuses = 100, 60, map[int]int{201: 40, 409: 100, 503: 60}
		}, results.Pass, nil, "503 share 30.0% (60 of 200; 0 after the last sale)"},
		{"503 after the sell-out", func(r *results.Row) {
			r.SoldOut, r.Overloaded, r.PostSale503, r.Statuses = 100, 60, 7, map[int]int{201: 40, 409: 100, 503: 60}
		}, results.Fail, []string{RulePostSale503}, "post-sale-503: 7 requests sent after the last sale was answered got 503 instead of 409 sold-out"},
		{"timeouts", func(r *results.Row) {
			r.SoldOut, r.Timeouts, r.BuyersWithOrder, r.Statuses = 159, 1, 39, map[int]int{201: 39, 409: 159, 0: 1}
			r.TransportErrors = map[string]int{"Client.Timeout exceeded": 1}
		}, results.Fail, []string{RuleTransportErrors}, `transport-errors: 1 of 200 requests got no answer (1 timeouts, 0 network errors; most often "Client.Timeout exceeded")`},
		{"refused connections", func(r *results.Row) { r.SoldOut, r.NetErrors = 150, 10 }, results.Fail,
			[]string{RuleTransportErrors}, "10 of 200 requests got no answer (0 timeouts, 10 network errors"},
		{"sold nothing", func(r *results.Row) {
			r.Created, r.SoldOut, r.Overloaded, r.BuyersWithOrder, r.Sold, r.FinalStock = 0, 0, 200, 0, 0, 40
			r.Statuses = map[int]int{503: 200}
		}, results.Fail, []string{RuleSoldNothing, RuleLiveness}, "sold-nothing: sold nothing although 40 units were in stock; the 200 requests were answered 503 ×200"},
		{"stock left while buyers were turned away", func(r *results.Row) {
			r.Created, r.BuyersWithOrder, r.Sold, r.FinalStock, r.SoldOut, r.TooMany, r.Overloaded = 30, 30, 30, 10, 0, 100, 70
		}, results.Fail, []string{RuleLiveness}, "liveness: 10 units unsold while 170 buyers went without one (429 ×100, 503 ×70)"},
		{"sold-out while stock remained", func(r *results.Row) { r.Created, r.BuyersWithOrder, r.Sold, r.FinalStock = 39, 39, 39, 1 }, results.Fail,
			[]string{RuleLiveness}, "liveness: 1 units unsold while 161 buyers went without one (409 sold-out ×160)"},
		{"a small crowd turned away with stock left", func(r *results.Row) {
			r.Requests, r.Buyers, r.Created, r.BuyersWithOrder, r.Sold, r.SoldOut, r.FinalStock, r.TooMany = 30, 30, 28, 28, 28, 0, 12, 2
		}, results.Fail, []string{RuleLiveness}, "liveness: 12 units unsold while 2 buyers went without one (429 ×2)"},
		{"sold out before the last sale, stock now gone", func(r *results.Row) { r.RefusedWithStock = 3 }, results.Fail,
			[]string{RuleRefusedWithStock}, "refused-with-stock: 3 sold-out answers were received before the last order was created"},
		{"every buyer served, stock to spare", func(r *results.Row) {
			r.Requests, r.Buyers, r.Created, r.BuyersWithOrder, r.Sold, r.SoldOut, r.FinalStock = 30, 30, 30, 30, 30, 0, 10
		}, results.Pass, nil, "safe: 30 sold of 40, 10 left"},
		{"several rules at once", func(r *results.Row) {
			r.Created, r.BuyersWithOrder, r.Sold, r.FinalStock, r.SoldOut, r.ServerErrors, r.TooMany = 20, 20, 20, 20, 0, 100, 80
			r.Statuses = map[int]int{201: 20, 429: 80, 500: 100}
		}, results.Fail, []string{RuleServerErrors, RuleLiveness}, "server-errors: 100 of 200"},
		{"every accepted order confirmed", func(r *results.Row) {
			r.Accepted, r.Confirmed, r.ConfirmP50ms, r.ConfirmP99ms, r.PeakLag = 40, 40, 3.5, 20, 12
			r.Statuses = map[int]int{202: 40, 409: 160}
		}, results.Pass, nil, "40 accepted (202), 40 confirmed; time to confirm p50 3.5 ms, p99 20.0 ms; peak lag 12 orders"},
		{"accepted orders not confirmed", func(r *results.Row) {
			r.Accepted, r.Confirmed, r.FailedOrders, r.Unconfirmed, r.Sold, r.FinalStock, r.SoldOut = 40, 37, 2, 1, 37, 3, 157
			r.Statuses = map[int]int{202: 40, 409: 160}
		}, results.Fail, []string{RuleOrdersMatch, RuleUnconfirmed, RuleLiveness}, "unconfirmed: 3 of 40 accepted orders were not confirmed (2 failed, 1 pending or lost)"},
		{"expected oversell seen", func(r *results.Row) { r.ExpectOversell, r.Sold, r.Oversold, r.Conserved = true, 90, 50, false }, results.Pass, nil,
			"oversold by 50 as expected"},
		{"oversold by design with errors", func(r *results.Row) {
			r.ExpectOversell, r.Sold, r.Oversold, r.ServerErrors, r.Timeouts = true, 90, 50, 20, 3
			r.Statuses = map[int]int{201: 90, 500: 20, 0: 3}
		}, results.Pass, nil, "20 answers were 5xx (500 ×20); 3 requests got no answer"},
		{"expected oversell missing", func(r *results.Row) { r.ExpectOversell = true }, results.Fail, []string{RuleExpectedOversell}, "widens the race"},
		{"too few buyers to oversell", func(r *results.Row) { r.ExpectOversell, r.Buyers = true, 40 }, results.Fail, []string{RuleExpectedOversell}, "only 40 buyers were sent"},
		{"MySQL disagrees", func(r *results.Row) { r.MySQL = &results.DBCount{Orders: 41, Sold: 41, InitialStock: 40} }, results.Fail,
			[]string{RuleMySQLAgrees}, "mysql-agrees: MySQL disagrees"},
		{"MySQL agrees", func(r *results.Row) { r.MySQL = &results.DBCount{Orders: 40, Sold: 40, InitialStock: 40} }, results.Pass, nil, "MySQL agrees"},
		{"another fleet wrote the item", func(r *results.Row) {
			r.MySQL = &results.DBCount{Orders: 40, Sold: 40, InitialStock: 40, Foreign: map[string]int{"wrk-1": 33, "wrk-2": 2}}
		}, results.Fail, []string{RuleForeignWriter}, "not among the targets (wrk-1 ×33, wrk-2 ×2): another fleet shares this database"},
		{"capped burst", func(r *results.Row) { r.Planned = 600 }, results.Pass, nil, "cap after 200 of 600"},
		{"nothing to sell", func(r *results.Row) { r.Created, r.BuyersWithOrder, r.Sold, r.InitialStock = 0, 0, 0, 0 }, results.Pass, nil, "safe: 0 sold of 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := safe
			tt.edit(&r)
			Judge(&r)
			if r.Verdict != tt.verdict || !strings.Contains(r.Note, tt.note) || !slices.Equal(r.Broken, tt.broken) {
				t.Errorf("got %s %v %q, want %s %v containing %q", r.Verdict, r.Broken, r.Note, tt.verdict, tt.broken, tt.note)
			}
		})
	}
}

func TestExpectsOversell(t *testing.T) {
	tests := []struct {
		stage     string
		instances int
		workers   int
		crowd     int
		explicit  map[string]bool
		want      bool
	}{
		{"unlocked", 1, 16, 200, nil, true},
		{"unlocked", 3, 1, 200, nil, false}, // one buyer at a time cannot race
		{"unlocked", 3, 16, 40, nil, false}, // a crowd no larger than the stock cannot oversell
		{"local-mutex", 3, 16, 200, nil, true},
		{"local-mutex", 1, 16, 200, nil, false},
		{"redis-lock", 3, 16, 200, nil, false},
		{"db-atomic", 3, 16, 200, nil, false},
		{"db-atomic", 3, 16, 200, map[string]bool{"db-atomic": true}, true},
		{"unlocked", 3, 16, 200, map[string]bool{"db-atomic": true}, false},
	}
	for _, tt := range tests {
		if got := ExpectsOversell(tt.explicit, tt.stage, tt.instances, tt.workers, tt.crowd, 40); got != tt.want {
			t.Errorf("expectsOversell(%v, %s, %d instances, %d workers, crowd %d) = %v, want %v",
				tt.explicit, tt.stage, tt.instances, tt.workers, tt.crowd, got, tt.want)
		}
	}
}

// TestJudgeT0AndFirstCome checks the rules of the T-0 and paced rows, as
// TestJudge does the others: a row that keeps them passes, and each edit
// breaks exactly the rule it names.
func TestJudgeT0AndFirstCome(t *testing.T) {
	sound := results.Row{Requests: 200, Buyers: 200, Created: 40, SoldOut: 160, BuyersWithOrder: 40, Sold: 40, InitialStock: 40,
		FinalStock: 0, Conserved: true, Statuses: map[int]int{201: 40, 409: 160}}
	withT0 := func(edit func(*results.T0)) func(*results.Row) {
		return func(r *results.Row) {
			f := results.T0{OpensAt: at(3000), Buyers: 200, RefusedEarly: 200, EarlyOther: map[string]int{}}
			edit(&f)
			r.T0 = &f
		}
	}
	score := func(v float64) *float64 { return &v }
	withPaced := func(s, target *float64, firstWon int) func(*results.Row) {
		return func(r *results.Row) {
			r.Paced = &results.Paced{PaceMS: 2, Arrivals: 120, Score: s, Target: target, FirstWon: firstWon, Won: 40, Stock: 40}
		}
	}
	tests := []struct {
		name    string
		edit    func(*results.Row)
		verdict string
		broken  []string
		note    string
	}{
		{"T-0 kept", withT0(func(*results.T0) {}), results.Pass, nil, "T-0: 200 buyers connected early, 200 refused sale-not-open"},
		{"sold before the opening", withT0(func(f *results.T0) { f.SoldEarly = 1 }), results.Fail, []string{RuleSoldEarly},
			"sold-early: 1 orders were created before opens_at 00:00:03.000"},
		{"MySQL holds an early order", withT0(func(f *results.T0) { n := 2; f.SoldEarlyMySQL = &n }), results.Fail, []string{RuleSoldEarly},
			"(0 by the answers' created_at, 2 in MySQL)"},
		{"an early buyer not refused", withT0(func(f *results.T0) { f.RefusedEarly, f.EarlyOther["409 /problems/sold-out"] = 199, 1 }),
			results.Fail, []string{RuleEarlyNotRefused}, "1 of 200 buyers who asked before the opening were answered otherwise than 409 sale-not-open (409 /problems/sold-out ×1)"},
		{"a safe stage short of its stock at T-0", func(r *results.Row) {
			// The buyers who did not get the last unit heard
			// sale-not-open at T-0: no rule but this one sees it.
			withT0(func(*results.T0) {})(r)
			r.SoldOut, r.Conflicts, r.Created, r.BuyersWithOrder, r.Sold, r.FinalStock = 0, 161, 39, 39, 39, 1
		}, results.Fail, []string{RuleExactSale}, "exact-sale: sold 39 at T-0, want exactly 40 (stock 40, 200 buyers)"},
		{"a crowd smaller than the stock, each served", func(r *results.Row) {
			withT0(func(f *results.T0) { f.Buyers, f.RefusedEarly = 30, 30 })(r)
			r.Requests, r.Buyers, r.SoldOut, r.Created, r.BuyersWithOrder, r.Sold, r.FinalStock = 30, 30, 0, 30, 30, 30, 10
		}, results.Pass, nil, "safe: 30 sold of 40, 10 left"},
		{"a crowd smaller than the stock, one left out", func(r *results.Row) {
			withT0(func(f *results.T0) { f.Buyers, f.RefusedEarly = 30, 30 })(r)
			r.Requests, r.Buyers, r.SoldOut, r.Conflicts, r.Created, r.BuyersWithOrder, r.Sold, r.FinalStock = 30, 30, 0, 1, 29, 29, 29, 11
		}, results.Fail, []string{RuleExactSale}, "exact-sale: sold 29 at T-0, want exactly 30 (stock 40, 30 buyers)"},
		{"a racing stage sells early too", func(r *results.Row) {
			withT0(func(f *results.T0) { f.SoldEarly = 3 })(r)
			r.ExpectOversell, r.Sold, r.Oversold = true, 90, 50
		}, results.Fail, []string{RuleSoldEarly}, "sold-early: 3 orders"},
		{"first come met", withPaced(score(0.95), score(0.95), 38), results.Pass, nil, "first-come score 0.95 (38 of 40 units to the first 40 arrivals)"},
		{"first come missed", func(r *results.Row) {
			withPaced(score(0.9), score(0.95), 36)(r)
			r.Paced.LateWins, r.Paced.JitterWindow = 3, 2
		}, results.Fail, []string{RuleFirstCome},
			"first-come: first-come score 0.90, below 0.95: the first 40 arrivals won 36 of the 40 units sold; of the 4 units later arrivals won, 3 went to arrivals more than 2 places late"},
		{"first come missed within the jitter", func(r *results.Row) {
			withPaced(score(0.9), score(0.95), 36)(r)
			r.Paced.JitterWindow = 30
		}, results.Fail, []string{RuleFirstCome},
			"the 4 units later arrivals won all went within 30 places, the lab's p99 jitter: the machine's scheduling decided them"},
		{"no target: shown as it is", withPaced(score(0.5), nil, 20), results.Pass, nil, "first-come score 0.50 (20 of 40 units to the first 40 arrivals), no target for this stage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := sound
			tt.edit(&r)
			Judge(&r)
			if r.Verdict != tt.verdict || !strings.Contains(r.Note, tt.note) || !slices.Equal(r.Broken, tt.broken) {
				t.Errorf("got %s %v %q, want %s %v containing %q", r.Verdict, r.Broken, r.Note, tt.verdict, tt.broken, tt.note)
			}
		})
	}
}

// TestRulesOfAClosedModel: a closed row keeps the sale's rules
// (oversold, orders-match and the rest judge it as any row), and
// fell-behind does not apply to it: the row names the rule as not judged,
// with why, whatever its send lag, rather than passing it in silence. A
// rate row is judged by it, and a burst row names it too.
func TestRulesOfAClosedModel(t *testing.T) {
	closed := func() results.Row {
		return results.Row{Model: results.ModelClosed, Requests: 200, Buyers: 200, Created: 40, SoldOut: 160, BuyersWithOrder: 40, Sold: 40,
			InitialStock: 40, Conserved: true, Statuses: map[int]int{201: 40, 409: 160},
			SendLag: &results.Latencies{P99ms: 5000, MaxMs: 6000},
			Send:    &results.Send{Schedule: results.ScheduleClosed, PeakInFlight: 64, MaxInFlight: 64}}
	}
	r := closed()
	Judge(&r)
	if r.Verdict != results.Pass || !strings.Contains(r.NotJudged[RuleFellBehind], "closed model") {
		t.Errorf("closed row with a 5 s send lag: %s %v, not judged %q: want a pass with fell-behind named as not applying", r.Verdict, r.Broken, r.NotJudged)
	}
	r = closed()
	r.Sold, r.Oversold, r.BuyersWithOrder = 45, 5, 45
	Judge(&r)
	if r.Verdict != results.Fail || !slices.Equal(r.Broken, []string{RuleOversold}) {
		t.Errorf("closed row oversold by 5: %s %v, want a fail on oversold", r.Verdict, r.Broken)
	}
	r = closed()
	r.BuyersWithOrder = 41
	Judge(&r)
	if !slices.Equal(r.Broken, []string{RuleOrdersMatch}) {
		t.Errorf("closed row with a 201 beyond the audit: %v, want orders-match", r.Broken)
	}
	r = closed()
	r.Send = &results.Send{Schedule: results.ScheduleRate, TargetPerS: 20, AchievedPerS: 20, PeakInFlight: 3, MaxInFlight: 20}
	Judge(&r)
	if _, out := r.NotJudged[RuleFellBehind]; out || !slices.Equal(r.Broken, []string{RuleFellBehind}) {
		t.Errorf("rate row with a 5 s send lag: broken %v, not judged %q: want fell-behind judged and broken", r.Broken, r.NotJudged)
	}
	r = closed()
	r.Send = &results.Send{Schedule: results.ScheduleBurst, PeakInFlight: 64, MaxInFlight: 64}
	Judge(&r)
	if !strings.Contains(r.NotJudged[RuleFellBehind], "burst") {
		t.Errorf("burst row: not judged %q, want fell-behind named", r.NotJudged)
	}
}
