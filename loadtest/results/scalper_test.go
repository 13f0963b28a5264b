package results

import (
	"math"
	"testing"
)

// TestBinomialTail checks the scalper verdict's tail against values worked
// by hand: P(X ≥ k) over n draws of chance p.
func TestBinomialTail(t *testing.T) {
	for _, c := range []struct {
		n, k int
		p    float64
		want float64
	}{
		{10, 0, 0.3, 1},
		{10, 11, 0.3, 0},
		{2, 1, 0.5, 0.75},        // 1 - 1/4
		{3, 3, 0.5, 0.125},       // 1/8
		{4, 2, 0.25, 0.26171875}, // 1 - (81 + 108)/256
		{100, 10, 0, 0},
		{100, 10, 1, 1},
	} {
		if got := BinomialTail(c.n, c.k, c.p); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("P(X ≥ %d | n=%d, p=%v) = %v, want %v", c.k, c.n, c.p, got, c.want)
		}
	}
}
