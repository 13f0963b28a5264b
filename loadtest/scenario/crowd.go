package scenario

import (
	"context"
	"io"

	vegeta "github.com/tsenart/vegeta/v12/lib"
	"github.com/tsenart/vegeta/v12/lib/plot"

	"github.com/seckill-lab/seckill/loadtest/fleet"
	"github.com/seckill-lab/seckill/loadtest/results"
)

// Crowd sends one scenario's buyers at the item of a plan: vegeta's
// attacker in the run's shape, the T-0 crowd, paced arrivals, or the
// scalpers and ordinary buyers. Every crowd returns the same shape, a
// Result, with its own figures in it; the lab runs them alike.
type Crowd interface {
	Attack(ctx context.Context, c Config, f *fleet.Fleet, p Plan, pl *plot.Plot, progress io.Writer) (Result, error)
}

// crowds are the attacks, by how their buyers arrive.
var crowds = map[results.Crowd]Crowd{
	results.CrowdAttack:  vegetaCrowd{},
	results.CrowdT0:      t0Crowd{},
	results.CrowdPaced:   pacedCrowd{},
	results.CrowdScalper: scalperCrowdAttack{},
	results.CrowdClosed:  closedCrowd{},
	results.CrowdMany:    manyCrowd{},
	results.CrowdRoom:    roomCrowd{},
}

// Crowd is the attack that sends sc's buyers.
func (sc Scenario) Crowd() Crowd { return crowds[sc.Kind] }

// vegetaCrowd is vegeta's attacker, in the run's --shape (attack.go).
type vegetaCrowd struct{}

func (vegetaCrowd) Attack(ctx context.Context, c Config, _ *fleet.Fleet, p Plan, pl *plot.Plot, progress io.Writer) (Result, error) {
	return attack(ctx, c, p, pl, progress)
}

// t0Crowd connects every buyer early and releases them together at the
// opening (t0.go).
type t0Crowd struct{}

func (t0Crowd) Attack(ctx context.Context, c Config, f *fleet.Fleet, p Plan, pl *plot.Plot, progress io.Writer) (Result, error) {
	res, fig, err := t0Leads(ctx, c, f, p, c.Stock, pl, progress)
	res.T0 = &fig
	return res, err
}

// pacedCrowd sends one arrival every --pace, in a recorded order
// (paced.go).
type pacedCrowd struct{}

func (pacedCrowd) Attack(ctx context.Context, c Config, _ *fleet.Fleet, p Plan, pl *plot.Plot, progress io.Writer) (Result, error) {
	res, fig, err := pacedAttack(ctx, c, p, c.Stock, pl, progress)
	res.Paced = &fig
	return res, err
}

// scalperCrowdAttack sends the ordinary buyers in the first second and
// the scalpers from T-0, the per-address limit on when the scenario is
// limited (scalper.go).
type scalperCrowdAttack struct{}

func (scalperCrowdAttack) Attack(ctx context.Context, c Config, f *fleet.Fleet, p Plan, pl *plot.Plot, progress io.Writer) (Result, error) {
	res, fig, err := scalperAttack(ctx, c, f, p, p.Scenario.Limited, pl, progress)
	res.Scalper = &fig
	return res, err
}

// Metrics are the attack's latency metrics, as vegeta summed them.
func (r *Result) Metrics() *vegeta.Metrics { return &r.metrics }

// Instances are the instances that answered, which a load balancer in
// front can hide from /info.
func (r Result) Instances() map[string]bool { return r.tally.instances }

// Unanswered counts the requests that timed out or got no answer.
func (r Result) Unanswered() int {
	return r.tally.outcomes[outTimeout] + r.tally.outcomes[outNetError]
}

// Served counts the requests the server decided: an order, or a 409.
func (r Result) Served() int { return r.tally.served() }

// WrittenOrders are the order numbers of the 201s, written before the
// answer (a 202's is written behind a queue).
func (r Result) WrittenOrders() []string { return r.tally.writtenOrders() }

// AcceptedOrders are the order numbers of the 202s.
func (r Result) AcceptedOrders() []string { return r.tally.acceptedOrders() }
