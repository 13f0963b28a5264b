package report

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/seckill-lab/seckill/loadtest/results"
)

// A machine that also runs other work (two cores shared by the load, the
// instances, Redis and MySQL) gives one attack a different answered/s from
// one run to the next, often by a third. One run then cannot tell a 0.4×
// ratio from a 0.3× one. --repeat N runs the whole lab N times over, round
// after round, so that every attack and every baseline is measured N times
// spread over the whole run, and the report keeps, per attack, its median
// run: a real run, whose counts agree with each other, not an average of
// several. Safety is judged on every run: an attack whose runs did not all
// pass shows its first failed run instead.

// MedianRows folds the rows of every round (each in the same order) into
// one row per attack. ceilings are the baselines of each round, when
// measured, for each run's ratio to its own round's HTTP ceiling.
func MedianRows(rounds [][]results.Row, ceilings [][]results.Ceiling) []results.Row {
	if len(rounds) == 0 {
		return nil
	}
	if len(rounds) == 1 {
		return rounds[0]
	}
	out := make([]results.Row, len(rounds[0]))
	for i := range rounds[0] {
		runs := make([]results.Row, len(rounds))
		for k := range rounds {
			runs[k] = rounds[k][i]
		}
		r := pickRun(runs)
		r.Runs, r.RunsPerCeiling = nil, nil
		for k, run := range runs {
			r.Runs = append(r.Runs, run.Throughput)
			if c, ok := ceilingOf(ceilings, k, results.BaselineHTTP, run.Workers); ok && c > 0 {
				r.RunsPerCeiling = append(r.RunsPerCeiling, run.Throughput/c)
			}
		}
		if len(r.RunsPerCeiling) != len(runs) {
			r.RunsPerCeiling = nil
		}
		out[i] = r
	}
	return out
}

// pickRun is the row that stands for an attack's runs: the first failed
// run, with a note saying which it was, or else the run of median
// answered/s (the lower of the two middle ones for an even count).
func pickRun(runs []results.Row) results.Row {
	for k, r := range runs {
		if r.Verdict == results.Fail {
			r.Note = fmt.Sprintf("run %d of %d: %s", k+1, len(runs), r.Note)
			return r
		}
	}
	order := make([]int, len(runs))
	for k := range order {
		order[k] = k
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(runs[a].Throughput, runs[b].Throughput) })
	return runs[order[(len(order)-1)/2]]
}

// MedianCeilings folds the baselines of every round into one per baseline
// and level: the round of median per-second figure, with every round's
// figure in Runs.
func MedianCeilings(rounds [][]results.Ceiling) []results.Ceiling {
	if len(rounds) == 0 {
		return nil
	}
	if len(rounds) == 1 {
		return rounds[0]
	}
	out := make([]results.Ceiling, len(rounds[0]))
	for i := range rounds[0] {
		runs := make([]results.Ceiling, len(rounds))
		for k := range rounds {
			runs[k] = rounds[k][i]
		}
		sorted := slices.Clone(runs)
		slices.SortStableFunc(sorted, func(a, b results.Ceiling) int { return cmp.Compare(a.PerSecond, b.PerSecond) })
		c := sorted[(len(sorted)-1)/2]
		c.Runs = nil
		for _, run := range runs {
			c.Runs = append(c.Runs, run.PerSecond)
		}
		out[i] = c
	}
	return out
}

// ceilingOf is the per-second figure of the named baseline at workers in
// round k.
func ceilingOf(rounds [][]results.Ceiling, k int, name string, workers int) (float64, bool) {
	if k >= len(rounds) {
		return 0, false
	}
	for _, c := range rounds[k] {
		if c.Name == name && c.Workers == workers {
			return c.PerSecond, true
		}
	}
	return 0, false
}
