package report

import (
	"fmt"
	"math"

	"github.com/seckill-lab/seckill/loadtest/results"
)

// The capacity model of a sweep: the universal scalability law (Gunther),
//
//	X(N) = λN / (1 + σ(N−1) + κN(N−1)),
//
// fitted to one stage's answered/s X at each number N of buyers in
// flight. λ is what one buyer in flight gets answered per second with
// nothing else running, σ the share of the work that waits in line
// (contention: a lock, a row, a core), κ the cost of keeping the parts
// in step (coherency: each buyer more slows every other). With κ > 0, X
// peaks at N* = √((1−σ)/κ) and falls past it. Little's law ties it to
// latency: N = X·R, so past the peak every buyer more only waits.
//
// The fit is least squares on N/X = (1 + σ(N−1) + κN(N−1))/λ, linear in
// 1/λ, σ/λ and κ/λ, each point weighted by 1/(N/X)² so that every level
// counts by its relative error. A negative σ or κ (noise) is pinned to 0
// and the rest fitted again. Each level is also predicted by a fit of
// the other levels alone: the model's check on a level it did not see.

// uslFit is the model of one stage of one scenario of a sweep.
type uslFit struct {
	Scenario string  `json:"scenario"`
	Stage    string  `json:"stage"`
	Lambda   float64 `json:"lambda"` // answered/s per buyer in flight, alone
	Sigma    float64 `json:"sigma"`  // contention
	Kappa    float64 `json:"kappa"`  // coherency
	// PeakAt is N*, the buyers in flight of the most answered/s, and Peak
	// that rate; PeakAt is 0 when κ is 0 (no peak: X tends to λ/σ).
	PeakAt float64    `json:"peak_at"`
	Peak   float64    `json:"peak"`
	Points []uslPoint `json:"points"`
}

// uslPoint is one level: measured, the fit of every level, and the
// prediction of a fit that left this level out, with its error.
type uslPoint struct {
	N          int      `json:"n"`
	Measured   float64  `json:"measured"`
	Fitted     float64  `json:"fitted"`
	LeftOut    *float64 `json:"left_out,omitempty"`     // nil: too few other levels to fit
	LeftOutErr *float64 `json:"left_out_err,omitempty"` // (prediction − measured) / measured
}

// uslParams are λ, σ, κ.
type uslParams struct{ lambda, sigma, kappa float64 }

func (p uslParams) at(n float64) float64 {
	return p.lambda * n / (1 + p.sigma*(n-1) + p.kappa*n*(n-1))
}

// fitUSL fits the law to the points (n[i], x[i]); it needs three points
// with x > 0 and reports false otherwise.
func fitUSL(n, x []float64) (uslParams, bool) {
	type pt struct{ n, y, w float64 }
	var pts []pt
	for i := range n {
		if x[i] > 0 && n[i] >= 1 {
			y := n[i] / x[i]
			pts = append(pts, pt{n[i], y, 1 / (y * y)})
		}
	}
	if len(pts) < 3 {
		return uslParams{}, false
	}
	// Columns of the design: 1, N−1, N(N−1); free says which are fitted.
	cols := []func(float64) float64{
		func(float64) float64 { return 1 },
		func(n float64) float64 { return n - 1 },
		func(n float64) float64 { return n * (n - 1) },
	}
	free := []bool{true, true, true}
	for range 3 {
		var idx []int
		for j, f := range free {
			if f {
				idx = append(idx, j)
			}
		}
		// Normal equations of the weighted least squares.
		k := len(idx)
		a := make([][]float64, k)
		b := make([]float64, k)
		for r := range k {
			a[r] = make([]float64, k)
			for _, p := range pts {
				b[r] += p.w * cols[idx[r]](p.n) * p.y
				for c := range k {
					a[r][c] += p.w * cols[idx[r]](p.n) * cols[idx[c]](p.n)
				}
			}
		}
		sol, ok := solve(a, b)
		if !ok {
			return uslParams{}, false
		}
		coef := make([]float64, 3)
		for r, j := range idx {
			coef[j] = sol[r]
		}
		if coef[0] <= 0 {
			return uslParams{}, false
		}
		// Pin the first negative of σ, κ (κ first: it is the smaller) and
		// fit again.
		switch {
		case coef[2] < 0 && free[2]:
			free[2] = false
		case coef[1] < 0 && free[1]:
			free[1] = false
		default:
			return uslParams{lambda: 1 / coef[0], sigma: coef[1] / coef[0], kappa: coef[2] / coef[0]}, true
		}
	}
	return uslParams{}, false
}

// solve solves a·x = b by Gaussian elimination with partial pivoting.
func solve(a [][]float64, b []float64) ([]float64, bool) {
	n := len(b)
	for col := range n {
		pivot := col
		for r := col + 1; r < n; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[pivot][col]) {
				pivot = r
			}
		}
		if math.Abs(a[pivot][col]) < 1e-300 {
			return nil, false
		}
		a[col], a[pivot] = a[pivot], a[col]
		b[col], b[pivot] = b[pivot], b[col]
		for r := col + 1; r < n; r++ {
			f := a[r][col] / a[col][col]
			for c := col; c < n; c++ {
				a[r][c] -= f * a[col][c]
			}
			b[r] -= f * b[col]
		}
	}
	x := make([]float64, n)
	for r := n - 1; r >= 0; r-- {
		s := b[r]
		for c := r + 1; c < n; c++ {
			s -= a[r][c] * x[c]
		}
		x[r] = s / a[r][r]
	}
	return x, true
}

// modelStage fits the law to one stage's sweep series; ok is false with
// fewer than three levels that ran.
func modelStage(sc, stage string, series []results.Row) (uslFit, bool) {
	var ns, xs []float64
	var levels []int
	for _, r := range series {
		if r.Verdict != results.Skipped && r.Requests > 0 && r.Throughput > 0 {
			ns, xs, levels = append(ns, float64(r.Workers)), append(xs, r.Throughput), append(levels, r.Workers)
		}
	}
	p, ok := fitUSL(ns, xs)
	if !ok {
		return uslFit{}, false
	}
	f := uslFit{Scenario: sc, Stage: stage, Lambda: p.lambda, Sigma: p.sigma, Kappa: p.kappa}
	if p.kappa > 0 && p.sigma < 1 {
		f.PeakAt = math.Sqrt((1 - p.sigma) / p.kappa)
		f.Peak = p.at(f.PeakAt)
	}
	for i := range ns {
		pt := uslPoint{N: levels[i], Measured: xs[i], Fitted: p.at(ns[i])}
		others := func(v []float64) []float64 { return append(append([]float64{}, v[:i]...), v[i+1:]...) }
		if q, ok := fitUSL(others(ns), others(xs)); ok {
			pred := q.at(ns[i])
			e := (pred - xs[i]) / xs[i]
			pt.LeftOut, pt.LeftOutErr = &pred, &e
		}
		f.Points = append(f.Points, pt)
	}
	return f, true
}

// ModelSweep fits every stage of every scenario of a sweep.
func ModelSweep(rep Report) []uslFit {
	if len(rep.Settings.Sweep) < 3 {
		return nil
	}
	var out []uslFit
	for _, sc := range rep.scenarios() {
		series := rep.sweepSeries(sc)
		for _, stage := range stagesOf(rep.Rows) {
			if f, ok := modelStage(sc, stage, series[stage]); ok {
				out = append(out, f)
			}
		}
	}
	return out
}

// text sums a fit up in a line.
func (f uslFit) text() string {
	s := fmt.Sprintf("λ %.1f answered/s per buyer in flight, σ %.4f, κ %.6f", f.Lambda, f.Sigma, f.Kappa)
	if f.PeakAt > 0 {
		s += fmt.Sprintf("; peak %.0f/s at %.0f in flight", f.Peak, f.PeakAt)
	} else if f.Sigma > 0 {
		s += fmt.Sprintf("; no peak: tends to %.0f/s", f.Lambda/f.Sigma)
	}
	worst := 0.0
	for _, p := range f.Points {
		if p.LeftOutErr != nil {
			worst = max(worst, math.Abs(*p.LeftOutErr))
		}
	}
	return s + fmt.Sprintf("; each level predicted by the others within %.0f%%", 100*worst)
}

// uslTable is the model's table: a line per stage and level.
func uslTable(fits []uslFit, sc string) (head []string, lines [][]string) {
	head = []string{"stage", "in flight", "answered/s", "fit", "fit without this level", "error"}
	for _, f := range fits {
		if f.Scenario != sc {
			continue
		}
		for _, p := range f.Points {
			pred, e := "–", "–"
			if p.LeftOut != nil {
				pred, e = fmt.Sprintf("%.0f", *p.LeftOut), fmt.Sprintf("%+.0f%%", 100**p.LeftOutErr)
			}
			lines = append(lines, []string{f.Stage, itoa(p.N), fmt.Sprintf("%.0f", p.Measured), fmt.Sprintf("%.0f", p.Fitted), pred, e})
		}
	}
	return head, lines
}
