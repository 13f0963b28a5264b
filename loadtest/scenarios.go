package main

import (
	"github.com/seckill-lab/seckill/loadtest/fleet"

	"github.com/seckill-lab/seckill/loadtest/report"

	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/loadtest/results"
)

// scenario is one kind of crowd: what each buyer sends, to which item, and
// how often.
type scenario struct {
	name string
	// coupon selects the coupon routes (grab, coupon audit) instead of the
	// product routes (buy, product audit).
	coupon bool
	// copies is how many times each buyer sends the same request, with the
	// same user id and Idempotency-Key; the copies leave back to back, so
	// they are in flight together, as an impatient client's retries are.
	copies int
	// crowd is how the buyers arrive: through vegeta's attacker in the
	// --shape of the run, all at T-0 (t0.go), or one after another
	// (paced.go).
	crowd results.Crowd
	// safeStages runs the scenario only on the stages that are safe in a
	// fleet when --stages is all: its verdicts are about the sale (the
	// window, who won), which a stage that oversells by design has
	// nothing to say about. An explicit --stages runs every stage listed.
	safeStages bool
	// only, when set, are the stages the scenario runs on when --stages
	// is all (the scalper rows: the limiter comes before every stage
	// alike, so one shows it); an explicit --stages runs every stage
	// listed.
	only []string
	// limited turns the fleet's per-address rate limit on for the row
	// (the scalper crowd, scalper.go).
	limited bool
	about   string
}

var scenarios = []scenario{
	{name: "buy", copies: 1, about: "hot product: every buyer buys one unit, once"},
	{name: "grab", coupon: true, copies: 1, about: "coupon grab: every buyer grabs one coupon, once"},
	{name: "retry-storm", copies: 3, about: "hot product, but every buyer sends the same request 3 times at once with one Idempotency-Key"},
	{name: "t0", copies: 1, crowd: results.CrowdT0, safeStages: true, about: "T-0: the sale opens a moment ahead; every buyer connects and is refused sale-not-open first, then all fire at the opening"},
	{name: "paced", copies: 1, crowd: results.CrowdPaced, safeStages: true, about: "paced arrivals: one buyer every --pace, in a recorded order, until the stock is sold; first-come score"},
	{name: "scalper", copies: 1, crowd: results.CrowdScalper, safeStages: true, only: []string{inventory.StageRedisAtomic},
		about: "scalpers, rate limit off: 10% of the people, each with 10 accounts behind one address firing every 50 ms from T-0; the others one request each in the first second"},
	{name: "scalper-limited", copies: 1, crowd: results.CrowdScalper, safeStages: true, only: []string{inventory.StageRedisAtomic}, limited: true,
		about: "the same crowd with a per-address rate limit and an opening draw (--scalper-draw) on every instance, the sale opening at T-0: no address wins more than the limit lets through, and the scalpers surely winning more than --scalper-target times their share fails the row"},
}

func lookupScenario(name string) (scenario, bool) {
	for _, sc := range scenarios {
		if sc.name == name {
			return sc, true
		}
	}
	return scenario{}, false
}

// buyScenario is the buy scenario, whose product the sold-out baselines
// buy too.
func buyScenario() scenario {
	sc, _ := lookupScenario("buy")
	return sc
}

// scenes is what the report's headings say of every scenario.
func scenes() map[string]report.Scene {
	out := make(map[string]report.Scene, len(scenarios))
	for _, sc := range scenarios {
		out[sc.name] = report.Scene{Crowd: sc.crowd, About: sc.about}
	}
	return out
}

func scenarioNames() []string {
	names := make([]string, len(scenarios))
	for i, sc := range scenarios {
		names[i] = sc.name
	}
	return names
}

// attackScenarioNames are the scenarios vegeta's attacker sends: the
// short lab of CI runs these, and leaves the T-0 and paced verdicts,
// which need a lead and a pace a loaded CI machine may not keep, to
// `make lab`.
func attackScenarioNames() []string {
	var names []string
	for _, sc := range scenarios {
		if sc.crowd == results.CrowdAttack {
			names = append(names, sc.name)
		}
	}
	return names
}

// stagesOf lists the stages sc runs on: o.stages, or, when --stages was
// all and sc is about the sale itself, the stages safe in a fleet. A new
// stage name (a fair redis-lock, say) joins by being in o.stages.
func (sc scenario) stagesOf(o options) []string {
	if !sc.safeStages || !o.allStages {
		return o.stages
	}
	var out []string
	for _, st := range o.stages {
		if !inventory.Oversells(st, 2) && (sc.only == nil || slices.Contains(sc.only, st)) {
			out = append(out, st)
		}
	}
	return out
}

// item is the scenario's item id in the fleet's terms.
func (sc scenario) item(id int64) fleet.Item { return fleet.Item{Coupon: sc.coupon, ID: id} }

// kind is the path segment of the item's routes.
func (sc scenario) kind() string {
	if sc.coupon {
		return "coupons"
	}
	return "products"
}

func (sc scenario) itemID(o options) int64 {
	if sc.coupon {
		return o.coupon
	}
	return o.product
}

// actionPath is the route one buyer posts to, below a base URL.
func (sc scenario) actionPath(id int64) string {
	if sc.coupon {
		return fmt.Sprintf("/api/v1/coupons/%d/grab", id)
	}
	return fmt.Sprintf("/api/v1/products/%d/buy", id)
}

// body is a buyer's request body. It is built by hand, not marshalled
// from a map: the lab's own CPU per request is part of the CPU per answer
// it reports (package cpu), and one body is built for every request.
func (sc scenario) body(user string) []byte {
	id, err := json.Marshal(user) // the user id, quoted and escaped as JSON
	if err != nil {
		panic(err) // a string always marshals
	}
	b := make([]byte, 0, len(id)+32)
	b = append(append(append(b, `{"user_id":`...), id...), ',')
	if !sc.coupon { // a grab has no quantity
		b = append(b, `"quantity":1,`...)
	}
	b[len(b)-1] = '}'
	return b
}

// attackPlan is everything one attack needs to know.
type attackPlan struct {
	scenario scenario
	stage    string
	targets  []string
	token    string
	itemID   int64
	// tag makes user ids and Idempotency-Keys unique to this run and row:
	// idempotency records outlive a stock reset, so a key reused by a later
	// row would be answered with an earlier row's stored order.
	tag string
	// series names the attack in the stage's latency plot.
	series string
}

// target fills t with send number send of buyer: its route on its
// instance, its body and headers. Every way of sending a buy (vegeta's
// targeter, the T-0 crowd, paced arrivals) builds its request here.
func (p attackPlan) target(t *vegeta.Target, buyer, send uint64) {
	user := p.userID(buyer)
	t.Method = http.MethodPost
	t.URL = p.targets[(buyer+send)%uint64(len(p.targets))] + p.scenario.actionPath(p.itemID)
	t.Body = p.scenario.body(user)
	t.Header = http.Header{
		"Content-Type":    {"application/json"},
		"Authorization":   {"Bearer " + p.token},
		"X-Seckill-Stage": {p.stage},
		"Idempotency-Key": {user},
	}
}

// targeter hands out the requests of an attack. Request i is send number
// i mod copies (0 is the first) of buyer i / copies, and goes to target
// (buyer + send) mod len(targets): plain round-robin when every buyer
// sends once, and when a buyer sends copies, they land on different
// instances, as retries through a load balancer do, while first copies
// still rotate over all instances.
// vegeta calls it from many workers at once, hence the atomic counter.
func (p attackPlan) targeter() vegeta.Targeter {
	var next atomic.Uint64
	copies := uint64(max(1, p.scenario.copies))
	return func(t *vegeta.Target) error {
		i := next.Add(1) - 1
		p.target(t, i/copies, i%copies)
		return nil
	}
}

// userID is buyer n's id, which doubles as its Idempotency-Key.
func (p attackPlan) userID(n uint64) string { return fmt.Sprintf("%s-%d", p.tag, n) }

// burstPacer lets an attack send hits as fast as its workers take them,
// and stops after the last one: the whole crowd arrives at once, and the
// worker count bounds how many requests are in flight.
type burstPacer struct{ hits uint64 }

func (p burstPacer) Pace(_ time.Duration, sent uint64) (time.Duration, bool) {
	return 0, sent >= p.hits
}

// Rate is 0: a burst has no rate, only a worker bound.
func (p burstPacer) Rate(time.Duration) float64 { return 0 }

var _ vegeta.Pacer = burstPacer{}
