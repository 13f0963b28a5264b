package metrics_test

import (
	"slices"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/metrics"
	"github.com/seckill-lab/seckill/internal/reconcile"
)

// TestItemSeriesAreBoundedAndGoWhenIdle: 10,000 items whose backlog a
// writer reported once make at most ItemSeriesMax labelled series and one
// "other" per kind, summing to the same total; an item reported again
// keeps its own series, and one reported with no backlog loses it at
// once; once no item has been reported for ItemIdle, DropIdle (on the
// injected clock) leaves no series at all.
func TestItemSeriesAreBoundedAndGoWhenIdle(t *testing.T) {
	m := metrics.New("i")
	now := time.Unix(1_000, 0)
	m.SetClock(func() time.Time { return now })
	backlog := m.WriterHooks("product").Backlog
	const items = 10_000
	for id := int64(1); id <= items; id++ {
		backlog(id, 1, 2)
	}
	for _, c := range []struct {
		name string
		sum  float64
	}{{"stream_lag_orders", items}, {"stream_pending_entries", 2 * items}} {
		n, sum, ids := m.Series(c.name)
		if n != metrics.ItemSeriesMax+1 || sum != c.sum || !slices.Contains(ids, metrics.OtherItems) {
			t.Fatalf("%s after %d items: %d series summing to %v (ids include other: %v), want %d summing to %v",
				c.name, items, n, sum, slices.Contains(ids, metrics.OtherItems), metrics.ItemSeriesMax+1, c.sum)
		}
	}
	now = now.Add(metrics.ItemIdle - time.Second)
	backlog(1, 3, 0) // item 1 reported again: it is not idle
	backlog(2, 0, 0) // item 2 has no backlog left: its series go now
	now = now.Add(time.Second)
	m.DropIdle()
	if n, sum, ids := m.Series("stream_lag_orders"); n != 1 || sum != 3 || ids[0] != "1" {
		t.Fatalf("an idle period after the reports: %d series (first %v) summing to %v, want only item 1's, at 3", n, ids[:min(n, 3)], sum)
	}
	if n, _, _ := m.Series("stream_pending_entries"); n != 0 {
		t.Fatalf("stream_pending_entries with no item pending: %d series, want 0", n)
	}
	now = now.Add(metrics.ItemIdle)
	m.DropIdle()
	for _, name := range []string{"stream_lag_orders", "stream_pending_entries"} {
		if n, _, _ := m.Series(name); n != 0 {
			t.Fatalf("%s once every item was idle: %d series, want 0", name, n)
		}
	}
}

// TestOversoldSeriesOnlyForItemsOversold: a reconcile run over 10,000
// items makes a series only for the one oversold, which goes when a run
// finds it no longer oversold; idleness never hides an oversold item.
func TestOversoldSeriesOnlyForItemsOversold(t *testing.T) {
	m := metrics.New("i")
	now := time.Unix(1_000, 0)
	m.SetClock(func() time.Time { return now })
	run := func(oversold int) {
		r := reconcile.Result{}
		for id := int64(1); id <= 10_000; id++ {
			it := reconcile.ItemResult{Kind: "product", ID: id}
			if id == 42 {
				it.Oversold = oversold
			}
			r.Items = append(r.Items, it)
		}
		m.ObserveReconcile(r)
	}
	run(3)
	now = now.Add(24 * time.Hour)
	m.DropIdle()
	if n, sum, ids := m.Series("oversold_units"); n != 1 || sum != 3 || ids[0] != "42" {
		t.Fatalf("after a run that found item 42 oversold by 3, a day later: %d series (first %v) summing to %v, want item 42's at 3", n, ids[:min(n, 3)], sum)
	}
	run(0)
	if n, _, _ := m.Series("oversold_units"); n != 0 {
		t.Fatalf("after a run that found nothing oversold: %d series, want 0", n)
	}
}
