// Package results holds what the lab measures: a row (one scenario under
// one stage) with the figures of the scenarios that have their own, a
// baseline, and the counts the verdict and the report both quote. It
// computes nothing from the wire: the attacks fill it, the verdict judges
// it, the report prints it.
package results

import (
	"time"

	"github.com/seckill-lab/seckill/loadtest/cpu"
)

// Row is one line of the report: one scenario under one stage. The JSON
// names are read by the dashboard; keep them.
type Row struct {
	Scenario string `json:"scenario"`
	// Model is how the scenario's buyers come: ModelOpen or ModelClosed.
	Model          string  `json:"model,omitempty"`
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
	// NotJudged names the rules that do not apply to the row, with why
	// (fell-behind for a closed model, say): a rule left out is not a rule
	// kept.
	NotJudged map[string]string `json:"not_judged,omitempty"`
	Note      string            `json:"note"`
	Plot      string            `json:"plot"`
	HDR       string            `json:"hdr,omitempty"` // HDR histogram file, in vegeta's hdrplot format
	P90ms     float64           `json:"p90_ms"`
	P999ms    float64           `json:"p999_ms"`
	MaxMs     float64           `json:"max_ms"`

	// The p50_ms to max_ms above are response times, from the moment the
	// lab sent each request. BuyerTime runs from the buyer's arrival (the
	// instant the crowd's schedule says the buyer came), and SendLag is
	// the difference, the lab's own queue: how long buyers waited inside
	// the lab before their request left. BuyerHDR is buyer time's HDR
	// file beside HDR. Send says how the lab kept its schedule. All nil
	// in a row that sent nothing.
	BuyerTime *Latencies `json:"buyer_time,omitempty"`
	SendLag   *Latencies `json:"send_lag,omitempty"`
	BuyerHDR  string     `json:"hdr_buyer_time,omitempty"`
	// HDRLog and BuyerHDRLog are the same two clocks as HdrHistogram
	// interval logs (one histogram a second, values in ns), the format
	// HistogramLogProcessor and the other HdrHistogram tools read.
	HDRLog      string `json:"hdr_log,omitempty"`
	BuyerHDRLog string `json:"hdr_log_buyer_time,omitempty"`
	Send        *Send  `json:"send,omitempty"`

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
	MySQL           *DBCount       `json:"mysql,omitempty"`
	// RSSMB is each target's resident memory after the attack, in MiB
	// (process_resident_memory_bytes from its /metrics; instances of one
	// demo share a process).
	RSSMB []float64 `json:"rss_mb,omitempty"`

	// With --repeat, a row is the median run of its attack (report/repeat.go):
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

	// The T-0 scenario's figures (scenario/t0.go), and the paced scenario's
	// (scenario/paced.go); nil in the other scenarios' rows.
	T0    *T0    `json:"t0,omitempty"`
	Paced *Paced `json:"paced,omitempty"`
	// Scalper are the scalper scenarios' figures (scenario/scalper.go).
	Scalper *Scalper `json:"scalper,omitempty"`
	// Many are the many scenario's figures, per product (scenario/many.go).
	Many *Many `json:"many,omitempty"`
	// Room are the waiting-room scenario's figures (scenario/room.go).
	Room *Room `json:"room,omitempty"`

	// The CPU the processes spent on the attack (package cpu), per answer
	// (201, 202 or 409, as answered/s counts them) and per unit sold.
	cpu.Figures
	CPUPerSaleMS *float64 `json:"cpu_per_sale_ms,omitempty"`
}

// Latencies are one clock's percentiles over a row's requests, in ms.
type Latencies struct {
	P50ms  float64 `json:"p50_ms"`
	P90ms  float64 `json:"p90_ms"`
	P95ms  float64 `json:"p95_ms"`
	P99ms  float64 `json:"p99_ms"`
	P999ms float64 `json:"p999_ms"`
	MaxMs  float64 `json:"max_ms"`
}

// Sample is one request's clocks: its buyer's arrival, its send and its
// answer. Response time is Answered less Sent; buyer time Answered less
// Arrived.
type Sample struct{ Arrived, Sent, Answered time.Time }

// The schedules a crowd's buyers arrive on.
const (
	ScheduleBurst   = "burst"   // every buyer at the burst's start
	ScheduleRate    = "rate"    // one every 1/--rate (the constant shape)
	SchedulePaced   = "paced"   // one every --pace
	ScheduleT0      = "t0"      // every buyer at the opening; a come-back when told to
	ScheduleScalper = "scalper" // each person at their moment, each scalper's shot every 50 ms
	ScheduleClosed  = "closed"  // each user comes back a think time after its last answer
	ScheduleRoom    = "room"    // each account joins at its moment and buys when its pass comes
)

// The two load models a scenario states (Gatling's open and closed
// injection, k6's arrival-rate and VU executors).
const (
	// ModelOpen: buyers arrive on a schedule of their own (all at once, at
	// a rate, one every --pace), whatever the answers; a slow shop meets a
	// queue that grows.
	ModelOpen = "open"
	// ModelClosed: a fixed population of users, each of which waits for
	// its answer and thinks before it comes back; a slow shop slows the
	// arrivals down with it, as behind a waiting room.
	ModelClosed = "closed"
)

// Send is how the lab kept the schedule its crowd claims.
type Send struct {
	Schedule string `json:"schedule"`
	// TargetPerS is the send rate the schedule claims (rate and paced
	// only), and AchievedPerS the rate the sends kept: the target times
	// the share of the buyers the schedule called that were sent at all
	// (a lab that sends every buyer late keeps the rate; its lateness is
	// the send lag).
	TargetPerS   float64 `json:"target_per_s,omitempty"`
	AchievedPerS float64 `json:"achieved_per_s,omitempty"`
	// PeakInFlight is the most requests sent and not yet answered at
	// once, and MaxInFlight the lab's bound on them (its workers; 0 for
	// none): a peak at the bound says the workers were the shortage.
	PeakInFlight int `json:"peak_in_flight"`
	MaxInFlight  int `json:"max_in_flight,omitempty"`
}

// Scheduled says whether the row's crowd claims a send rate, which the
// fell-behind rule holds it to: a rate attack or paced arrivals. A burst
// has no schedule beyond "all at once", and its workers are part of it.
func (s *Send) Scheduled() bool {
	return s != nil && (s.Schedule == ScheduleRate || s.Schedule == SchedulePaced)
}

// SetCPU keeps the CPU an attack cost, and what it comes to per answer
// and per unit sold.
func (r *Row) SetCPU(u *cpu.Usage, answers int) {
	r.CPU = u
	r.CPUPerAnswerMS, r.ServersPerAnswerMS = cpu.PerUnit(u.Seconds, answers), cpu.PerUnit(u.Servers(), answers)
	r.CPUPerSaleMS = cpu.PerUnit(u.Seconds, r.Sold)
}

const (
	Pass    = "pass"
	Fail    = "fail"
	Skipped = "skipped"
)

// T0Buyers is the T-0 crowd, 0 outside the T-0 scenario.
func (r *Row) T0Buyers() int {
	if r.T0 == nil {
		return 0
	}
	return r.T0.Buyers
}

// Capped reports whether the burst was stopped before its whole crowd.
func (r Row) Capped() bool { return r.Planned > r.Requests }

// MS is d in milliseconds, as the rows and settings keep durations.
func MS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Crowd is how a scenario's buyers arrive.
type Crowd int

const (
	CrowdAttack  Crowd = iota // vegeta's attacker, in the run's --shape
	CrowdT0                   // connected early, released together at the opening
	CrowdPaced                // one arrival every --pace, in a recorded order
	CrowdScalper              // ordinary buyers in the first second, scalpers from T-0
	CrowdClosed               // a fixed population of users, each buying, waiting and thinking in turn
	CrowdMany                 // a burst over many products, each buyer choosing one by a Zipf law
	CrowdRoom                 // a crowd joining a waiting room, polling it and buying with its passes
)
