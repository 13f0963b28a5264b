package main

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	// The MySQL driver for the direct check; gorm stays in internal/store.
	_ "github.com/go-sql-driver/mysql"
	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/inventory"
)

// row is one line of the report: one scenario under one stage. The JSON
// names are read by the dashboard; keep them.
type row struct {
	Scenario       string  `json:"scenario"`
	Shape          string  `json:"shape"`
	Stage          string  `json:"stage"`
	Instances      int     `json:"instances"`
	Workers        int     `json:"workers"` // buyers in flight
	Requests       int     `json:"requests"`
	Created        int     `json:"created"`
	SoldOut        int     `json:"sold_out"`
	Other4xx       int     `json:"other_4xx"`     // 4xx other than 409 and 429
	ServerErrors   int     `json:"server_errors"` // 5xx other than a 503 with Retry-After
	Timeouts       int     `json:"timeouts"`
	Sold           int     `json:"sold"`
	FinalStock     int     `json:"final_stock"`
	Oversold       int     `json:"oversold"`
	Conserved      bool    `json:"conserved"`
	Throughput     float64 `json:"throughput"` // answered requests (201, 202 or 409) per second
	P50ms          float64 `json:"p50_ms"`
	P95ms          float64 `json:"p95_ms"`
	P99ms          float64 `json:"p99_ms"`
	ExpectOversell bool    `json:"expect_oversell"`
	Verdict        string  `json:"verdict"` // pass, fail or skipped
	// Broken names the rules a failed verdict broke, in the order the
	// note explains them.
	Broken []string `json:"broken,omitempty"`
	Note   string   `json:"note"`
	Plot   string   `json:"plot"`
	HDR    string   `json:"hdr,omitempty"` // HDR histogram file, in vegeta's hdrplot format
	P90ms  float64  `json:"p90_ms"`
	P999ms float64  `json:"p999_ms"`
	MaxMs  float64  `json:"max_ms"`

	// Beyond the dashboard's fields.
	Planned      int `json:"planned,omitempty"` // requests a burst meant to send; more than requests when capped
	Buyers       int `json:"buyers"`            // distinct buyers sent (requests / copies)
	InitialStock int `json:"initial_stock"`
	Conflicts    int `json:"conflicts"`  // 409s other than sold-out
	TooMany      int `json:"too_many"`   // 429s
	Overloaded   int `json:"overloaded"` // 503s with Retry-After
	// PostSale503 counts the 503s to requests sent after the last 201 or
	// 202 was answered: overload told to buyers of a sold-out item.
	PostSale503 int `json:"post_sale_503"`
	// RefusedWithStock counts the sold-out answers received before the
	// last order was created (by the orders' created_at): buyers refused
	// while a unit remained for a buyer who came later.
	RefusedWithStock int `json:"refused_with_stock"`
	// RefusedWithStockNet is RefusedWithStock less the refusals received
	// while units of a reservation the server later gave back were away
	// (the audit's given_back): those buyers may have been told the truth
	// of that instant. The verdict judges the raw count, the stricter.
	RefusedWithStockNet int `json:"refused_with_stock_net"`
	// GivenBack counts the units that left the Redis stock for a
	// reservation and went back (the audit's given_back).
	GivenBack       int            `json:"given_back,omitempty"`
	NetErrors       int            `json:"net_errors"`        // no answer at all (refused, reset)
	Replayed        int            `json:"replayed"`          // 201s marked Idempotent-Replayed
	BuyersWithOrder int            `json:"buyers_with_order"` // distinct buyers (Idempotency-Keys) answered 201
	DurationMS      float64        `json:"duration_ms"`
	Problems        map[string]int `json:"problems,omitempty"` // problem types answered, by count
	Statuses        map[int]int    `json:"statuses,omitempty"` // HTTP status -> count; 0 counts requests without an answer
	TransportErrors map[string]int `json:"transport_errors,omitempty"`
	MySQL           *dbCount       `json:"mysql,omitempty"`
	// RSSMB is each target's resident memory after the attack, in MiB
	// (process_resident_memory_bytes from its /metrics; instances of one
	// demo share a process).
	RSSMB []float64 `json:"rss_mb,omitempty"`

	// With --repeat, a row is the median run of its attack (repeat.go):
	// Round is the round it ran in, Runs the answered/s of every run in
	// round order, and RunsPerCeiling each run's answered/s over the HTTP
	// ceiling measured in its own round (with --baselines).
	Round          int       `json:"round,omitempty"`
	Runs           []float64 `json:"runs,omitempty"`
	RunsPerCeiling []float64 `json:"runs_per_http_ceiling,omitempty"`

	// A stage that queues its orders (redis-stream) answers 202: the sale
	// accepted, the order written later. Accepted counts those orders;
	// the rest says what became of them once the lab stopped waiting.
	Accepted     int     `json:"accepted,omitempty"`
	Confirmed    int     `json:"confirmed,omitempty"`
	FailedOrders int     `json:"failed_orders,omitempty"`
	Unconfirmed  int     `json:"unconfirmed,omitempty"` // still pending, or no such order
	ConfirmP50ms float64 `json:"confirm_p50_ms,omitempty"`
	ConfirmP99ms float64 `json:"confirm_p99_ms,omitempty"`
	PeakLag      int     `json:"peak_lag,omitempty"` // most orders accepted and not yet written at once

	// The T-0 scenario's figures (t0.go), and the paced scenario's
	// (paced.go); nil in the other scenarios' rows.
	T0    *t0Figures    `json:"t0,omitempty"`
	Paced *pacedFigures `json:"paced,omitempty"`
	// Scalper are the scalper scenarios' figures (scalper.go).
	Scalper *scalperFigures `json:"scalper,omitempty"`

	// The CPU the processes spent on the attack (cpu.go), per answer
	// (201, 202 or 409, as answered/s counts them) and per unit sold.
	cpuFigures
	CPUPerSaleMS *float64 `json:"cpu_per_sale_ms,omitempty"`
}

// setCPU keeps the CPU an attack cost, and what it comes to per answer
// and per unit sold.
func (r *row) setCPU(u *cpuUsage, answers int) {
	r.CPU = u
	r.CPUPerAnswerMS, r.ServersPerAnswerMS = perUnit(u.Seconds, answers), perUnit(u.servers(), answers)
	r.CPUPerSaleMS = perUnit(u.Seconds, r.Sold)
}

// fillConfirmation copies what became of a queued stage's accepted orders
// into r.
func (r *row) fillConfirmation(c confirmation) {
	r.Accepted, r.Confirmed, r.FailedOrders = c.accepted, c.confirmed, c.failed
	r.Unconfirmed = c.pending + c.missing
	r.ConfirmP50ms, r.ConfirmP99ms = percentileMS(c.toConfirm, 0.50), percentileMS(c.toConfirm, 0.99)
	r.PeakLag = c.peakLag
}

const (
	verdictPass    = "pass"
	verdictFail    = "fail"
	verdictSkipped = "skipped"
)

// fill copies the attack's counts and the audit into r.
func (r *row) fill(res attackResult, a api.Audit) {
	t := res.tally
	r.Requests = t.requests
	r.Planned = int(t.planned)
	r.Created = t.outcomes[outCreated]
	r.SoldOut = t.outcomes[outSoldOut]
	r.Conflicts = t.outcomes[outConflict]
	r.TooMany = t.outcomes[outTooMany]
	r.Overloaded = t.outcomes[outOverloaded]
	r.PostSale503 = t.postSaleOverloaded()
	r.RefusedWithStock = t.refusedWithStock()
	r.RefusedWithStockNet = t.refusedWithStockNet(a.GivenBack)
	for _, g := range a.GivenBack {
		r.GivenBack += g.Units
	}
	r.Other4xx = t.outcomes[outOther4xx]
	r.ServerErrors = t.outcomes[outServerError]
	r.Statuses = t.statuses
	r.TransportErrors = t.errors
	r.Timeouts = t.outcomes[outTimeout]
	r.NetErrors = t.outcomes[outNetError]
	r.Replayed = t.replayed
	r.BuyersWithOrder = len(t.buyers)
	r.Problems = t.problems
	r.DurationMS = ms(t.elapsed())
	if s := t.elapsed().Seconds(); s > 0 {
		r.Throughput = float64(t.served()) / s
	}
	r.P50ms = ms(res.metrics.Latencies.P50)
	r.P95ms = ms(res.metrics.Latencies.P95)
	r.P99ms = ms(res.metrics.Latencies.P99)
	r.P90ms = ms(res.metrics.Latencies.P90)
	r.P999ms = ms(res.metrics.Latencies.Quantile(0.999))
	r.MaxMs = ms(res.metrics.Latencies.Max)

	r.InitialStock = a.InitialStock
	r.Sold = a.Sold
	r.FinalStock = a.Stock
	r.Oversold = a.Oversold
	r.Conserved = a.Conserved
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// expectsOversell says whether stage should oversell in this run. An
// explicit --expect-oversell list decides alone. Otherwise: unlocked races
// whenever two buyers overlap; local-mutex only when they reach different
// instances, each with its own mutex; every other stage must be safe. No
// stage can oversell a crowd smaller than the stock.
func expectsOversell(explicit map[string]bool, stage string, instances, workers, crowd, stock int) bool {
	if explicit != nil {
		return explicit[stage]
	}
	if workers < 2 || crowd <= stock {
		return false
	}
	return inventory.Oversells(stage, instances)
}

// The rules a verdict checks. A failed verdict names each rule it broke,
// with the counts that broke it.
const (
	ruleNothingSent      = "nothing-sent"       // the attack sent no request
	ruleOversold         = "oversold"           // a safe stage sold beyond its stock
	ruleConservation     = "conservation"       // units left the stock without an order, or the reverse
	ruleOrdersMatch      = "orders-match"       // buyers told 201 differ from the orders the audit counts
	ruleServerErrors     = "server-errors"      // a 5xx other than a 503 with Retry-After
	ruleTransportErrors  = "transport-errors"   // a request timed out or got no answer
	ruleLiveness         = "liveness"           // stock left unsold while buyers were turned away
	ruleSoldNothing      = "sold-nothing"       // stock to sell, nothing sold
	ruleMySQLAgrees      = "mysql-agrees"       // MySQL and the audit disagree
	ruleForeignWriter    = "foreign-writer"     // MySQL holds orders of the item by instances outside the targets
	ruleExpectedOversell = "expected-oversell"  // a stage meant to show the race did not
	ruleLabError         = "lab-error"          // the lab could not reset, attack or audit the stage
	ruleUnconfirmed      = "unconfirmed"        // an accepted (202) order was never confirmed: failed, lost, or still pending
	ruleCapped           = "capped"             // the --max-duration cap stopped the burst with stock unsold
	rulePostSale503      = "post-sale-503"      // a buyer who came after the sell-out was told 503, not sold out
	ruleRefusedWithStock = "refused-with-stock" // a buyer was told sold out before the last unit was sold
	ruleSoldEarly        = "sold-early"         // t0: an order created before the sale's opening
	ruleEarlyNotRefused  = "early-not-refused"  // t0: an early buyer was answered other than 409 sale-not-open
	ruleExactSale        = "exact-sale"         // t0: a safe stage sold other than its whole stock
	ruleFirstCome        = "first-come"         // paced: the first arrivals won a smaller share of the units than the stage's target
	ruleScalpers         = "scalpers"           // scalper-limited, with --scalper-target-verdict: the scalpers surely won more than their target share
	ruleScalperLimit     = "scalper-limit"      // scalper-limited: the scalpers' addresses won more units than the per-address limit lets through
)

// judge sets r's verdict, the rules it broke, and its note from its counts.
//
// A stage expected to oversell passes when it did; its errors are noted,
// not judged, since a racing stage is there to show the race. A stage
// expected to be safe must be safe and live: nothing oversold, stock
// conserved, every buyer told 201 backed by an order, no 5xx other than a
// 503 that says when to retry, every request answered within the client
// timeout, and no stock left on the shelf while buyers were turned away.
// Disagreement between the audit and MySQL fails any stage: the lab cannot
// vouch for an oracle that lies.
func judge(r *row) {
	type broken struct{ rule, why string }
	var fails []broken
	var notes []string
	fail := func(rule, format string, args ...any) {
		fails = append(fails, broken{rule, fmt.Sprintf(format, args...)})
	}
	if r.MySQL != nil {
		if d := r.MySQL.disagreement(r); d != "" {
			fail(ruleMySQLAgrees, "%s", d)
		}
		if len(r.MySQL.Foreign) > 0 {
			fail(ruleForeignWriter, "MySQL holds orders of this item written by instances that are not among the targets (%s): another fleet shares this database, and its resets and sales void every count here",
				countsText(r.MySQL.Foreign))
		}
		if r.MySQL.Gone > 0 {
			fail(ruleForeignWriter, "%d orders the buyers were answered 201 for are gone from MySQL: a reset the lab did not send deleted them, with whatever orders its own fleet had written; another fleet shares this database, and its resets and sales void every count here",
				r.MySQL.Gone)
		}
	}
	// The window holds for every stage, the racing ones too: they read
	// it before they race.
	if t := r.T0; t != nil {
		if n := max(t.SoldEarly, deref(t.SoldEarlyMySQL)); n > 0 {
			fail(ruleSoldEarly, "%d orders were created before opens_at %s (%d by the answers' created_at%s)",
				n, t.OpensAt.Format("15:04:05.000"), t.SoldEarly, mysqlEarly(t))
		}
		if t.RefusedEarly != t.Buyers {
			fail(ruleEarlyNotRefused, "%d of %d buyers who asked before the opening were answered otherwise than 409 sale-not-open (%s)",
				t.Buyers-t.RefusedEarly, t.Buyers, countsText(t.EarlyOther))
		}
	}
	noAnswer := r.Timeouts + r.NetErrors
	turnedAway := r.SoldOut + r.TooMany + r.Overloaded
	errorNotes := func() {
		if r.ServerErrors > 0 {
			notes = append(notes, fmt.Sprintf("%d answers were 5xx (%s)", r.ServerErrors, statusCounts(r, true)))
		}
		if noAnswer > 0 {
			notes = append(notes, fmt.Sprintf("%d requests got no answer (%d timeouts, %d network errors)", noAnswer, r.Timeouts, r.NetErrors))
		}
	}
	switch {
	case r.Requests == 0:
		fail(ruleNothingSent, "no request was sent")
	case r.ExpectOversell:
		if r.Oversold > 0 {
			notes = append(notes, fmt.Sprintf("oversold by %d as expected (%d sold of %d)", r.Oversold, r.Sold, r.InitialStock))
		} else {
			why := "a larger crowd or more --workers widens the race"
			if r.Buyers <= r.InitialStock {
				why = fmt.Sprintf("only %d buyers were sent, no more than the stock, so nothing could oversell: send more --buyers, or a longer --duration", r.Buyers)
			}
			fail(ruleExpectedOversell, "expected overselling but saw none (%d sold of %d); %s", r.Sold, r.InitialStock, why)
		}
		if !r.Conserved {
			notes = append(notes, fmt.Sprintf("stock not conserved: %d left the stock, %d were sold", r.InitialStock-r.FinalStock, r.Sold))
		}
		errorNotes()
	default:
		if r.Oversold > 0 {
			fail(ruleOversold, "oversold by %d (%d sold of %d)", r.Oversold, r.Sold, r.InitialStock)
		}
		if !r.Conserved {
			fail(ruleConservation, "%d units left the stock but %d were sold", r.InitialStock-r.FinalStock, r.Sold)
		}
		// A buyer whose request timed out may or may not have an order,
		// so the count of 201s only has to match the audit when every
		// request got an answer. So may a buyer told 503 outcome-unknown
		// (a write its deadline cut off on its way, which MySQL then
		// committed): the audit may count up to that many more.
		unknown := r.Problems[api.ProblemTypePrefix+"outcome-unknown"]
		switch {
		case noAnswer > 0:
		case r.Sold < r.BuyersWithOrder || r.Sold > r.BuyersWithOrder+unknown:
			also := ""
			if unknown > 0 {
				also = fmt.Sprintf(" (and %d 503 outcome-unknown)", unknown)
			}
			fail(ruleOrdersMatch, "%d buyers were answered 201%s but the audit counts %d sold", r.BuyersWithOrder, also, r.Sold)
		case r.Sold > r.BuyersWithOrder:
			notes = append(notes, fmt.Sprintf("%d of the %d buyers answered 503 outcome-unknown hold an order (a retry with the same Idempotency-Key is answered with it)", r.Sold-r.BuyersWithOrder, unknown))
		}
		// Overload is a 503 with Retry-After; any other 5xx is a bug.
		if r.ServerErrors > 0 {
			fail(ruleServerErrors, "%d of %d requests were answered 5xx without Retry-After (%s)",
				r.ServerErrors, r.Requests, statusCounts(r, true))
		}
		if noAnswer > 0 {
			fail(ruleTransportErrors, "%d of %d requests got no answer (%d timeouts, %d network errors%s); their buyers' outcome is known only to the audit",
				noAnswer, r.Requests, r.Timeouts, r.NetErrors, commonError(r.TransportErrors))
		}
		// Refusing everyone is safe but not a sale: a stage that sold
		// nothing from a full stock is broken, and calling it safe would
		// hide that.
		if r.Sold == 0 && r.InitialStock > 0 {
			fail(ruleSoldNothing, "sold nothing although %d units were in stock; the %d requests were answered %s",
				r.InitialStock, r.Requests, statusCounts(r, false))
		}
		// A 202 promised an order: each must end written. A failed one
		// gave its unit back (no oversell), but the buyer was told yes.
		if n := r.FailedOrders + r.Unconfirmed; n > 0 {
			fail(ruleUnconfirmed, "%d of %d accepted orders were not confirmed (%d failed, %d pending or lost)",
				n, r.Accepted, r.FailedOrders, r.Unconfirmed)
		}
		// Stock on the shelf while buyers leave empty-handed means the
		// stage refused buyers it could have served. A crowd no larger
		// than the stock leaves stock behind honestly: every buyer got one.
		if r.FinalStock > 0 && r.Conserved && turnedAway > 0 && r.Buyers > r.BuyersWithOrder {
			fail(ruleLiveness, "%d units unsold while %d buyers went without one (%s)",
				r.FinalStock, r.Buyers-r.BuyersWithOrder, turnedAwayCounts(r))
		}
		// A burst the cap cut short with stock on the shelf: the buyers
		// never sent would have bought, so the stage was too slow for
		// this crowd, even if nobody it did serve was turned away.
		if r.Planned > r.Requests && r.FinalStock > 0 && r.Conserved {
			fail(ruleCapped, "the --max-duration cap stopped the burst after %d of %d requests with %d units unsold: too slow for this crowd",
				r.Requests, r.Planned, r.FinalStock)
		}
		// After the sell-out, "sold out" is the answer, and the cheapest
		// one: a 503 with Retry-After invites a buyer to come back for
		// nothing, and a crowd of them to storm the service.
		if r.PostSale503 > 0 {
			fail(rulePostSale503, "%d requests sent after the last sale was answered got 503 instead of 409 sold-out", r.PostSale503)
		}
		// Sold out is a promise that no unit is left. A buyer who heard
		// it before another buyer's order was created was refused while
		// stock remained: the liveness rule misses it once the stock is
		// gone (a bucketed stage that refused a buyer from an empty
		// bucket while others held units), this rule does not.
		if r.RefusedWithStock > 0 {
			fail(ruleRefusedWithStock, "%d sold-out answers were received before the last order was created: buyers refused while stock remained (%d of them while no reservation the server gave back later held units)",
				r.RefusedWithStock, r.RefusedWithStockNet)
		}
		// At T-0 the whole crowd meets the whole stock at once: a safe
		// stage sells exactly the stock, or one unit to each buyer of a
		// crowd smaller than the stock.
		if want := min(r.InitialStock, r.T0Buyers()); r.T0 != nil && r.Sold != want {
			fail(ruleExactSale, "sold %d at T-0, want exactly %d (stock %d, %d buyers)", r.Sold, want, r.InitialStock, r.T0.Buyers)
		}
		if p := r.Paced; p != nil && p.Target != nil && p.Score != nil && *p.Score < *p.Target {
			why := fmt.Sprintf("of the %d units later arrivals won, %d went to arrivals more than %d places late, past the lab's p99 jitter",
				p.Won-p.FirstWon, p.LateWins, p.JitterWindow)
			if p.LateWins == 0 {
				why = fmt.Sprintf("the %d units later arrivals won all went within %d places, the lab's p99 jitter: the machine's scheduling decided them, not the stage (a quieter machine or a slower --pace)",
					p.Won-p.FirstWon, p.JitterWindow)
			}
			fail(ruleFirstCome, "first-come score %.2f, below %.2f: the first %d arrivals won %d of the %d units sold; %s",
				*p.Score, *p.Target, p.Stock, p.FirstWon, p.Won, why)
		}
		if sp := r.Scalper; sp != nil && sp.Limited && sp.ScalperWon > sp.LimitAllows {
			fail(ruleScalperLimit, "with the per-address limit on, the %d scalpers' addresses won %d units, more than the %d the limit lets through",
				sp.Scalpers, sp.ScalperWon, sp.LimitAllows)
		}
		if sp := r.Scalper; sp != nil && sp.TargetVerdict && sp.missed() {
			fail(ruleScalpers, "with the per-address limit on, scalpers won %.0f%% of the units as %.0f%% of the people: %.2f× their share, above %.2f× (a true %.2f× would win this many %.2g of the time)",
				100**sp.ShareOfUnits, 100*sp.ShareOfPeople, *sp.Gain, *sp.Target, *sp.Target, *sp.MissedP)
		}
		if len(fails) == 0 {
			notes = append(notes, fmt.Sprintf("safe: %d sold of %d, %d left, conserved", r.Sold, r.InitialStock, r.FinalStock))
		}
	}
	if r.Overloaded > 0 && r.Requests > 0 {
		notes = append(notes, fmt.Sprintf("503 share %.1f%% (%d of %d; %d after the last sale)", 100*float64(r.Overloaded)/float64(r.Requests), r.Overloaded, r.Requests, r.PostSale503))
	}
	if r.GivenBack > 0 {
		notes = append(notes, fmt.Sprintf("%d units went back from reservations; sold-out answers before the last order: %d, %d of them with no unit in flight",
			r.GivenBack, r.RefusedWithStock, r.RefusedWithStockNet))
	}
	if r.Planned > r.Requests {
		notes = append(notes, fmt.Sprintf("stopped at the --max-duration cap after %d of %d requests", r.Requests, r.Planned))
	}
	if r.Replayed > 0 {
		notes = append(notes, fmt.Sprintf("%d idempotent replays", r.Replayed))
	}
	if t := r.T0; t != nil {
		notes = append(notes, t.note())
	}
	if p := r.Paced; p != nil {
		notes = append(notes, p.note())
	}
	if sp := r.Scalper; sp != nil {
		notes = append(notes, sp.note())
	}
	if r.Accepted > 0 {
		notes = append(notes, fmt.Sprintf("%d accepted (202), %d confirmed; time to confirm p50 %.1f ms, p99 %.1f ms; peak lag %d orders",
			r.Accepted, r.Confirmed, r.ConfirmP50ms, r.ConfirmP99ms, r.PeakLag))
	}
	if r.MySQL != nil && len(fails) == 0 {
		notes = append(notes, "MySQL agrees with the audit")
	}
	if p := otherProblems(r.Problems); p != "" {
		notes = append(notes, p)
	}
	if u := r.CPU.unavailable(); u != "" {
		notes = append(notes, u)
	}
	r.Verdict, r.Broken = verdictPass, nil
	var parts []string
	for _, f := range fails {
		r.Broken = append(r.Broken, f.rule)
		parts = append(parts, f.rule+": "+f.why)
	}
	if len(fails) > 0 {
		r.Verdict = verdictFail
	}
	r.Note = strings.Join(append(parts, notes...), "; ")
}

// T0Buyers is the T-0 crowd, 0 outside the T-0 scenario.
func (r *row) T0Buyers() int {
	if r.T0 == nil {
		return 0
	}
	return r.T0.Buyers
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func mysqlEarly(t *t0Figures) string {
	if t.SoldEarlyMySQL == nil {
		return ""
	}
	return fmt.Sprintf(", %d in MySQL", *t.SoldEarlyMySQL)
}

// countsText lists counts by name, e.g. "201 ×3, no answer ×1", in name
// order; "none" when empty.
func countsText(m map[string]int) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	var parts []string
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// statusCounts lists r's answers by status, e.g. "500 ×12, 503 ×3",
// lowest status first, with "no answer" for requests that got none. With
// serverErrors it lists only the 5xx that count as server errors: a 503
// with Retry-After is overload, not an error.
func statusCounts(r *row, serverErrors bool) string {
	codes := make([]int, 0, len(r.Statuses))
	for c := range r.Statuses {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var parts []string
	for _, c := range codes {
		n := r.Statuses[c]
		switch {
		case serverErrors && c < 500:
			continue
		case serverErrors && c == 503:
			n -= r.Overloaded
		case c == 0:
			parts = append(parts, fmt.Sprintf("no answer ×%d", n))
			continue
		}
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d ×%d", c, n))
		}
	}
	return strings.Join(parts, ", ")
}

// turnedAwayCounts lists the refusals that sent buyers away, e.g.
// "429 ×100, 503 ×70".
func turnedAwayCounts(r *row) string {
	var parts []string
	for _, c := range []struct {
		name string
		n    int
	}{{"429", r.TooMany}, {"503", r.Overloaded}, {"409 sold-out", r.SoldOut}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%s ×%d", c.name, c.n))
		}
	}
	return strings.Join(parts, ", ")
}

// commonError quotes the most frequent transport error, for a reader to
// tell a refused connection from a timeout at a glance.
func commonError(errs map[string]int) string {
	best, n := "", 0
	for e, c := range errs {
		if c > n || (c == n && e < best) {
			best, n = e, c
		}
	}
	if best == "" {
		return ""
	}
	if len(best) > 160 {
		best = best[:160] + "…"
	}
	return fmt.Sprintf("; most often %q", best)
}

// otherProblems summarises the problem types other than sold-out.
func otherProblems(m map[string]int) string {
	var parts []string
	for k, n := range m {
		if k != "/problems/sold-out" {
			parts = append(parts, fmt.Sprintf("%s ×%d", strings.TrimPrefix(k, "/problems/"), n))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	sort.Strings(parts)
	return "answers: " + strings.Join(parts, ", ")
}

// dbCount is what MySQL itself says about the item, counted without the
// service in between.
type dbCount struct {
	Orders       int `json:"orders"`
	Sold         int `json:"sold"`
	InitialStock int `json:"initial_stock"`
	Stock        int `json:"stock"`
	// Foreign counts the item's orders, whatever their status, by the
	// instance that wrote them, for the instances that are not among the
	// targets: another fleet on the same database (its own Redis, its own
	// resets) makes the lab's counts meaningless.
	Foreign map[string]int `json:"foreign,omitempty"`
	// Gone counts the orders the buyers were answered 201 for (written
	// before the answer) that MySQL no longer holds, in any status. The
	// service never deletes an order it answered 201 for; a reset does,
	// and the lab sent none since the burst: another fleet's did, and
	// took its own orders of the item with it, so that Foreign alone
	// would not see it.
	Gone int `json:"gone,omitempty"`
}

// disagreement describes how the MySQL count differs from r's audit, or
// returns "".
func (c *dbCount) disagreement(r *row) string {
	if c.Sold == r.Sold && c.InitialStock == r.InitialStock && c.Stock == r.FinalStock {
		return ""
	}
	return fmt.Sprintf("MySQL disagrees with the audit: MySQL has %d orders for %d units, initial stock %d, stock %d; the audit says %d sold, initial %d, stock %d",
		c.Orders, c.Sold, c.InitialStock, c.Stock, r.Sold, r.InitialStock, r.FinalStock)
}

// openMySQL opens the database named by SECKILL_MYSQL_DSN for the direct
// check.
func openMySQL(ctx context.Context, dsn string) (*sql.DB, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, fmt.Errorf("SECKILL_MYSQL_DSN: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		if cerr := db.Close(); cerr != nil {
			err = fmt.Errorf("%w (closing: %v)", err, cerr)
		}
		return nil, fmt.Errorf("SECKILL_MYSQL_DSN: %w", err)
	}
	return db, nil
}

// readMySQL reads, for the T-0 row of product id, the orders MySQL holds
// with created_at before the opening and the last order's created_at:
// the database's own record, which then replaces the answers' for the
// time to the last unit sold. created_at and opens_at are both stored in
// UTC (the service writes UTC instants).
func (t *t0Figures) readMySQL(ctx context.Context, db *sql.DB, sc scenario, id int64) error {
	table, key := "orders", "product_id"
	if sc.coupon {
		table, key = "coupon_grabs", "batch_id"
	}
	opens := t.OpensAt.UTC().Format("2006-01-02 15:04:05.000000")
	var early int
	var last sql.NullInt64 // µs from opens_at to the last order
	q := fmt.Sprintf("SELECT COUNT(CASE WHEN created_at < ? THEN 1 END), TIMESTAMPDIFF(MICROSECOND, ?, MAX(created_at)) FROM %s WHERE %s = ?", table, key)
	if err := db.QueryRowContext(ctx, q, opens, opens, id).Scan(&early, &last); err != nil {
		return fmt.Errorf("reading %s %d's order times in MySQL: %w", sc.kind(), id, err)
	}
	t.SoldEarlyMySQL = &early
	if last.Valid {
		d := float64(last.Int64) / 1000
		t.ToLastOrderMS, t.LastOrderBy = &d, "mysql"
	}
	return nil
}

// countInMySQL counts the item's orders and reads its stock straight from
// the tables, counts the orders written by instances outside own, and
// those of written (order numbers answered 201) that are gone.
func countInMySQL(ctx context.Context, db *sql.DB, sc scenario, id int64, own map[string]bool, written []string) (*dbCount, error) {
	// Live orders only: a cancelled order gave its units back, a failed
	// one never took any (sql/mysql/003_order_lifecycle.sql).
	ordersQ := "SELECT COUNT(*), COALESCE(SUM(quantity),0) FROM orders WHERE product_id=? AND status IN ('confirmed','paid')"
	stockQ := "SELECT initial_stock, stock FROM products WHERE id=?"
	if sc.coupon {
		ordersQ = "SELECT COUNT(*), COALESCE(SUM(quantity),0) FROM coupon_grabs WHERE batch_id=? AND status = 'confirmed'"
		stockQ = "SELECT total, remaining FROM coupon_batches WHERE id=?"
	}
	var c dbCount
	if err := db.QueryRowContext(ctx, ordersQ, id).Scan(&c.Orders, &c.Sold); err != nil {
		return nil, fmt.Errorf("counting %s %d in MySQL: %w", sc.kind(), id, err)
	}
	if err := db.QueryRowContext(ctx, stockQ, id).Scan(&c.InitialStock, &c.Stock); err != nil {
		return nil, fmt.Errorf("reading %s %d in MySQL: %w", sc.kind(), id, err)
	}
	foreign, err := foreignOrders(ctx, db, sc, id, own)
	if err != nil {
		return nil, err
	}
	c.Foreign = foreign
	if c.Gone, err = goneOrders(ctx, db, sc, id, written); err != nil {
		return nil, err
	}
	return &c, nil
}

// goneOrders counts the order numbers of written that MySQL does not hold
// for the item, in any status.
func goneOrders(ctx context.Context, db *sql.DB, sc scenario, id int64, written []string) (int, error) {
	table, no, key := "orders", "order_no", "product_id"
	if sc.coupon {
		table, no, key = "coupon_grabs", "grab_no", "batch_id"
	}
	gone := 0
	for chunk := range slices.Chunk(written, 500) {
		q := fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE %s = ? AND %s IN (?%s)", table, key, no, strings.Repeat(", ?", len(chunk)-1))
		args := []any{id}
		for _, n := range chunk {
			args = append(args, n)
		}
		var held int
		if err := db.QueryRowContext(ctx, q, args...).Scan(&held); err != nil {
			return 0, fmt.Errorf("looking for %s %d's written orders in MySQL: %w", sc.kind(), id, err)
		}
		gone += len(chunk) - held
	}
	return gone, nil
}

// foreignOrders counts the item's orders by writing instance, for the
// instances not in own; nil when there are none.
func foreignOrders(ctx context.Context, db *sql.DB, sc scenario, id int64, own map[string]bool) (map[string]int, error) {
	q := "SELECT instance, COUNT(*) FROM orders WHERE product_id=? GROUP BY instance"
	if sc.coupon {
		q = "SELECT instance, COUNT(*) FROM coupon_grabs WHERE batch_id=? GROUP BY instance"
	}
	rows, err := db.QueryContext(ctx, q, id)
	if err != nil {
		return nil, fmt.Errorf("counting %s %d's orders by instance in MySQL: %w", sc.kind(), id, err)
	}
	defer rows.Close()
	var foreign map[string]int
	for rows.Next() {
		var in string
		var n int
		if err := rows.Scan(&in, &n); err != nil {
			return nil, fmt.Errorf("counting %s %d's orders by instance in MySQL: %w", sc.kind(), id, err)
		}
		if !own[in] {
			if foreign == nil {
				foreign = map[string]int{}
			}
			foreign[in] = n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("counting %s %d's orders by instance in MySQL: %w", sc.kind(), id, err)
	}
	return foreign, nil
}
