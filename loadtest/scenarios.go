package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
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
	about  string
}

var scenarios = []scenario{
	{name: "buy", copies: 1, about: "hot product: every buyer buys one unit, once"},
	{name: "grab", coupon: true, copies: 1, about: "coupon grab: every buyer grabs one coupon, once"},
	{name: "retry-storm", copies: 3, about: "hot product, but every buyer sends the same request 3 times at once with one Idempotency-Key"},
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

func scenarioNames() []string {
	names := make([]string, len(scenarios))
	for i, sc := range scenarios {
		names[i] = sc.name
	}
	return names
}

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

func (sc scenario) body(user string) []byte {
	var v any = map[string]any{"user_id": user, "quantity": 1}
	if sc.coupon {
		v = map[string]any{"user_id": user} // a grab has no quantity
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // maps of strings and ints always marshal
	}
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
	n := uint64(len(p.targets))
	path := p.scenario.actionPath(p.itemID)
	return func(t *vegeta.Target) error {
		i := next.Add(1) - 1
		buyer, send := i/copies, i%copies
		user := p.userID(buyer)
		t.Method = http.MethodPost
		t.URL = p.targets[(buyer+send)%n] + path
		t.Body = p.scenario.body(user)
		t.Header = http.Header{
			"Content-Type":    {"application/json"},
			"Authorization":   {"Bearer " + p.token},
			"X-Seckill-Stage": {p.stage},
			"Idempotency-Key": {user},
		}
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
