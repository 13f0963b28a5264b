package report

import (
	"fmt"
	"slices"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/loadtest/cpu"
	"github.com/seckill-lab/seckill/loadtest/results"
)

// CPU per answer is read as a ratio: an attack's over a baseline's at the
// same buyers in flight, in the same round, since a round's baselines met
// the same machine as its attacks. With --repeat the ratio of every round is
// kept and the median of them is reported, never a ratio of medians taken
// in different rounds.

// CompareCPU sets, on each folded row and baseline, its CPU per answer
// over the http-ceiling's and the redis-round-trip's, round by round, and
// the median of those, for the whole machine and for the servers alone.
// rowRounds and ceilingRounds hold every round's rows and baselines, each
// round in the same order as rows and ceils.
func CompareCPU(rows []results.Row, rowRounds [][]results.Row, ceils []results.Ceiling, ceilingRounds [][]results.Ceiling) {
	for i := range rows {
		var perRound []cpu.Figures
		for _, round := range rowRounds {
			if i < len(round) {
				perRound = append(perRound, round[i].Figures)
			}
		}
		compareFigures(&rows[i].Figures, perRound, rows[i].Workers, ceilingRounds)
	}
	for i := range ceils {
		var perRound []cpu.Figures
		for _, round := range ceilingRounds {
			if i < len(round) {
				perRound = append(perRound, round[i].Figures)
			}
		}
		compareFigures(&ceils[i].Figures, perRound, ceils[i].Workers, ceilingRounds)
	}
}

func wholeCPU(c cpu.Figures) *float64   { return c.CPUPerAnswerMS }
func serversCPU(c cpu.Figures) *float64 { return c.ServersPerAnswerMS }

// compareFigures sets c's ratios from its figures in each round.
func compareFigures(c *cpu.Figures, perRound []cpu.Figures, workers int, ceilingRounds [][]results.Ceiling) {
	ratio := func(of func(cpu.Figures) *float64, baseline string) cpu.Ratio {
		xs := make([]*float64, len(perRound))
		for k, f := range perRound {
			xs[k] = of(f)
		}
		runs := ratios(xs, baselineCPU(ceilingRounds, baseline, workers, of))
		m := medianOf(runs)
		if m == nil {
			return cpu.Ratio{}
		}
		return cpu.Ratio{Median: m, Runs: runs}
	}
	c.CPUxHTTP, c.CPUxRedis = ratio(wholeCPU, results.BaselineHTTP), ratio(wholeCPU, results.BaselineRedis)
	c.ServersxHTTP, c.ServersxRedis = ratio(serversCPU, results.BaselineHTTP), ratio(serversCPU, results.BaselineRedis)
}

// baselineCPU is a CPU figure (of) of the named baseline at workers in
// every round, nil where it was not measured.
func baselineCPU(rounds [][]results.Ceiling, name string, workers int, of func(cpu.Figures) *float64) []*float64 {
	out := make([]*float64, len(rounds))
	for k, round := range rounds {
		for _, c := range round {
			if c.Name == name && c.Workers == workers {
				out[k] = of(c.Figures)
			}
		}
	}
	return out
}

// ratios divides xs by bases, element by element; nil where either is
// unknown or the base is not positive.
func ratios(xs, bases []*float64) []*float64 {
	out := make([]*float64, len(xs))
	for k, x := range xs {
		if x == nil || k >= len(bases) || bases[k] == nil || *bases[k] <= 0 {
			continue
		}
		v := *x / *bases[k]
		out[k] = &v
	}
	return out
}

// medianOf is the median of the known values, the lower middle one for an
// even count; nil when none is known.
func medianOf(xs []*float64) *float64 {
	var known []float64
	for _, x := range xs {
		if x != nil {
			known = append(known, *x)
		}
	}
	if len(known) == 0 {
		return nil
	}
	slices.Sort(known)
	m := known[(len(known)-1)/2]
	return &m
}

// cpuTarget is a goal for the CPU of one kind of answer, as a multiple of
// a baseline's CPU per answer in the same round. Throughput ratios move by
// a fifth from run to run on a shared machine; these are the targets a
// change to the buy path is held to instead. They are stated at
// cpuTargetWorkers in flight, as the median over the rounds (make lab-cpu:
// five).
type cpuTarget struct {
	What    string  `json:"what"`
	Against string  `json:"against"` // the baseline
	Limit   float64 `json:"limit"`   // at most this many times the baseline's CPU per answer
	// The answers measured: a baseline, or the rows of a scenario and
	// stage (the stage's whole burst, sales and sold-out answers alike).
	baseline        string
	scenario, stage string
}

// cpuTargetWorkers is the buyers in flight the targets are stated at.
const cpuTargetWorkers = 16

func cpuTargets(soldOutStage string) []cpuTarget {
	return []cpuTarget{
		{What: "keyed sold-out buy (" + soldOutStage + ")", Against: results.BaselineRedis, Limit: 1.2, baseline: results.BaselineSoldOutKeyed},
		{What: "keyless sold-out buy (" + soldOutStage + ")", Against: results.BaselineHTTP, Limit: 1.2, baseline: results.BaselineSoldOutNoKey},
		{What: "whole buy burst, redis-atomic", Against: results.BaselineHTTP, Limit: 2.0, scenario: "buy", stage: inventory.StageRedisAtomic},
	}
}

// cpuTargetResult is one target checked at one number of buyers in flight.
type cpuTargetResult struct {
	cpuTarget
	Workers int `json:"workers"`
	// Ratio is the machine's CPU per answer over the baseline's, the
	// figure the target is held to; Servers the same without the lab's
	// own CPU, for reading.
	Ratio   cpu.Ratio `json:"ratio"`
	Servers cpu.Ratio `json:"servers"`
	Met     *bool     `json:"met,omitempty"`  // nil when the ratio is unavailable
	Note    string    `json:"note,omitempty"` // why it is unavailable
}

// CheckCPUTargets checks every target whose answers were measured at
// cpuTargetWorkers in flight; a target whose answers were not measured
// there (the stage did not run, no --baselines, another level) is left out.
func CheckCPUTargets(rep Report, soldOutStage string) []cpuTargetResult {
	var out []cpuTargetResult
	for _, t := range cpuTargets(soldOutStage) {
		var subjects []cpu.Figures
		var workers []int
		if t.baseline != "" {
			for _, c := range rep.Ceilings {
				if c.Name == t.baseline && c.Workers == cpuTargetWorkers && c.CPU != nil {
					subjects, workers = append(subjects, c.Figures), append(workers, c.Workers)
				}
			}
		} else {
			for _, r := range rep.Rows {
				if r.Scenario == t.scenario && r.Stage == t.stage && r.Shape == "burst" && r.Workers == cpuTargetWorkers && r.Verdict != results.Skipped && r.CPU != nil {
					subjects, workers = append(subjects, r.Figures), append(workers, r.Workers)
				}
			}
		}
		for i, s := range subjects {
			res := cpuTargetResult{cpuTarget: t, Workers: workers[i], Ratio: s.CPUxHTTP, Servers: s.ServersxHTTP}
			if t.Against == results.BaselineRedis {
				res.Ratio, res.Servers = s.CPUxRedis, s.ServersxRedis
			}
			if res.Ratio.Median == nil {
				res.Note = fmt.Sprintf("unavailable: no round measured both its CPU and %s's", t.Against)
			} else {
				met := *res.Ratio.Median <= t.Limit
				res.Met = &met
			}
			out = append(out, res)
		}
	}
	return out
}
