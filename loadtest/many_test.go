package main

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/seckill-lab/seckill/loadtest/results"
	"github.com/seckill-lab/seckill/loadtest/verdict"
)

// manyArgs are the many scenario's small numbers: 20 products of 5
// units, 500 buyers.
var manyArgs = []string{"--many-products", "20", "--many-stock", "5", "--many-buyers", "500"}

// TestLabMany runs the many scenario against the demo: the lab creates
// its products through the admin API, opens them with sessions, and
// judges every product. A safe stage sells each product exactly
// min(stock, its buyers); unlocked oversells and is expected to.
func TestLabMany(t *testing.T) {
	if testing.Short() {
		t.Skip("builds seckill and runs the lab against its instances; left out of -short")
	}
	demo := startDemo(t)

	t.Run("alone: many-vs-buy is skipped, and says so", func(t *testing.T) {
		rep, err := runShort(t, demo, demo.instances, append([]string{"--scenarios", "many", "--stages", "redis-atomic,unlocked"}, manyArgs...)...)
		if err != nil {
			t.Fatalf("the lab failed: %v", err)
		}
		r, ok := findRow(rep, "many", "redis-atomic")
		if !ok || r.Verdict != results.Pass || r.Many == nil {
			t.Fatalf("many/redis-atomic: %+v, want a pass with its products", r)
		}
		assertExactPerProduct(t, r)
		if r.Many.BuyThroughput != nil || !strings.Contains(r.Note, verdict.RuleManyVsBuy+" skipped: no buy row of redis-atomic") {
			t.Errorf("many/redis-atomic without a buy row: note %q, want the rule named as skipped", r.Note)
		}
		u, _ := findRow(rep, "many", "unlocked")
		if !u.ExpectOversell || u.Oversold == 0 || u.Verdict != results.Pass {
			t.Errorf("many/unlocked: expected=%v oversold=%d verdict %s, want an expected oversell: %s", u.ExpectOversell, u.Oversold, u.Verdict, u.Note)
		}
	})

	t.Run("beside buy: compared with buy's answered/s", func(t *testing.T) {
		rep, err := runShort(t, demo, demo.instances, append([]string{"--scenarios", "buy,many", "--stages", "redis-atomic"}, manyArgs...)...)
		if err != nil && !errors.Is(err, errVerdict) {
			t.Fatalf("the lab failed: %v", err)
		}
		buy, _ := findRow(rep, "buy", "redis-atomic")
		r, _ := findRow(rep, "many", "redis-atomic")
		if r.Many == nil || r.Many.BuyThroughput == nil || *r.Many.BuyThroughput != buy.Throughput {
			t.Fatalf("many/redis-atomic: compared with %v, want the buy row's %.1f/s", r.Many, buy.Throughput)
		}
		assertExactPerProduct(t, r)
		// The ratio is the machine's to decide; the verdict must follow it.
		slow := r.Throughput < verdict.ManyMinShare*buy.Throughput
		if slow != slices.Contains(r.Broken, verdict.RuleManyVsBuy) || (!slow && r.Verdict != results.Pass) || len(r.Broken) > 1 {
			t.Errorf("many %.0f/s beside buy %.0f/s: verdict %s %v: %s", r.Throughput, buy.Throughput, r.Verdict, r.Broken, r.Note)
		}
	})
}

// assertExactPerProduct checks a safe many row product by product: the
// 20 products, 500 buyers between them, each sold min(stock, buyers).
func assertExactPerProduct(t *testing.T, r results.Row) {
	t.Helper()
	m := r.Many
	if len(m.Items) != 20 || m.Buyers != 500 || m.Seed != 1 {
		t.Fatalf("many row of %d products, %d buyers, seed %d; want 20, 500, 1", len(m.Items), m.Buyers, m.Seed)
	}
	buyers := 0
	for _, it := range m.Items {
		buyers += it.Buyers
		if it.Sold != it.Want() || it.Oversold != 0 || !it.Conserved || it.RefusedWithStock != 0 {
			t.Errorf("product %d: %+v, want %d sold exactly", it.ID, it, it.Want())
		}
	}
	if buyers != 500 || m.Items[0].Buyers <= m.Items[19].Buyers {
		t.Errorf("%d buyers over the products, hottest %d, coldest %d", buyers, m.Items[0].Buyers, m.Items[19].Buyers)
	}
}
