package scenario

import (
	"slices"
	"testing"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// TestZipfShape draws the many scenario's crowd (20,000 buyers over 200
// products, s = 1) and checks its shape: the hottest product draws the
// most buyers, about its law's share; counts fall with the rank; every
// product is reachable.
func TestZipfShape(t *testing.T) {
	const products, buyers = 200, 20_000
	counts := make([]int, products)
	for _, rank := range NewZipf(products, ManyZipfS, 1).Picks(buyers) {
		counts[rank]++
	}
	if hot := slices.Max(counts); counts[0] != hot {
		t.Errorf("the hottest product drew %d buyers, but another drew %d", counts[0], hot)
	}
	// Rank 1's share is 1/H(200) = 17.0%: 3,403 of 20,000.
	if counts[0] < 3000 || counts[0] > 3800 {
		t.Errorf("the hottest product drew %d buyers, want about 3,403", counts[0])
	}
	if counts[0] <= counts[1] || counts[1] <= counts[9] || counts[9] <= counts[99] {
		t.Errorf("counts do not fall with the rank: #1 %d, #2 %d, #10 %d, #100 %d", counts[0], counts[1], counts[9], counts[99])
	}
	for k, n := range counts {
		if n == 0 {
			t.Errorf("product of rank %d drew no buyer: every product must be reachable", k+1)
		}
	}
}

// TestZipfIsDeterministicWithASeed: one seed, one crowd; another seed,
// another crowd.
func TestZipfIsDeterministicWithASeed(t *testing.T) {
	a := NewZipf(50, ManyZipfS, 42).Picks(1000)
	b := NewZipf(50, ManyZipfS, 42).Picks(1000)
	c := NewZipf(50, ManyZipfS, 43).Picks(1000)
	if !slices.Equal(a, b) {
		t.Error("two choosers of seed 42 drew different crowds")
	}
	if slices.Equal(a, c) {
		t.Error("seeds 42 and 43 drew the same crowd")
	}
}

// TestZipfEdges: one item is always chosen; s = 0 is uniform enough that
// every item of a small catalogue is drawn.
func TestZipfEdges(t *testing.T) {
	for _, r := range NewZipf(1, ManyZipfS, 1).Picks(100) {
		if r != 0 {
			t.Fatalf("one item: drew rank %d", r)
		}
	}
	counts := make([]int, 5)
	for _, r := range NewZipf(5, 0, 1).Picks(500) {
		counts[r]++
	}
	for k, n := range counts {
		if n < 60 {
			t.Errorf("uniform law: rank %d drew %d of 500", k, n)
		}
	}
}

// TestProductOfReadsTheBuyURL: the per-product tally reads each answer's
// product from its URL.
func TestProductOfReadsTheBuyURL(t *testing.T) {
	p := Plan{Scenario: Buy(), Targets: []string{"http://a", "http://b"}, pick: func(b uint64) int64 { return ManyFirstID + int64(b) }}
	for buyer := range uint64(3) {
		var tg vegeta.Target
		p.target(&tg, buyer, 0)
		if id, ok := productOf(tg.URL); !ok || id != ManyFirstID+int64(buyer) {
			t.Errorf("buyer %d: %s read as %d, %v", buyer, tg.URL, id, ok)
		}
	}
	if _, ok := productOf("http://a/api/v1/coupons/1/grab"); ok {
		t.Error("a grab's URL read as a product")
	}
}
