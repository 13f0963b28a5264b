package scenario

import (
	"math"
	"slices"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/seckill-lab/seckill/loadtest/results"
)

// A request has two clocks. Response time runs from the moment the lab
// sent it (vegeta's Latency, as every crowd measured it before). Buyer
// time runs from the buyer's arrival: the instant the crowd's schedule
// says the buyer came (the pacer's tick for a rate attack, the planned
// instant of a paced arrival, the burst's start for a burst, the opening
// for the T-0 crowd, the moment a buyer was told to come back). The gap
// between them is the send lag: how long the buyer waited inside the lab
// for a worker, a goroutine or the CPU, which is no fault of the server
// and would be hidden by response time alone (coordinated omission).

// clocks gathers buyer time and send lag beside the response times the
// crowd's vegeta.Metrics keep. It is safe for concurrent use.
type clocks struct {
	schedule string  // results.Schedule*
	target   float64 // the send rate the schedule claims, per second (0: none)
	bound    int     // the most requests the lab lets be in flight (0: no bound)

	mu sync.Mutex
	// buyer holds each result with buyer time for its latency, so that
	// vegeta's percentiles and HDR reporter read it as they read the
	// response times.
	buyer             vegeta.Metrics
	lag               vegeta.LatencyMetrics
	firstDue, lastDue time.Time
	// until is when the schedule stopped calling buyers, when that is
	// later than the last one sent (a rate attack's end: vegeta drops the
	// hits it had no time left to send); zero: the last sent's instant.
	until       time.Time
	sends, ends []time.Time // for the peak in flight
	// arrived is each request's buyer's arrival, beside its send and end
	// (the interval logs, results.Sample).
	arrived []time.Time
}

func newClocks(schedule string, target float64, bound int) *clocks {
	return &clocks{schedule: schedule, target: target, bound: bound}
}

// sendLag is how long after its buyer arrived at due r was sent. A
// request sent before its instant (a timer that fired early) lagged by
// nothing.
func sendLag(r *vegeta.Result, due time.Time) time.Duration { return max(0, r.Timestamp.Sub(due)) }

// add records r, whose buyer arrived at due.
func (c *clocks) add(r *vegeta.Result, due time.Time) {
	lag := sendLag(r, due)
	b := *r
	b.Latency = lag + r.Latency
	b.Body, b.Headers = nil, nil
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buyer.Add(&b)
	c.lag.Add(lag)
	if c.firstDue.IsZero() || due.Before(c.firstDue) {
		c.firstDue = due
	}
	if due.After(c.lastDue) {
		c.lastDue = due
	}
	c.sends = append(c.sends, r.Timestamp)
	c.ends = append(c.ends, r.End())
	c.arrived = append(c.arrived, r.Timestamp.Add(-lag))
}

// Samples are the attack's requests, each with its two clocks, for the
// interval logs (nil when the crowd kept none).
func (r *Result) Samples() []results.Sample {
	c := r.clocks
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]results.Sample, len(c.sends))
	for i := range out {
		out[i] = results.Sample{Arrived: c.arrived[i], Sent: c.sends[i], Answered: c.ends[i]}
	}
	return out
}

// dueOf is the instant the pacer scheduled hit seq of an attack that began
// at began: the wait it asks for before that hit when no time has passed
// (a constant pacer's (seq+1)/rate, a burst's zero).
func dueOf(p vegeta.Pacer, began time.Time, seq uint64) time.Time {
	wait, _ := p.Pace(0, seq)
	return began.Add(wait)
}

// peakInFlight is the most requests that were sent and not yet answered
// at one instant.
func (c *clocks) peakInFlight() int {
	sends, ends := slices.Clone(c.sends), slices.Clone(c.ends)
	slices.SortFunc(sends, time.Time.Compare)
	slices.SortFunc(ends, time.Time.Compare)
	peak, in, j := 0, 0, 0
	for _, s := range sends {
		for j < len(ends) && !ends[j].After(s) {
			in--
			j++
		}
		in++
		peak = max(peak, in)
	}
	return peak
}

// fill copies the buyer times and the send lag into r.
func (c *clocks) fill(r *results.Row) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.buyer.Requests
	if n == 0 {
		return
	}
	c.buyer.Close()
	r.BuyerTime = latenciesOf(c.buyer.Latencies)
	r.SendLag = latenciesOf(c.lag)
	s := &results.Send{Schedule: c.schedule, TargetPerS: c.target, PeakInFlight: c.peakInFlight(), MaxInFlight: c.bound}
	// The achieved rate is the target times the share of the buyers the
	// schedule called (one every 1/target from the first's instant until
	// it stopped) that were sent at all. A lab that sends late but sends
	// every buyer keeps the rate, and its lateness is the send lag's to
	// judge; one that drops buyers (vegeta's attacker, out of time) does
	// not.
	if c.target > 0 {
		end := c.lastDue
		if c.until.After(end) {
			end = c.until
		}
		called := math.Floor(end.Sub(c.firstDue).Seconds()*c.target+1e-9) + 1
		s.AchievedPerS = c.target * float64(n) / called
	}
	r.Send = s
}

// latenciesOf reads one clock's percentiles.
func latenciesOf(l vegeta.LatencyMetrics) *results.Latencies {
	return &results.Latencies{
		P50ms:  results.MS(l.Quantile(0.50)),
		P90ms:  results.MS(l.Quantile(0.90)),
		P95ms:  results.MS(l.Quantile(0.95)),
		P99ms:  results.MS(l.Quantile(0.99)),
		P999ms: results.MS(l.Quantile(0.999)),
		MaxMs:  results.MS(l.Max),
	}
}

// BuyerMetrics are the attack's buyer times, summed as vegeta sums
// response times (nil when the crowd kept none), for the HDR file.
func (r *Result) BuyerMetrics() *vegeta.Metrics {
	if r.clocks == nil || r.clocks.buyer.Requests == 0 {
		return nil
	}
	return &r.clocks.buyer
}

// perSecond is the rate of one event every d (0 for none).
func perSecond(d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(time.Second) / float64(d)
}
