package metrics

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Per-item gauges with a bounded label set. A catalogue of 100,000 items
// must not become 100,000 series per gauge: the scrape would grow with the
// catalogue, and so would this process's memory. So an item's series
// exists while the item has something to report, and goes once the item
// has been idle (no report for ItemIdle); and at most ItemSeriesMax items
// per gauge have a series of their own at once: the others are summed
// into one series per kind, id="other". An item keeps its own series for
// as long as it has one, so a graph of it never jumps to "other" and
// back.

const (
	// ItemSeriesMax is the most items one per-item gauge labels by id at
	// once.
	ItemSeriesMax = 500
	// ItemIdle is how long an item's series stays without a report.
	ItemIdle = time.Minute
	// OtherItems is the id of the series summing the items past
	// ItemSeriesMax.
	OtherItems = "other"
)

// itemGauges is one gauge per item (labels kind and id), a
// prometheus.Collector.
type itemGauges struct {
	desc *prometheus.Desc
	// idle is how long an item's value lasts without a report; 0: for
	// good (until the value is set to zero, see keepZero).
	idle time.Duration
	// keepZero says whether a zero is reported; without it, a zero drops
	// the item's series.
	keepZero bool
	max      int
	now      func() time.Time

	mu    sync.Mutex
	items map[itemKey]*itemValue
	own   int       // items with a series of their own
	swept time.Time // the last sweep of idle items
}

type itemKey struct {
	kind string
	id   int64
}

type itemValue struct {
	v    float64
	seen time.Time // the last report
	own  bool      // labelled by its id, not summed into "other"
}

func newItemGauges(name, help string, constLabels prometheus.Labels, idle time.Duration, keepZero bool) *itemGauges {
	return &itemGauges{
		desc: prometheus.NewDesc(prometheus.BuildFQName("seckill", "", name), help, []string{"kind", "id"}, constLabels),
		idle: idle, keepZero: keepZero, max: ItemSeriesMax, now: time.Now, items: map[itemKey]*itemValue{},
	}
}

// set reports item id's value now.
func (g *itemGauges) set(kind string, id int64, v float64) {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sweep(now, false)
	k := itemKey{kind, id}
	it, ok := g.items[k]
	switch {
	case !ok && v == 0 && !g.keepZero:
		return
	case !ok:
		it = &itemValue{own: g.own < g.max}
		if it.own {
			g.own++
		}
		g.items[k] = it
	case v == 0 && !g.keepZero:
		g.remove(k, it)
		return
	}
	it.v, it.seen = v, now
}

// remove drops item k's series; g.mu is held.
func (g *itemGauges) remove(k itemKey, it *itemValue) {
	if it.own {
		g.own--
	}
	delete(g.items, k)
}

// sweep drops the items not reported for idle, at most once every idle
// eighth unless forced; g.mu is held.
func (g *itemGauges) sweep(now time.Time, force bool) {
	if g.idle <= 0 || (!force && now.Sub(g.swept) < g.idle/8) {
		return
	}
	g.swept = now
	for k, it := range g.items {
		if now.Sub(it.seen) >= g.idle {
			g.remove(k, it)
		}
	}
}

// dropIdle drops every item not reported for idle.
func (g *itemGauges) dropIdle() {
	now := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sweep(now, true)
}

func (g *itemGauges) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

// Collect sends each item's own series, and per kind the sum of the others.
func (g *itemGauges) Collect(ch chan<- prometheus.Metric) {
	now := g.now()
	g.mu.Lock()
	g.sweep(now, true)
	others := map[string]float64{}
	var ms []prometheus.Metric
	for k, it := range g.items {
		if !it.own {
			others[k.kind] += it.v
			continue
		}
		ms = append(ms, prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, it.v, k.kind, strconv.FormatInt(k.id, 10)))
	}
	g.mu.Unlock()
	for kind, v := range others {
		ms = append(ms, prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, kind, OtherItems))
	}
	for _, m := range ms {
		ch <- m
	}
}
