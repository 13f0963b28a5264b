package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
	"github.com/tsenart/vegeta/v12/lib/plot"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/loadtest/results"
)

// outcome is what one request came to, as the table counts it.
type outcome int

const (
	outCreated     outcome = iota // 201: an order (or the replay of one); 202: an order accepted, written later
	outSoldOut                    // 409 /problems/sold-out
	outConflict                   // any other 409: already-purchased, idempotency in flight
	outTooMany                    // 429: lock timeout, queue full
	outOverloaded                 // 503 with Retry-After: an honest "come back later"
	outOther4xx                   // any other 4xx
	outServerError                // any other 5xx, 503 without Retry-After included
	outTimeout                    // no answer within --timeout
	outNetError                   // no answer at all: refused, reset
	outcomes                      // the number of outcomes
)

// label names an outcome in the plot's legend; vegeta colours series whose
// label contains ERROR in reds.
func (o outcome) label() string {
	return [...]string{"201/202 sold", "409 sold-out", "409 other", "429 too many", "503 overloaded", "4xx other",
		"ERROR 5xx", "ERROR timeout", "ERROR network"}[o]
}

// answer is the part of a response the lab reads.
type answer struct {
	outcome  outcome
	problem  string // problem+json type, e.g. /problems/sold-out
	user     string // user_id of a 201's (or 202's) order
	instance string // X-Seckill-Instance
	replayed bool   // Idempotent-Replayed: true
	accepted string // order number of a 202: accepted, to be written
	written  string // order number of a 201: written when answered
	// createdAt is a 201's (or 202's) order's created_at, as the
	// database holds it.
	createdAt time.Time
}

func classify(r *vegeta.Result) answer {
	a := answer{instance: r.Headers.Get("X-Seckill-Instance"), replayed: r.Headers.Get("Idempotent-Replayed") == "true"}
	switch {
	case r.Code == 0:
		// vegeta keeps only the transport error's text, so its wording is
		// all there is to tell a timeout from a refused connection.
		if strings.Contains(r.Error, "Timeout") || strings.Contains(r.Error, "deadline exceeded") {
			a.outcome = outTimeout
		} else {
			a.outcome = outNetError
		}
		return a
	case r.Code == 201 || r.Code == 202:
		// A 202 is a sale accepted (redis-stream): the lab waits for its
		// order to be written before it judges the stage.
		a.outcome = outCreated
		var order struct {
			UserID    string    `json:"user_id"`
			OrderNo   string    `json:"order_no"` // of an order or a grab alike
			CreatedAt time.Time `json:"created_at"`
		}
		if json.Unmarshal(r.Body, &order) == nil {
			a.user, a.createdAt = order.UserID, order.CreatedAt
			if r.Code == 202 {
				a.accepted = order.OrderNo
			} else {
				a.written = order.OrderNo
			}
		}
		return a
	}
	a.problem = problemType(r.Body)
	switch {
	case r.Code == 409 && a.problem == "/problems/sold-out":
		a.outcome = outSoldOut
	case r.Code == 409:
		a.outcome = outConflict
	case r.Code == 429:
		a.outcome = outTooMany
	case r.Code == 503 && r.Headers.Get("Retry-After") != "":
		// Overload answered as the API promises: nothing was written,
		// and the client is told when to retry.
		a.outcome = outOverloaded
	case r.Code >= 500:
		a.outcome = outServerError
	default:
		a.outcome = outOther4xx
	}
	return a
}

// problemType is the type of a problem+json body, or "". The server's
// problems begin with their type, so that is read without decoding the
// rest (the lab reads every answer, and its CPU counts in the CPU per
// answer it reports); any other body is decoded in full.
func problemType(body []byte) string {
	if rest, ok := bytes.CutPrefix(body, []byte(`{"type":"`)); ok {
		if end := bytes.IndexAny(rest, `"\`); end >= 0 && rest[end] == '"' {
			return string(rest[:end])
		}
	}
	var p api.Problem
	if json.Unmarshal(body, &p) != nil {
		return ""
	}
	return p.Type
}

// tally counts the answers of one attack.
type tally struct {
	planned   uint64 // 0 when the attack has no fixed size (constant shape)
	requests  int
	outcomes  [outcomes]int
	statuses  map[int]int // HTTP status -> count; 0 for no answer
	replayed  int
	problems  map[string]int  // problem type -> count, for the notes
	buyers    map[string]bool // user ids that got a 201 or 202
	accepted  map[string]bool // order numbers answered 202
	written   map[string]bool // order numbers answered 201
	instances map[string]bool // X-Seckill-Instance values seen
	errors    map[string]int  // transport error texts
	first     time.Time
	end       time.Time
	// lastSale is when the last 201 or 202 was answered; overloadedSent
	// are the send times of the 503s, to count those sent after it.
	lastSale       time.Time
	overloadedSent []time.Time
	// lastOrder is the latest created_at of an order answered 201 or
	// 202; soldOutAt are the times the sold-out answers were received,
	// to count those received before it.
	lastOrder time.Time
	soldOutAt []time.Time
	// items tallies each product of an attack over many (many.go), by
	// the product its URL names; nil for one item.
	items map[int64]*itemTally
}

func newTally(planned uint64) *tally {
	return &tally{
		planned:   planned,
		problems:  map[string]int{},
		statuses:  map[int]int{},
		buyers:    map[string]bool{},
		accepted:  map[string]bool{},
		written:   map[string]bool{},
		instances: map[string]bool{},
		errors:    map[string]int{},
	}
}

func (t *tally) add(r *vegeta.Result, a answer) {
	t.requests++
	t.outcomes[a.outcome]++
	t.statuses[int(r.Code)]++
	if a.replayed {
		t.replayed++
	}
	if a.problem != "" {
		t.problems[a.problem]++
	}
	if a.user != "" {
		t.buyers[a.user] = true
	}
	if a.accepted != "" {
		t.accepted[a.accepted] = true
	}
	if a.written != "" {
		t.written[a.written] = true
	}
	if a.instance != "" {
		t.instances[a.instance] = true
	}
	if a.outcome == outTimeout || a.outcome == outNetError {
		t.errors[r.Error]++
	}
	switch a.outcome {
	case outCreated:
		if e := r.End(); e.After(t.lastSale) {
			t.lastSale = e
		}
		if a.createdAt.After(t.lastOrder) {
			t.lastOrder = a.createdAt
		}
	case outSoldOut:
		t.soldOutAt = append(t.soldOutAt, r.End())
	case outOverloaded:
		t.overloadedSent = append(t.overloadedSent, r.Timestamp)
	}
	if t.items != nil {
		t.addItem(r, a)
	}
	if t.first.IsZero() || r.Timestamp.Before(t.first) {
		t.first = r.Timestamp
	}
	if e := r.End(); e.After(t.end) {
		t.end = e
	}
}

// postSaleOverloaded counts the 503s answered to requests sent after the
// last sale had been answered: buyers told "come back later" about an item
// already sold out. (A 503 sent before the last sale's answer may honestly
// have met a full queue while units remained.) With no sale at all it
// counts nothing: "after the sell-out" has no moment then.
func (t *tally) postSaleOverloaded() int {
	if t.lastSale.IsZero() {
		return 0
	}
	n := 0
	for _, sent := range t.overloadedSent {
		if sent.After(t.lastSale) {
			n++
		}
	}
	return n
}

// refusedWithStock counts the sold-out answers received before the last
// order was created (its created_at, which the database holds): a buyer
// refused while a unit remained for someone who asked later. It reads the
// lab's clock against the server's, so it holds on one machine (the lab's
// own targets) and trusts NTP across machines.
func (t *tally) refusedWithStock() int {
	n := 0
	for _, at := range t.soldOutAt {
		if at.Before(t.lastOrder) {
			n++
		}
	}
	return n
}

// refusedWithStockNet is refusedWithStock less the refusals explained by
// units in flight: a sold-out answer received while a reservation the
// server later gave back held units (between its reserved and given-back
// times, as the audit's given_back lists them) may have been told the
// truth of that instant; the units came back and a later buyer had them.
// The rest were refused with stock on the shelf.
func (t *tally) refusedWithStockNet(given []api.GiveBack) int {
	n := 0
	for _, at := range t.soldOutAt {
		if !at.Before(t.lastOrder) {
			continue
		}
		away := false
		for _, g := range given {
			// The log is in whole ms: a refusal in the ms a
			// reservation was made or given back counts as inside.
			if !at.Before(g.ReservedAt) && at.Before(g.At.Add(time.Millisecond)) {
				away = true
				break
			}
		}
		if !away {
			n++
		}
	}
	return n
}

// elapsed is the attack's wall time: first request sent to last answer.
func (t *tally) elapsed() time.Duration {
	if t.first.IsZero() {
		return 0
	}
	return t.end.Sub(t.first)
}

// served counts the requests the server decided: an order, or a 409.
func (t *tally) served() int {
	return t.outcomes[outCreated] + t.outcomes[outSoldOut] + t.outcomes[outConflict]
}

// Result is what an attack leaves behind for the verdict and the report:
// every answer tallied, vegeta's latency metrics, and the figures of the
// crowds that have their own (nil for the others).
type Result struct {
	tally   *tally
	metrics vegeta.Metrics
	clocks  *clocks // buyer time and send lag (clocks.go)
	T0      *results.T0
	Paced   *results.Paced
	Scalper *results.Scalper
	Many    *results.Many
	Room    *results.Room
}

// attackShape is how an attack sends: its pacer and duration, the hits it
// plans (a burst's; 0 for a rate), its workers (initial and at most) and
// the schedule its buyers arrive on, with the target rate of a rate.
type attackShape struct {
	pacer            vegeta.Pacer
	duration         time.Duration
	planned          uint64
	workers, initial uint64
	schedule         string
	target           float64
}

// shapeOf is the shape of o's attack, for buyers who send copies copies
// each.
func shapeOf(o Config, copies uint64) attackShape {
	sh := attackShape{workers: uint64(o.Workers) * copies, schedule: results.ScheduleBurst}
	sh.initial = sh.workers
	switch o.Shape {
	case "burst":
		sh.planned = uint64(o.Buyers) * copies
		sh.pacer = BurstPacer{Hits: sh.planned}
		sh.duration = o.MaxDuration
	default: // constant
		sh.schedule, sh.target = results.ScheduleRate, float64(o.Rate)
		sh.pacer = vegeta.ConstantPacer{Freq: o.Rate, Per: time.Second}
		sh.duration = o.Duration
		// Holding a rate takes rate × latency requests in flight; allow a
		// second of latency at the full rate before the attack falls behind.
		sh.workers = uint64(max(o.Workers, o.Rate))
		sh.initial = min(sh.workers, 10) // vegeta adds workers up to the bound as the rate needs them
	}
	return sh
}

// attack runs one attack with vegeta and feeds every result to the tally,
// the latency metrics and the stage's plot, while a progress line ticks on
// progress.
func attack(ctx context.Context, o Config, p Plan, pl *plot.Plot, progress io.Writer) (Result, error) {
	// --workers bounds the buyers in flight; a buyer who sends copies has
	// all of them in flight at once, so the storm multiplies connections
	// rather than thinning out the crowd.
	sh := shapeOf(o, uint64(max(1, p.Scenario.Copies)))
	pacer, duration, planned, workers, schedule := sh.pacer, sh.duration, sh.planned, sh.workers, sh.schedule
	atk, release := newAttacker(sh.initial, workers, o.Timeout)
	defer release()
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-ctx.Done():
			atk.Stop()
		case <-stopped:
		}
	}()

	t := newTally(planned)
	if p.pick != nil {
		t.items = map[int64]*itemTally{}
	}
	var mu sync.Mutex // guards t against the progress line
	line := newProgress(progress, o.ProgressTTY, fmt.Sprintf("%-11s %-12s %4d in flight", p.Scenario.Name, p.Stage, o.Workers), func() string {
		mu.Lock()
		defer mu.Unlock()
		return t.progressLine()
	})
	var m vegeta.Metrics
	var plotErr error
	clk := newClocks(schedule, sh.target, int(workers))
	// vegeta's attack begins a hair after this (its own time.Now()), so
	// the due instants read from here are early by as much, and each send
	// lag long by it (microseconds): the lab's queue is never understated.
	began := time.Now()
	if schedule == results.ScheduleRate {
		// vegeta stops calling buyers once the duration has passed.
		clk.until = began.Add(duration)
	}
	for r := range atk.Attack(p.targeter(), pacer, duration, p.Series) {
		a := classify(r)
		mu.Lock()
		t.add(r, a)
		mu.Unlock()
		m.Add(r)
		due := dueOf(pacer, began, r.Seq)
		clk.add(r, due)
		if err := pl.Add(withLabel(r, a)); err != nil && plotErr == nil {
			plotErr = err
		}
		if err := pl.Add(buyerPoint(r, due)); err != nil && plotErr == nil {
			plotErr = err
		}
	}
	m.Close()
	line.stop()
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("%s under %s: %w", p.Scenario.Name, p.Stage, err)
	}
	if plotErr != nil {
		return Result{}, fmt.Errorf("plotting %s under %s: %w", p.Scenario.Name, p.Stage, plotErr)
	}
	return Result{tally: t, metrics: m, clocks: clk}, nil
}

// withLabel returns a copy of r whose Error field carries the outcome's
// label, so that the plot's labeler can split the series by outcome without
// classifying the result twice. The plot keeps nothing else of r.
func withLabel(r *vegeta.Result, a answer) *vegeta.Result {
	c := *r
	c.Error = a.outcome.label()
	c.Body, c.Headers = nil, nil
	return &c
}

// buyerPoint is r as the plot's buyer-time series shows it: at the same
// send instant as its response time, with the buyer time for latency, so
// that the gap between the two series is the lab's queue. The series is an
// attack of its own (vegeta's plot orders each attack's points by Seq, and
// the response time holds r's).
func buyerPoint(r *vegeta.Result, due time.Time) *vegeta.Result {
	c := *r
	c.Attack += " (buyer time)"
	c.Latency = sendLag(r, due) + r.Latency
	c.Error = "every answer"
	c.Body, c.Headers = nil, nil
	return &c
}

// OutcomeLabeler is the plot's labeler; see withLabel.
func OutcomeLabeler(r *vegeta.Result) string { return r.Error }

func (t *tally) progressLine() string {
	n := fmt.Sprintf("%d", t.requests)
	if t.planned > 0 {
		n = fmt.Sprintf("%d/%d", t.requests, t.planned)
	}
	rate := 0.0
	if d := t.elapsed().Seconds(); d > 0 {
		rate = float64(t.requests) / d
	}
	return fmt.Sprintf("%s  201/202 %d  409 %d  429 %d  503 %d  5xx %d  no answer %d  %.0f req/s",
		n, t.outcomes[outCreated], t.outcomes[outSoldOut]+t.outcomes[outConflict], t.outcomes[outTooMany],
		t.outcomes[outOverloaded], t.outcomes[outServerError], t.outcomes[outTimeout]+t.outcomes[outNetError], rate)
}

// newAttacker is vegeta's attacker, workers at first and up to maxWorkers,
// over a transport of the lab's own that keeps one connection per worker
// open between requests. release closes those connections: vegeta's own
// transport keeps its idle connections for as long as the process lives,
// so every attack of a sweep left its workers' sockets open (thousands by
// the 1,024-in-flight level), and a sweep repeated three times ran out of
// file descriptors. IdleConnTimeout closes a straggler that came back to
// the pool after release.
func newAttacker(workers, maxWorkers uint64, timeout time.Duration) (*vegeta.Attacker, func()) {
	tr := NewAttackTransport(timeout)
	return AttackerOn(tr, workers, maxWorkers, timeout), tr.CloseIdleConnections
}

// NewAttackTransport is the transport of an attacker: its connections,
// which attackers made over it in turn (attackerOn) share, kept alive
// between them.
func NewAttackTransport(timeout time.Duration) *http.Transport {
	return &http.Transport{
		// As vegeta's own: proxies from the environment, and its TLS
		// settings for https targets.
		Proxy:           http.ProxyFromEnvironment,
		TLSClientConfig: vegeta.DefaultTLSConfig,
		DialContext:     (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		IdleConnTimeout: 10 * time.Second,
	}
}

// AttackerOn is an attacker over tr. A vegeta attacker ends with its one
// attack; its transport can serve the next.
func AttackerOn(tr *http.Transport, workers, maxWorkers uint64, timeout time.Duration) *vegeta.Attacker {
	// What vegeta.Connections and vegeta.KeepAlive(true) would set, set
	// here only when it changes: they write tr's fields on every call, and
	// a dial of the previous attacker over tr, which can end after its
	// attack did, reads them as it pools its connection (a data race under
	// -race, the baselines' slices taken in turn over one transport).
	if tr.MaxIdleConnsPerHost != int(maxWorkers) {
		tr.MaxIdleConnsPerHost = int(maxWorkers)
	}
	if tr.DisableKeepAlives {
		tr.DisableKeepAlives = false
	}
	return vegeta.NewAttacker(
		vegeta.Client(&http.Client{Transport: tr}),
		vegeta.Workers(workers),
		vegeta.MaxWorkers(maxWorkers),
		vegeta.Timeout(timeout),
		vegeta.Redirects(vegeta.NoFollow),
	)
}
