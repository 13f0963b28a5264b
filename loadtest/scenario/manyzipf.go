package scenario

import (
	"math"
	"math/rand/v2"
	"sort"
)

// Zipf chooses one of n items by a Zipf law of exponent s: the item of
// rank k (0 is the hottest) with a weight of 1/(k+1)^s. At s = 1 over 200
// items the hottest draws about 17% of the buyers and the coldest about
// 0.09%: a few hot items and a long tail, as a shop's sales are. It draws
// from a seeded generator, so one seed gives one crowd. (math/rand's own
// Zipf needs s > 1.)
type Zipf struct {
	cdf []float64 // cdf[k] is the chance of a rank at most k
	rng *rand.Rand
}

// NewZipf is a Zipf chooser over n items (n ≥ 1) of exponent s (s ≥ 0;
// 0 is uniform), seeded with seed.
func NewZipf(n int, s float64, seed uint64) *Zipf {
	cdf := make([]float64, n)
	sum := 0.0
	for k := range n {
		sum += 1 / math.Pow(float64(k+1), s)
		cdf[k] = sum
	}
	for k := range cdf {
		cdf[k] /= sum
	}
	cdf[n-1] = 1 // no rounding leaves a draw past the last item
	return &Zipf{cdf: cdf, rng: rand.New(rand.NewPCG(seed, zipfStream))}
}

// zipfStream is the generator's second seed word: any constant, so that
// the seed alone names the crowd.
const zipfStream = 0x6d616e79 // "many"

// Next is the rank of the next buyer's item, 0 to n-1.
func (z *Zipf) Next() int {
	u := z.rng.Float64()
	return sort.SearchFloat64s(z.cdf, u) // the first rank whose cdf is ≥ u
}

// Picks draws the ranks of buyers buyers, in buyer order.
func (z *Zipf) Picks(buyers int) []int {
	out := make([]int, buyers)
	for i := range out {
		out[i] = z.Next()
	}
	return out
}
