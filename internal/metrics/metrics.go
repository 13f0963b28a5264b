// Package metrics exports what a workshop or an operator wants to watch in
// Prometheus form: request latency by route and status, buy outcomes by
// stage, the lock's acquire latency, waits, renewals and losses, what the
// reconcile job found, redis-stream's queue (lag, pending entries, time to
// confirm, dead letters) and the orders the payment timeout cancelled. Each instance has its own registry, so the three
// instances of the demo report separately, as three processes would.
package metrics

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seckill-lab/seckill/internal/inventory/orderwriter"
	"github.com/seckill-lab/seckill/internal/lock"
	"github.com/seckill-lab/seckill/internal/reconcile"
)

// Metrics is one instance's set of collectors.
type Metrics struct {
	reg *prometheus.Registry

	requests    *prometheus.HistogramVec
	inFlight    *prometheus.GaugeVec
	buys        *prometheus.CounterVec
	lockAcquire *prometheus.HistogramVec
	lockWaits   *prometheus.HistogramVec
	renewals    *prometheus.CounterVec
	renewFails  *prometheus.CounterVec
	lost        *prometheus.CounterVec
	recRuns     prometheus.Counter
	recViol     prometheus.Gauge
	recRepairs  prometheus.Counter
	oversold    *itemGauges

	toConfirm   *prometheus.HistogramVec
	queued      *itemGauges
	pendingEnts *itemGauges
	deadLetters *prometheus.CounterVec
	claimed     *prometheus.CounterVec
	cancelled   prometheus.Counter
	returned    prometheus.Counter
	refusals    *prometheus.CounterVec
	labels      prometheus.Labels // every series': the instance's name
}

// latency buckets from 0.5 ms to 10 s: loopback lock handoffs are sub-ms,
// a queue behind a hot lock can take seconds.
var buckets = prometheus.ExponentialBucketsRange(0.0005, 10, 16)

// New returns the collectors of one instance, registered with a fresh
// registry that also carries the Go runtime and process collectors.
func New(instance string) *Metrics {
	labels := prometheus.Labels{"instance_name": instance}
	f := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "seckill", Name: name, Help: help, ConstLabels: labels}
	}
	h := func(name, help string) prometheus.HistogramOpts {
		o := f(name, help)
		return prometheus.HistogramOpts{Namespace: o.Namespace, Name: o.Name, Help: o.Help, ConstLabels: o.ConstLabels, Buckets: buckets}
	}
	m := &Metrics{
		labels:      labels,
		reg:         prometheus.NewRegistry(),
		requests:    prometheus.NewHistogramVec(h("http_request_duration_seconds", "HTTP request latency by route and status."), []string{"method", "route", "status"}),
		inFlight:    prometheus.NewGaugeVec(prometheus.GaugeOpts(f("http_requests_in_flight", "Requests being served, by route.")), []string{"route"}),
		buys:        prometheus.NewCounterVec(prometheus.CounterOpts(f("buy_outcomes_total", "Buys and grabs by item kind, stage and outcome (created or the problem type).")), []string{"kind", "stage", "outcome"}),
		lockAcquire: prometheus.NewHistogramVec(h("lock_acquire_seconds", "Time to obtain a lock, including waiting, by backend and result."), []string{"backend", "result"}),
		lockWaits:   prometheus.NewHistogramVec(h("lock_wait_seconds", "Time spent waiting for a held lock."), []string{"backend"}),
		renewals:    prometheus.NewCounterVec(prometheus.CounterOpts(f("lock_renewals_total", "Watchdog renewals that succeeded.")), []string{"backend"}),
		renewFails:  prometheus.NewCounterVec(prometheus.CounterOpts(f("lock_renewal_failures_total", "Watchdog renewals that failed or found the lock gone.")), []string{"backend"}),
		lost:        prometheus.NewCounterVec(prometheus.CounterOpts(f("lock_lost_total", "Leases that ended without a clean release.")), []string{"backend"}),
		recRuns:     prometheus.NewCounter(prometheus.CounterOpts(f("reconcile_runs_total", "Reconcile runs performed by this instance."))),
		recViol:     prometheus.NewGauge(prometheus.GaugeOpts(f("reconcile_violations", "Items that failed conservation or had oversold units in this instance's last run."))),
		recRepairs:  prometheus.NewCounter(prometheus.CounterOpts(f("reconcile_repairs_total", "Redis copies repaired and stale reservations settled."))),
		oversold: newItemGauges("oversold_units", "Units sold beyond the initial stock, per item that has any, as of the last reconcile run that audited it (no series: none oversold); past "+strconv.Itoa(ItemSeriesMax)+" such items, the rest are summed under id=\"other\".",
			labels, 0, false),
	}
	m.toConfirm = prometheus.NewHistogramVec(h("stream_time_to_confirm_seconds", "redis-stream: time from a buy's 202 to its order's database write."), []string{"kind"})
	// No series for an item without a backlog: the writer reports an item
	// while it has one, and once with zeros when it no longer has.
	m.queued = newItemGauges("stream_lag_orders", "redis-stream: orders accepted and not yet written, per item with a backlog, as a writer on this instance last saw it (no series: none); an item's series goes once no writer reported it for "+ItemIdle.String()+", and past "+strconv.Itoa(ItemSeriesMax)+" items the rest are summed under id=\"other\".",
		labels, ItemIdle, false)
	m.pendingEnts = newItemGauges("stream_pending_entries", "redis-stream: stream entries delivered to a writer and not yet acknowledged, per item with a backlog (no series: none); an item's series goes once no writer reported it for "+ItemIdle.String()+", and past "+strconv.Itoa(ItemSeriesMax)+" items the rest are summed under id=\"other\".",
		labels, ItemIdle, false)
	m.deadLetters = prometheus.NewCounterVec(prometheus.CounterOpts(f("stream_dead_letters_total", "redis-stream: orders this instance's writer gave up on (their units went back), by reason.")), []string{"kind", "reason"})
	m.claimed = prometheus.NewCounterVec(prometheus.CounterOpts(f("stream_claimed_total", "redis-stream: entries this instance's writer took over from a writer that stopped acknowledging.")), []string{"kind"})
	m.cancelled = prometheus.NewCounter(prometheus.CounterOpts(f("orders_cancelled_total", "Orders cancelled unpaid by the payment-timeout runs of this instance.")))
	m.returned = prometheus.NewCounter(prometheus.CounterOpts(f("units_returned_total", "Units the payment-timeout runs of this instance returned to the database stock.")))
	m.refusals = prometheus.NewCounterVec(prometheus.CounterOpts(f("crowd_refusals_total", "Buyers the safe stages turned away, by item kind and reason: sold_out_remembered (from this instance's memory, no backend call), bounced (the per-item cap, 503 overloaded), sold_out_stage (the stage found it sold out), window_remembered and window_stage (outside the sale window, from memory or as the stage found on its reference clock).")), []string{"kind", "reason"})
	m.reg.MustRegister(m.refusals, m.requests, m.inFlight, m.buys, m.lockAcquire, m.lockWaits, m.renewals, m.renewFails, m.lost,
		m.recRuns, m.recViol, m.recRepairs, m.oversold,
		m.toConfirm, m.queued, m.pendingEnts, m.deadLetters, m.claimed, m.cancelled, m.returned,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if _, ok := rusageCPU(); ok {
		// The lab's CPU per answer reads it (loadtest/cpu): a baseline
		// of 10,000 answers costs an instance about a tenth of a second,
		// and process_cpu_seconds_total's 10 ms ticks blur that by a
		// tenth, where this counter does not.
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "seckill", Name: "process_cpu_rusage_seconds_total",
			Help: "CPU time (user and system) of this process, from getrusage: exact to the microsecond, where process_cpu_seconds_total counts 10 ms clock ticks."},
			func() float64 { v, _ := rusageCPU(); return v }))
	}
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// ObserveRequest records one HTTP request. route is the route pattern, not
// the raw path, so ids do not explode the label set.
func (m *Metrics) ObserveRequest(method, route string, status int, d time.Duration) {
	if route == "" {
		route = "unmatched"
	}
	m.requests.WithLabelValues(method, route, strconv.Itoa(status)).Observe(d.Seconds())
}

// InFlight adds delta to the requests in flight on route.
func (m *Metrics) InFlight(route string, delta int) {
	if route == "" {
		route = "unmatched"
	}
	m.inFlight.WithLabelValues(route).Add(float64(delta))
}

// Refused returns the crowd's refusal counter for one item kind
// (admission.CrowdOptions.Refused).
func (m *Metrics) Refused(kind string) func(reason string) {
	return func(reason string) { m.refusals.WithLabelValues(kind, reason).Inc() }
}

// CountFallbacks exports, for one item kind, how many redis-sharded buys
// found their home bucket short and visited another (count is
// redisstage.RedisSharded.Fallbacks).
func (m *Metrics) CountFallbacks(kind string, count func() int64) {
	labels := prometheus.Labels{"kind": kind}
	for k, v := range m.labels {
		labels[k] = v
	}
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "seckill", Name: "sharded_fallbacks_total",
		Help: "redis-sharded: buys that found their home bucket short and tried the other buckets.", ConstLabels: labels},
		func() float64 { return float64(count()) }))
}

// CountSweeps exports, for one item kind, the redis-sharded sweeps that
// moved units and the units they moved (redisstage.RedisSharded.Sweeps and
// UnitsMoved).
func (m *Metrics) CountSweeps(kind string, sweeps, units func() int64) {
	labels := prometheus.Labels{"kind": kind}
	for k, v := range m.labels {
		labels[k] = v
	}
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "seckill", Name: "sharded_sweeps_total",
		Help: "redis-sharded: sweeps that gathered an item's last units into one bucket.", ConstLabels: labels},
		func() float64 { return float64(sweeps()) }))
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "seckill", Name: "sharded_units_moved_total",
		Help: "redis-sharded: units the sweeps moved between buckets.", ConstLabels: labels},
		func() float64 { return float64(units()) }))
}

// ObserveBuy records the outcome of a buy or grab.
func (m *Metrics) ObserveBuy(kind, stage, outcome string) {
	m.buys.WithLabelValues(kind, stage, outcome).Inc()
}

// LockHooks returns hooks for a lock client; backend labels its series
// ("redis" or "redlock").
func (m *Metrics) LockHooks(backend string) lock.Hooks {
	return lock.Hooks{
		Obtained: func(_ string, d time.Duration, err error) {
			result := "obtained"
			switch {
			case errors.Is(err, lock.ErrNotObtained):
				result = "not_obtained"
			case err != nil:
				result = "error"
			}
			m.lockAcquire.WithLabelValues(backend, result).Observe(d.Seconds())
		},
		Waited:      func(_ string, d time.Duration, _ int) { m.lockWaits.WithLabelValues(backend).Observe(d.Seconds()) },
		Renewed:     func(string, time.Duration) { m.renewals.WithLabelValues(backend).Inc() },
		RenewFailed: func(string, error) { m.renewFails.WithLabelValues(backend).Inc() },
		Lost:        func(string, error) { m.lost.WithLabelValues(backend).Inc() },
	}
}

// ObserveReconcile records a reconcile run this instance performed. An
// item has an oversold_units series only while the last run that audited
// it found units oversold.
func (m *Metrics) ObserveReconcile(r reconcile.Result) {
	m.recRuns.Inc()
	m.recViol.Set(float64(r.Violations))
	m.recRepairs.Add(float64(r.Repairs))
	for _, it := range r.Items {
		m.oversold.set(it.Kind, it.ID, float64(it.Oversold))
	}
}

// WriterHooks returns the hooks of one kind's redis-stream order writer.
func (m *Metrics) WriterHooks(kind string) orderwriter.Hooks {
	return orderwriter.Hooks{
		Confirmed:    func(d time.Duration) { m.toConfirm.WithLabelValues(kind).Observe(d.Seconds()) },
		DeadLettered: func(reason string) { m.deadLetters.WithLabelValues(kind, reason).Inc() },
		Claimed:      func(n int) { m.claimed.WithLabelValues(kind).Add(float64(n)) },
		Backlog: func(id int64, queued, pending int) {
			m.queued.set(kind, id, float64(queued))
			m.pendingEnts.set(kind, id, float64(pending))
		},
	}
}

// DropIdle drops the per-item series of the items idle for ItemIdle
// (Collect does too, at every scrape): call it now and then, so that an
// instance nobody scrapes keeps no series of items it no longer serves.
func (m *Metrics) DropIdle() {
	m.queued.dropIdle()
	m.pendingEnts.dropIdle()
}

// ObserveExpiry records a payment-timeout run this instance performed.
func (m *Metrics) ObserveExpiry(r reconcile.ExpiryResult) {
	m.cancelled.Add(float64(r.Cancelled))
	m.returned.Add(float64(r.Units))
}
