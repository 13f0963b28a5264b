package verdict

import (
	"fmt"
	"strings"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/loadtest/results"
)

// The rules a verdict checks. A failed verdict names each rule it broke,
// with the counts that broke it.
const (
	RuleNothingSent      = "nothing-sent"       // the attack sent no request
	RuleOversold         = "oversold"           // a safe stage sold beyond its stock
	RuleConservation     = "conservation"       // units left the stock without an order, or the reverse
	RuleOrdersMatch      = "orders-match"       // buyers told 201 differ from the orders the audit counts
	RuleServerErrors     = "server-errors"      // a 5xx other than a 503 with Retry-After
	RuleTransportErrors  = "transport-errors"   // a request timed out or got no answer
	RuleLiveness         = "liveness"           // stock left unsold while buyers were turned away
	RuleSoldNothing      = "sold-nothing"       // stock to sell, nothing sold
	RuleMySQLAgrees      = "mysql-agrees"       // MySQL and the audit disagree
	RuleForeignWriter    = "foreign-writer"     // MySQL holds orders of the item by instances outside the targets
	RuleExpectedOversell = "expected-oversell"  // a stage meant to show the race did not
	RuleLabError         = "lab-error"          // the lab could not reset, attack or audit the stage
	RuleUnconfirmed      = "unconfirmed"        // an accepted (202) order was never confirmed: failed, lost, or still pending
	RuleCapped           = "capped"             // the --max-duration cap stopped the burst with stock unsold
	RulePostSale503      = "post-sale-503"      // a buyer who came after the sell-out was told 503, not sold out
	RuleRefusedWithStock = "refused-with-stock" // a buyer was told sold out before the last unit was sold
	RuleSoldEarly        = "sold-early"         // t0: an order created before the sale's opening
	RuleEarlyNotRefused  = "early-not-refused"  // t0: an early buyer was answered other than 409 sale-not-open
	RuleExactSale        = "exact-sale"         // t0: a safe stage sold other than its whole stock
	RuleFirstCome        = "first-come"         // paced: the first arrivals won a smaller share of the units than the stage's target
	RuleScalpers         = "scalpers"           // scalper-limited, with --scalper-target-verdict: the scalpers surely won more than their target share
	RuleScalperLimit     = "scalper-limit"      // scalper-limited: the scalpers' addresses won more units than the per-address limit lets through
	RuleFellBehind       = "fell-behind"        // rate and paced: the lab sent below MinSendShare of its schedule's rate, or its p99 send lag passed MaxSendLag
)

// The fell-behind rule's bounds. A row whose lab sent below MinSendShare
// of the rate its schedule claims did not send the load it reports. So
// did one whose p99 send lag passed MaxSendLag, at any rate: a buyer in a
// hundred waited that long inside the lab before the request left, and
// the server was judged on a crowd that arrived late and bunched. 250 ms
// is 50 arrivals of the paced scenario (5 ms apart) and 125 requests of
// the default rate (500/s): far past the scheduling jitter of a busy
// two-core machine (the paced rows measured 5 to 15 ms of p99 jitter
// beside make stress), and well under the second-long stalls it is there
// to catch.
const (
	MinSendShare = 0.95
	MaxSendLag   = 250 * time.Millisecond
)

// scope says which rows a rule judges.
type scope int

const (
	// everyRow rules hold for every stage, the racing ones too: the
	// oracle's honesty and the sale's window come before any race.
	everyRow scope = iota
	// racingRows rules judge a stage expected to oversell, once it sent
	// something: it is there to show the race.
	racingRows
	// safeRows rules judge a stage expected to be safe and live, once it
	// sent something.
	safeRows
)

// rule is one named check of a verdict. broke returns why r broke it,
// once per breach (a rule may be broken twice over), or nothing.
type rule struct {
	name  string
	scope scope
	broke func(r *results.Row) []string
}

// notFor says, for the rules that apply to some rows of their scope only,
// why a rule does not apply to r ("" when it does): the row records it
// (NotJudged), so that a rule left out is named as such, not counted as
// kept.
var notFor = map[string]func(r *results.Row) string{
	RuleFellBehind: fellBehindNotFor,
}

// rules is the verdict, in the order a failed note explains them.
var rules = []rule{
	{RuleMySQLAgrees, everyRow, mysqlAgrees},
	{RuleForeignWriter, everyRow, foreignWriter},
	{RuleSoldEarly, everyRow, soldEarly},
	{RuleEarlyNotRefused, everyRow, earlyNotRefused},
	{RuleNothingSent, everyRow, nothingSent},
	{RuleFellBehind, everyRow, fellBehind},
	{RuleExpectedOversell, racingRows, expectedOversell},
	{RuleOversold, safeRows, oversold},
	{RuleConservation, safeRows, conservation},
	{RuleOrdersMatch, safeRows, ordersMatch},
	{RuleServerErrors, safeRows, serverErrors},
	{RuleTransportErrors, safeRows, transportErrors},
	{RuleSoldNothing, safeRows, soldNothing},
	{RuleUnconfirmed, safeRows, unconfirmed},
	{RuleLiveness, safeRows, liveness},
	{RuleCapped, safeRows, capped},
	{RulePostSale503, safeRows, postSale503},
	{RuleRefusedWithStock, safeRows, refusedWithStock},
	{RuleExactSale, safeRows, exactSale},
	{RuleFirstCome, safeRows, firstComeRule},
	{RuleScalperLimit, safeRows, scalperLimit},
	{RuleScalpers, safeRows, scalpers},
	{RuleExactPerProduct, safeRows, exactPerProduct},
	{RuleRefusedPerProduct, safeRows, refusedPerProduct},
	{RuleManyVsBuy, safeRows, manyVsBuy},
	{RuleRoomExact, safeRows, roomExact},
	{RuleRoomRate, safeRows, roomRate},
	{RuleRoomNo503, safeRows, roomNo503},
	{RuleRoomFirstCome, safeRows, roomFirstCome},
	{RuleRoomSoldOut, safeRows, roomSoldOut},
	{RuleRoomScalpers, safeRows, roomScalpers},
}

// Judge sets r's verdict, the rules it broke, and its note from its counts.
//
// A stage expected to oversell passes when it did; its errors are noted,
// not judged, since a racing stage is there to show the race. A stage
// expected to be safe must be safe and live: nothing oversold, stock
// conserved, every buyer told 201 backed by an order, no 5xx other than a
// 503 that says when to retry, every request answered within the client
// timeout, and no stock left on the shelf while buyers were turned away.
// Disagreement between the audit and MySQL fails any stage: the lab cannot
// vouch for an oracle that lies.
func Judge(r *results.Row) {
	judged := scopeOf(r)
	r.Verdict, r.Broken, r.NotJudged = results.Pass, nil, nil
	var parts []string
	for _, ru := range rules {
		if ru.scope != everyRow && ru.scope != judged {
			continue
		}
		if applies := notFor[ru.name]; applies != nil {
			if why := applies(r); why != "" {
				if r.NotJudged == nil {
					r.NotJudged = map[string]string{}
				}
				r.NotJudged[ru.name] = why
				continue
			}
		}
		for _, why := range ru.broke(r) {
			r.Broken = append(r.Broken, ru.name)
			parts = append(parts, ru.name+": "+why)
		}
	}
	if len(r.Broken) > 0 {
		r.Verdict = results.Fail
	}
	r.Note = strings.Join(append(parts, notesOf(r, judged, len(r.Broken) > 0)...), "; ")
}

// scopeOf says which rules judge r beyond those of every row: none when
// it sent nothing.
func scopeOf(r *results.Row) scope {
	switch {
	case r.Requests == 0:
		return everyRow
	case r.ExpectOversell:
		return racingRows
	}
	return safeRows
}

// because is one breach of a rule, explained.
func because(format string, args ...any) []string {
	return []string{fmt.Sprintf(format, args...)}
}

func noAnswer(r *results.Row) int   { return r.Timeouts + r.NetErrors }
func turnedAway(r *results.Row) int { return r.SoldOut + r.TooMany + r.Overloaded }

// unknownOutcomes counts the buyers told 503 outcome-unknown: a write
// their deadline cut off on its way, which MySQL may then have committed.
func unknownOutcomes(r *results.Row) int { return r.Problems[api.ProblemTypePrefix+"outcome-unknown"] }

func mysqlAgrees(r *results.Row) []string {
	if r.MySQL == nil {
		return nil
	}
	if d := r.MySQL.Disagreement(r); d != "" {
		return []string{d}
	}
	return nil
}

func foreignWriter(r *results.Row) []string {
	if r.MySQL == nil {
		return nil
	}
	var why []string
	if len(r.MySQL.Foreign) > 0 {
		why = append(why, because("MySQL holds orders of this item written by instances that are not among the targets (%s): another fleet shares this database, and its resets and sales void every count here",
			results.CountsText(r.MySQL.Foreign))...)
	}
	if r.MySQL.Gone > 0 {
		why = append(why, because("%d orders the buyers were answered 201 for are gone from MySQL: a reset the lab did not send deleted them, with whatever orders its own fleet had written; another fleet shares this database, and its resets and sales void every count here",
			r.MySQL.Gone)...)
	}
	return why
}

func soldEarly(r *results.Row) []string {
	t := r.T0
	if t == nil {
		return nil
	}
	if n := max(t.SoldEarly, deref(t.SoldEarlyMySQL)); n > 0 {
		return because("%d orders were created before opens_at %s (%d by the answers' created_at%s)",
			n, t.OpensAt.Format("15:04:05.000"), t.SoldEarly, mysqlEarly(t))
	}
	return nil
}

func earlyNotRefused(r *results.Row) []string {
	t := r.T0
	if t == nil || t.RefusedEarly == t.Buyers {
		return nil
	}
	return because("%d of %d buyers who asked before the opening were answered otherwise than 409 sale-not-open (%s)",
		t.Buyers-t.RefusedEarly, t.Buyers, results.CountsText(t.EarlyOther))
}

func nothingSent(r *results.Row) []string {
	if r.Requests == 0 {
		return because("no request was sent")
	}
	return nil
}

// fellBehind: a rate or paced row claims a send rate, and a lab that
// could not keep it judged the stage on a crowd other than the one it
// reports. Every row, racing ones too: it is the lab's failure, not the
// stage's. fellBehindNotFor names the rows it does not apply to.
func fellBehind(r *results.Row) []string {
	sd, lag := r.Send, r.SendLag
	if !sd.Scheduled() || lag == nil {
		return nil
	}
	var short []string
	if sd.TargetPerS > 0 && sd.AchievedPerS < MinSendShare*sd.TargetPerS {
		short = append(short, fmt.Sprintf("sent %.1f requests/s of the %.0f its schedule claims (%.0f%%, below %.0f%%)",
			sd.AchievedPerS, sd.TargetPerS, 100*sd.AchievedPerS/sd.TargetPerS, 100*MinSendShare))
	}
	if lag.P99ms > results.MS(MaxSendLag) {
		short = append(short, fmt.Sprintf("p99 send lag %.0f ms, above %.0f ms (max %.0f ms)", lag.P99ms, results.MS(MaxSendLag), lag.MaxMs))
	}
	if len(short) == 0 {
		return nil
	}
	return because("the lab fell behind its %s schedule: %s; %s", sd.Schedule, strings.Join(short, ", "), shortOf(sd))
}

// fellBehindNotFor: the rule judges rows whose crowd claims a send rate.
// A closed model claims none: its users wait for their answers, so a slow
// shop slows its arrivals by design, and the lab's own delay is in its
// buyer time. A burst's schedule is "all at once", and its workers are
// part of its definition. The T-0 and scalper crowds report their own
// timing (the release, the shots) and claim no rate either.
func fellBehindNotFor(r *results.Row) string {
	sd := r.Send
	switch {
	case sd == nil:
		return "the row kept no send times"
	case sd.Scheduled():
		return ""
	case sd.Schedule == results.ScheduleClosed:
		return "a closed model claims no arrival rate: its users wait for their answers, so a slow shop slows the arrivals by design; the lab's own delay is in its buyer time"
	case sd.Schedule == results.ScheduleBurst:
		return "a burst's schedule is all at once, and its workers are part of it; its lab queue is reported"
	}
	return fmt.Sprintf("the %s crowd claims no send rate; its lab queue is reported", sd.Schedule)
}

// shortOf says which of the lab's resources ran short, as far as the row
// tells.
func shortOf(sd *results.Send) string {
	switch {
	case sd.MaxInFlight > 0 && sd.PeakInFlight >= sd.MaxInFlight:
		return fmt.Sprintf("its workers were at their maximum (%d in flight of %d): holding the rate takes rate × latency in flight", sd.PeakInFlight, sd.MaxInFlight)
	case sd.MaxInFlight > 0:
		return fmt.Sprintf("not its workers (at most %d in flight of %d): the lab's own CPU or the machine's scheduling", sd.PeakInFlight, sd.MaxInFlight)
	}
	return fmt.Sprintf("no worker bound (at most %d in flight): the lab's own CPU or the machine's scheduling", sd.PeakInFlight)
}

func expectedOversell(r *results.Row) []string {
	if r.Oversold > 0 {
		return nil
	}
	why := "a larger crowd or more --workers widens the race"
	if r.Buyers <= r.InitialStock {
		why = fmt.Sprintf("only %d buyers were sent, no more than the stock, so nothing could oversell: send more --buyers, or a longer --duration", r.Buyers)
	}
	return because("expected overselling but saw none (%d sold of %d); %s", r.Sold, r.InitialStock, why)
}

func oversold(r *results.Row) []string {
	if r.Oversold > 0 {
		return because("oversold by %d (%d sold of %d)", r.Oversold, r.Sold, r.InitialStock)
	}
	return nil
}

func conservation(r *results.Row) []string {
	if !r.Conserved {
		return because("%d units left the stock but %d were sold", r.InitialStock-r.FinalStock, r.Sold)
	}
	return nil
}

// ordersMatch: a buyer whose request timed out may or may not have an
// order, so the count of 201s only has to match the audit when every
// request got an answer. So may a buyer told 503 outcome-unknown: the
// audit may count up to that many more.
func ordersMatch(r *results.Row) []string {
	unknown := unknownOutcomes(r)
	if noAnswer(r) > 0 || (r.Sold >= r.BuyersWithOrder && r.Sold <= r.BuyersWithOrder+unknown) {
		return nil
	}
	also := ""
	if unknown > 0 {
		also = fmt.Sprintf(" (and %d 503 outcome-unknown)", unknown)
	}
	return because("%d buyers were answered 201%s but the audit counts %d sold", r.BuyersWithOrder, also, r.Sold)
}

// serverErrors: overload is a 503 with Retry-After; any other 5xx is a
// bug.
func serverErrors(r *results.Row) []string {
	if r.ServerErrors > 0 {
		return because("%d of %d requests were answered 5xx without Retry-After (%s)",
			r.ServerErrors, r.Requests, results.StatusCounts(r, true))
	}
	return nil
}

func transportErrors(r *results.Row) []string {
	if n := noAnswer(r); n > 0 {
		return because("%d of %d requests got no answer (%d timeouts, %d network errors%s); their buyers' outcome is known only to the audit",
			n, r.Requests, r.Timeouts, r.NetErrors, results.CommonError(r.TransportErrors))
	}
	return nil
}

// soldNothing: refusing everyone is safe but not a sale; a stage that
// sold nothing from a full stock is broken, and calling it safe would
// hide that.
func soldNothing(r *results.Row) []string {
	if r.Sold == 0 && r.InitialStock > 0 {
		return because("sold nothing although %d units were in stock; the %d requests were answered %s",
			r.InitialStock, r.Requests, results.StatusCounts(r, false))
	}
	return nil
}

// unconfirmed: a 202 promised an order, and each must end written. A
// failed one gave its unit back (no oversell), but the buyer was told yes.
func unconfirmed(r *results.Row) []string {
	if n := r.FailedOrders + r.Unconfirmed; n > 0 {
		return because("%d of %d accepted orders were not confirmed (%d failed, %d pending or lost)",
			n, r.Accepted, r.FailedOrders, r.Unconfirmed)
	}
	return nil
}

// liveness: stock on the shelf while buyers leave empty-handed means the
// stage refused buyers it could have served. A crowd no larger than the
// stock leaves stock behind honestly: every buyer got one.
func liveness(r *results.Row) []string {
	if r.Many != nil {
		return nil // the tail's stock beside the hot items' refusals: judged per product (many.go)
	}
	if r.FinalStock > 0 && r.Conserved && turnedAway(r) > 0 && r.Buyers > r.BuyersWithOrder {
		return because("%d units unsold while %d buyers went without one (%s)",
			r.FinalStock, r.Buyers-r.BuyersWithOrder, results.TurnedAwayCounts(r))
	}
	return nil
}

// capped: a burst the cap cut short with stock on the shelf. The buyers
// never sent would have bought, so the stage was too slow for this crowd,
// even if nobody it did serve was turned away.
func capped(r *results.Row) []string {
	if r.Many != nil {
		return nil // judged per product: a capped crowd leaves a product short of its buyers (many.go)
	}
	if r.Planned > r.Requests && r.FinalStock > 0 && r.Conserved {
		return because("the --max-duration cap stopped the burst after %d of %d requests with %d units unsold: too slow for this crowd",
			r.Requests, r.Planned, r.FinalStock)
	}
	return nil
}

// postSale503: after the sell-out, "sold out" is the answer, and the
// cheapest one; a 503 with Retry-After invites a buyer to come back for
// nothing, and a crowd of them to storm the service.
func postSale503(r *results.Row) []string {
	if r.PostSale503 > 0 {
		return because("%d requests sent after the last sale was answered got 503 instead of 409 sold-out", r.PostSale503)
	}
	return nil
}

// refusedWithStock: sold out is a promise that no unit is left. A buyer
// who heard it before another buyer's order was created was refused while
// stock remained: the liveness rule misses it once the stock is gone (a
// bucketed stage that refused a buyer from an empty bucket while others
// held units), this rule does not.
func refusedWithStock(r *results.Row) []string {
	if r.Many != nil {
		return nil // one product's refusal before another's last order refused nobody: per product (many.go)
	}
	if r.RefusedWithStock > 0 {
		return because("%d sold-out answers were received before the last order was created: buyers refused while stock remained (%d of them while no reservation the server gave back later held units)",
			r.RefusedWithStock, r.RefusedWithStockNet)
	}
	return nil
}

// exactSale: at T-0 the whole crowd meets the whole stock at once, and a
// safe stage sells exactly the stock, or one unit to each buyer of a
// crowd smaller than the stock.
func exactSale(r *results.Row) []string {
	if want := min(r.InitialStock, r.T0Buyers()); r.T0 != nil && r.Sold != want {
		return because("sold %d at T-0, want exactly %d (stock %d, %d buyers)", r.Sold, want, r.InitialStock, r.T0.Buyers)
	}
	return nil
}

func firstComeRule(r *results.Row) []string {
	p := r.Paced
	if p == nil || p.Target == nil || p.Score == nil || *p.Score >= *p.Target {
		return nil
	}
	why := fmt.Sprintf("of the %d units later arrivals won, %d went to arrivals more than %d places late, past the lab's p99 jitter",
		p.Won-p.FirstWon, p.LateWins, p.JitterWindow)
	if p.LateWins == 0 {
		why = fmt.Sprintf("the %d units later arrivals won all went within %d places, the lab's p99 jitter: the machine's scheduling decided them, not the stage (a quieter machine or a slower --pace)",
			p.Won-p.FirstWon, p.JitterWindow)
	}
	return because("first-come score %.2f, below %.2f: the first %d arrivals won %d of the %d units sold; %s",
		*p.Score, *p.Target, p.Stock, p.FirstWon, p.Won, why)
}

func scalperLimit(r *results.Row) []string {
	if sp := r.Scalper; sp != nil && sp.Limited && sp.ScalperWon > sp.LimitAllows {
		return because("with the per-address limit on, the %d scalpers' addresses won %d units, more than the %d the limit lets through",
			sp.Scalpers, sp.ScalperWon, sp.LimitAllows)
	}
	return nil
}

func scalpers(r *results.Row) []string {
	if sp := r.Scalper; sp != nil && sp.TargetVerdict && sp.Missed() {
		return because("with the per-address limit on, scalpers won %.0f%% of the units as %.0f%% of the people: %.2f× their share, above %.2f× (a true %.2f× would win this many %.2g of the time)",
			100**sp.ShareOfUnits, 100*sp.ShareOfPeople, *sp.Gain, *sp.Target, *sp.Target, *sp.MissedP)
	}
	return nil
}

func deref(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

func mysqlEarly(t *results.T0) string {
	if t.SoldEarlyMySQL == nil {
		return ""
	}
	return fmt.Sprintf(", %d in MySQL", *t.SoldEarlyMySQL)
}

// ExpectsOversell says whether stage should oversell in this run. An
// explicit --expect-oversell list decides alone. Otherwise: unlocked races
// whenever two buyers overlap; local-mutex only when they reach different
// instances, each with its own mutex; every other stage must be safe. No
// stage can oversell a crowd smaller than the stock.
func ExpectsOversell(explicit map[string]bool, stage string, instances, workers, crowd, stock int) bool {
	if explicit != nil {
		return explicit[stage]
	}
	if workers < 2 || crowd <= stock {
		return false
	}
	return inventory.Oversells(stage, instances)
}
