package report

import (
	"math"
	"testing"

	"github.com/seckill-lab/seckill/loadtest/results"
)

// TestFitUSLRecoversTheLaw: points made by the law itself, with a known
// λ, σ and κ, give them back; points of a law with no coherency cost
// (κ 0) and a little noise that would make κ negative give κ pinned at 0;
// fewer than three points give no fit.
func TestFitUSLRecoversTheLaw(t *testing.T) {
	want := uslParams{lambda: 120, sigma: 0.05, kappa: 0.0002}
	ns := []float64{1, 4, 16, 64, 256, 1024}
	var xs []float64
	for _, n := range ns {
		xs = append(xs, want.at(n))
	}
	got, ok := fitUSL(ns, xs)
	if !ok || math.Abs(got.lambda-want.lambda)/want.lambda > 1e-6 || math.Abs(got.sigma-want.sigma) > 1e-6 || math.Abs(got.kappa-want.kappa) > 1e-9 {
		t.Fatalf("fit %+v (%v), want %+v", got, ok, want)
	}

	flat := uslParams{lambda: 100, sigma: 0.1}
	xs = xs[:0]
	for i, n := range ns {
		x := flat.at(n)
		if i == len(ns)-1 {
			x *= 1.02 // the largest level a little above the law: κ would come out negative
		}
		xs = append(xs, x)
	}
	got, ok = fitUSL(ns, xs)
	if !ok || got.kappa != 0 || got.sigma <= 0 || math.Abs(got.lambda-100)/100 > 0.05 {
		t.Fatalf("fit %+v (%v), want κ pinned at 0, σ above 0, λ near 100", got, ok)
	}

	if _, ok := fitUSL([]float64{16, 64}, []float64{1000, 2000}); ok {
		t.Fatal("two points gave a fit")
	}
}

// TestModelStageLeavesEachLevelOut: the model of a sweep series predicts
// each level from the others; with points on the law, every prediction
// is exact, the peak is where the law puts it, and a level whose
// measurement is 30% off shows a 30%-sized error when left out while the
// others stay close.
func TestModelStageLeavesEachLevelOut(t *testing.T) {
	law := uslParams{lambda: 200, sigma: 0.02, kappa: 0.00005}
	var series []results.Row
	for _, n := range []int{16, 32, 64, 128, 256, 512, 1024} {
		series = append(series, results.Row{Workers: n, Requests: 2000, Throughput: law.at(float64(n)), Verdict: results.Pass})
	}
	f, ok := modelStage("buy", "redis-sharded", series)
	if !ok || len(f.Points) != 7 {
		t.Fatalf("model %+v (%v)", f, ok)
	}
	if peak := math.Sqrt((1 - law.sigma) / law.kappa); math.Abs(f.PeakAt-peak) > 1e-3*peak {
		t.Errorf("peak at %.1f, want %.1f", f.PeakAt, peak)
	}
	for _, p := range f.Points {
		if p.LeftOutErr == nil || math.Abs(*p.LeftOutErr) > 1e-6 {
			t.Errorf("level %d left out: %v, want an exact prediction", p.N, p.LeftOutErr)
		}
	}

	series[3].Throughput *= 1.3 // 128 in flight measured 30% high
	f, _ = modelStage("buy", "redis-sharded", series)
	for _, p := range f.Points {
		e := math.Abs(*p.LeftOutErr)
		if p.N == 128 && (e < 0.2 || e > 0.3) {
			t.Errorf("the level measured 30%% high, left out: error %.2f, want about 0.23 (1/1.3 − 1)", e)
		}
	}
}
