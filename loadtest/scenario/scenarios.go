package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/loadtest/fleet"
	"github.com/seckill-lab/seckill/loadtest/results"
)

// Scenario is one kind of crowd: what each buyer sends, to which item, and
// how often.
type Scenario struct {
	Name string
	// Coupon selects the coupon routes (grab, coupon audit) instead of the
	// product routes (buy, product audit).
	Coupon bool
	// Copies is how many times each buyer sends the same request, with the
	// same user id and Idempotency-Key; the copies leave back to back, so
	// they are in flight together, as an impatient client's retries are.
	Copies int
	// Kind is how the buyers arrive: through vegeta's attacker in the
	// --shape of the run, all at T-0 (t0.go), one after another
	// (paced.go), or as scalpers and ordinary buyers (scalper.go); Crowd
	// is the attack that sends them.
	Kind results.Crowd
	// SafeStages runs the scenario only on the stages that are safe in a
	// fleet when --stages is all: its verdicts are about the sale (the
	// window, who won), which a stage that oversells by design has
	// nothing to say about. An explicit --stages runs every stage listed.
	SafeStages bool
	// Only, when set, are the stages the scenario runs on when --stages
	// is all (the scalper rows: the limiter comes before every stage
	// alike, so one shows it); an explicit --stages runs every stage
	// listed.
	Only []string
	// Limited turns the fleet's per-address rate limit on for the row
	// (the scalper crowd, scalper.go).
	Limited bool
	// Model is how the buyers come, which the report states beside every
	// row: results.ModelOpen (arrivals on a schedule, whatever the
	// answers) or results.ModelClosed (a population, each waiting for its
	// answer). Every scenario states one.
	Model string
	// OptIn leaves the scenario out of the default --scenarios: it runs
	// when named (the many row, which make lab's three minutes cannot
	// hold on the demo today; see docs/lab.md).
	OptIn bool
	About string
}

var scenarios = []Scenario{
	{Name: "buy", Copies: 1, Model: results.ModelOpen, About: "hot product: every buyer buys one unit, once"},
	{Name: "grab", Coupon: true, Copies: 1, Model: results.ModelOpen, About: "coupon grab: every buyer grabs one coupon, once"},
	{Name: "retry-storm", Copies: 3, Model: results.ModelOpen, About: "hot product, but every buyer sends the same request 3 times at once with one Idempotency-Key"},
	{Name: "t0", Copies: 1, Kind: results.CrowdT0, SafeStages: true, Model: results.ModelOpen, About: "T-0: the sale opens a moment ahead; every buyer connects and is refused sale-not-open first, then all fire at the opening"},
	{Name: "paced", Copies: 1, Kind: results.CrowdPaced, SafeStages: true, Model: results.ModelOpen, About: "paced arrivals: one buyer every --pace, in a recorded order, until the stock is sold; first-come score"},
	{Name: "scalper", Copies: 1, Kind: results.CrowdScalper, SafeStages: true, Only: []string{inventory.StageRedisAtomic}, Model: results.ModelOpen,
		About: "scalpers, rate limit off: 10% of the people, each with 10 accounts behind one address firing every 50 ms from T-0; the others one request each in the first second"},
	{Name: "scalper-limited", Copies: 1, Kind: results.CrowdScalper, SafeStages: true, Only: []string{inventory.StageRedisAtomic}, Limited: true, Model: results.ModelOpen,
		About: "the same crowd with a per-address rate limit and an opening draw (--scalper-draw) on every instance, the sale opening at T-0: no address wins more than the limit lets through, and the scalpers surely winning more than --scalper-target times their share fails the row"},
	{Name: "closed", Copies: 1, Kind: results.CrowdClosed, SafeStages: true, Model: results.ModelClosed,
		About: "closed model, as behind a waiting room: --closed-users users, each buying as a new buyer, waiting for the answer and coming back after --closed-think, for --closed-duration (or --closed-iterations each)"},
	{Name: "many", Copies: 1, Kind: results.CrowdMany, SafeStages: true, Model: results.ModelOpen, Only: []string{inventory.StageRedisAtomic}, OptIn: true,
		About: "many sales at once: --many-products products of --many-stock units, opened by sessions; --many-buyers buyers fired like buy, each choosing a product by a Zipf law (s=1, --many-seed); exact per product, and answered/s at least 0.8× buy's"},
	{Name: "waiting-room", Copies: 1, Kind: results.CrowdRoom, SafeStages: true, Model: results.ModelOpen, Only: []string{inventory.StageRedisAtomic},
		About: "a waiting room on the item (--room-rate passes/s, --room-max-inside, a --room-shuffle opening): --room-people join around the opening (--room-scalpers of them with 10 accounts behind one address, polling every 200 ms), poll when told, buy with their passes and stop on sold-out; exact, buy rate ≤ 1.1× the admission rate, no 503, first-come ≥ 0.95, sold-out heard at the first poll after the last sale, scalpers' gain ≤ 1.5×"},
}

// All are the lab's scenarios, in the order it runs them.
func All() []Scenario { return slices.Clone(scenarios) }

// Lookup finds a scenario by name.
func Lookup(name string) (Scenario, bool) {
	for _, sc := range scenarios {
		if sc.Name == name {
			return sc, true
		}
	}
	return Scenario{}, false
}

// Buy is the buy scenario, whose product the sold-out baselines
// buy too.
func Buy() Scenario {
	sc, _ := Lookup("buy")
	return sc
}

// Names are the scenarios' names, in the order the lab runs them.
func Names() []string {
	names := make([]string, len(scenarios))
	for i, sc := range scenarios {
		names[i] = sc.Name
	}
	return names
}

// DefaultNames are the scenarios a run without --scenarios runs: all
// but the opt-in ones.
func DefaultNames() []string {
	var names []string
	for _, sc := range scenarios {
		if !sc.OptIn {
			names = append(names, sc.Name)
		}
	}
	return names
}

// AttackNames are the scenarios vegeta's attacker sends: the
// short lab of CI runs these, and leaves the T-0 and paced verdicts,
// which need a lead and a pace a loaded CI machine may not keep, to
// `make lab`.
func AttackNames() []string {
	var names []string
	for _, sc := range scenarios {
		if sc.Kind == results.CrowdAttack {
			names = append(names, sc.Name)
		}
	}
	return names
}

// StagesOf lists the stages sc runs on: o.Stages, or, when --stages was
// all and sc is about the sale itself, the stages safe in a fleet (of
// them, sc.Only's, unless --room-all-stages frees the waiting room's). A new
// stage name (a fair redis-lock, say) joins by being in o.Stages.
func (sc Scenario) StagesOf(o Config) []string {
	if !sc.SafeStages || !o.AllStages || (sc.Kind == results.CrowdMany && o.ManyAllStages) {
		return o.Stages
	}
	only := sc.Only
	if sc.Kind == results.CrowdRoom && o.RoomAllStages {
		only = nil // every safe stage
	}
	var out []string
	for _, st := range o.Stages {
		if !inventory.Oversells(st, 2) && (only == nil || slices.Contains(only, st)) {
			out = append(out, st)
		}
	}
	return out
}

// Item is the scenario's item id in the fleet's terms.
func (sc Scenario) Item(id int64) fleet.Item { return fleet.Item{Coupon: sc.Coupon, ID: id} }

// ItemID is the item sc sells: the coupon batch or the product of o.
func (sc Scenario) ItemID(o Config) int64 {
	switch {
	case sc.Coupon:
		return o.Coupon
	case sc.Kind == results.CrowdMany:
		return ManyFirstID // the hottest; the crowd audits every product itself
	}
	return o.Product
}

// SetUp readies sc's sale before its attack, and before the CPU meter's
// first reading: it restocks the item, or, for the many crowd, creates
// and restocks its products (many.go). The T-0 crowd resets within its
// attack, with the sale's opening.
func (sc Scenario) SetUp(ctx context.Context, c Config, f *fleet.Fleet, id int64) error {
	switch sc.Kind {
	case results.CrowdT0:
		return nil
	case results.CrowdMany:
		m := newMany(c)
		if err := setUpMany(ctx, f, m); err != nil {
			return fmt.Errorf("many: setting up %d products: %w", m.Products, err)
		}
		return nil
	}
	return f.Reset(ctx, sc.Item(id), c.Stock)
}

// ActionPath is the route one buyer posts to, below a base URL.
func (sc Scenario) ActionPath(id int64) string {
	if sc.Coupon {
		return fmt.Sprintf("/api/v1/coupons/%d/grab", id)
	}
	return fmt.Sprintf("/api/v1/products/%d/buy", id)
}

// Body is a buyer's request body. It is built by hand, not marshalled
// from a map: the lab's own CPU per request is part of the CPU per answer
// it reports (package cpu), and one body is built for every request.
func (sc Scenario) Body(user string) []byte {
	id, err := json.Marshal(user) // the user id, quoted and escaped as JSON
	if err != nil {
		panic(err) // a string always marshals
	}
	b := make([]byte, 0, len(id)+32)
	b = append(append(append(b, `{"user_id":`...), id...), ',')
	if !sc.Coupon { // a grab has no quantity
		b = append(b, `"quantity":1,`...)
	}
	b[len(b)-1] = '}'
	return b
}

// Plan is everything one attack needs to know.
type Plan struct {
	Scenario Scenario
	Stage    string
	Targets  []string
	Token    string
	ItemID   int64
	// Tag makes user ids and Idempotency-Keys unique to this run and row:
	// idempotency records outlive a stock reset, so a key reused by a later
	// row would be answered with an earlier row's stored order.
	Tag string
	// Series names the attack in the stage's latency plot.
	Series string
	// pick, when set, is the product of each buyer (the many crowd);
	// otherwise every buyer buys ItemID.
	pick func(buyer uint64) int64
}

// itemOf is the item buyer buys.
func (p Plan) itemOf(buyer uint64) int64 {
	if p.pick != nil {
		return p.pick(buyer)
	}
	return p.ItemID
}

// target fills t with send number send of buyer: its route on its
// instance, its body and headers. Every way of sending a buy (vegeta's
// targeter, the T-0 crowd, paced arrivals) builds its request here.
func (p Plan) target(t *vegeta.Target, buyer, send uint64) {
	user := p.userID(buyer)
	t.Method = http.MethodPost
	t.URL = p.Targets[(buyer+send)%uint64(len(p.Targets))] + p.Scenario.ActionPath(p.itemOf(buyer))
	t.Body = p.Scenario.Body(user)
	t.Header = http.Header{
		"Content-Type":    {"application/json"},
		"Authorization":   {"Bearer " + p.Token},
		"X-Seckill-Stage": {p.Stage},
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
func (p Plan) targeter() vegeta.Targeter {
	var next atomic.Uint64
	copies := uint64(max(1, p.Scenario.Copies))
	return func(t *vegeta.Target) error {
		i := next.Add(1) - 1
		p.target(t, i/copies, i%copies)
		return nil
	}
}

// userID is buyer n's id, which doubles as its Idempotency-Key.
func (p Plan) userID(n uint64) string { return fmt.Sprintf("%s-%d", p.Tag, n) }

// burstPacer lets an attack send hits as fast as its workers take them,
// and stops after the last one: the whole crowd arrives at once, and the
// worker count bounds how many requests are in flight.
type BurstPacer struct{ Hits uint64 }

// Pace lets every hit go at once, and stops after the last.
func (p BurstPacer) Pace(_ time.Duration, sent uint64) (time.Duration, bool) {
	return 0, sent >= p.Hits
}

// Rate is 0: a burst has no rate, only a worker bound.
func (p BurstPacer) Rate(time.Duration) float64 { return 0 }

var _ vegeta.Pacer = BurstPacer{}

// Buyers is the number of distinct buyers an attack of sc means to bring.
func (sc Scenario) Buyers(o Config) int {
	switch sc.Kind {
	case results.CrowdT0:
		return o.T0Buyers
	case results.CrowdPaced:
		return o.PacedBuyers
	case results.CrowdClosed:
		if o.ClosedIterations > 0 {
			return o.ClosedUsers * o.ClosedIterations
		}
		// At most one buyer per user and think time (and more when the
		// answers are quicker than thinking is long).
		return o.ClosedUsers * max(1, int(o.ClosedDuration/max(o.ClosedThink, time.Millisecond)))
	case results.CrowdMany:
		return o.ManyBuyers
	case results.CrowdRoom:
		return newRoomPlan(o).accounts()
	case results.CrowdScalper:
		return newScalperCrowd(o.ScalperPeople).normals + newScalperCrowd(o.ScalperPeople).scalpers*scalperAccounts
	}
	if o.Shape == "burst" {
		return o.Buyers
	}
	return int(float64(o.Rate)*o.Duration.Seconds()) / max(1, sc.Copies)
}
