package main

import (
	"fmt"
	"math"
)

// The acceptance bounds of issue 60, per instance, idle and 20 s after
// the bursts alike.
const (
	maxReadySeconds         = 5.0  // from start to /readyz 200
	maxRedisCmdsPerInstance = 20.0 // Redis commands/s, the total split over the instances
	maxCPUMsPerS            = 10.0 // instance CPU, ms per s
	maxRSSMB                = 128.0
)

// verdict is one bound at one catalogue size.
type verdict struct {
	Items int    `json:"items"`
	Bound string `json:"bound"`
	Pass  bool   `json:"pass"`
	Worst string `json:"worst"` // the worst figure seen, or why there is none
}

func (v verdict) line() string {
	word := "FAIL"
	if v.Pass {
		word = "PASS"
	}
	return fmt.Sprintf("%s %d items: %s (worst: %s)", word, v.Items, v.Bound, v.Worst)
}

// verdicts holds every size's rows and bursts to the bounds.
func verdicts(o options, runs []sizeRun) []verdict {
	var out []verdict
	for _, r := range runs {
		out = append(out, sizeVerdicts(o, r)...)
	}
	return out
}

// sizeVerdicts holds one size to the bounds: the worst row decides.
func sizeVerdicts(o options, r sizeRun) []verdict {
	ready, cpu, rss, cmds := math.Inf(-1), math.Inf(-1), math.Inf(-1), math.Inf(-1)
	allReady, windows, redis := true, 0, false
	phases := map[string]bool{}
	for _, p := range r.Points {
		ready = math.Max(ready, p.ReadySeconds)
		allReady = allReady && p.Ready && p.Exited == ""
		if p.Phase == "" {
			continue // no window
		}
		windows++
		phases[p.Phase] = true
		cpu, rss = math.Max(cpu, p.Idle.CPUMsPerS), math.Max(rss, p.Idle.RSSMB)
		if p.Idle.RedisCmdsPerInstance != nil {
			redis, cmds = true, math.Max(cmds, *p.Idle.RedisCmdsPerInstance)
		}
	}
	v := func(bound string, pass bool, worst string) verdict {
		return verdict{Items: r.Items, Bound: bound, Pass: pass, Worst: worst}
	}
	readyWorst := fmt.Sprintf("%.2f s", ready)
	if !allReady {
		readyWorst = "an instance did not get ready: " + readyWorst
	}
	out := []verdict{v(fmt.Sprintf("ready within %.0f s", maxReadySeconds), allReady && ready <= maxReadySeconds, readyWorst)}
	wantPhases := 1
	if o.bursts > 0 {
		wantPhases = 2
	}
	measured := windows > 0 && len(phases) == wantPhases
	window := func(bound string, worst float64, limit float64, unit string) verdict {
		if !measured {
			return v(bound, false, fmt.Sprintf("%d of %d idle windows measured", len(phases), wantPhases))
		}
		return v(bound, worst <= limit, fmt.Sprintf("%.1f %s", worst, unit))
	}
	out = append(out, window(fmt.Sprintf("CPU at most %.0f ms/s per instance", maxCPUMsPerS), cpu, maxCPUMsPerS, "ms/s"),
		window(fmt.Sprintf("RSS at most %.0f MB per instance", maxRSSMB), rss, maxRSSMB, "MB"))
	if redis || (measured && o.fleet == "serve") {
		out = append(out, window(fmt.Sprintf("Redis at most %.0f commands/s per instance (total / %d)", maxRedisCmdsPerInstance, o.instances), cmds, maxRedisCmdsPerInstance, "commands/s"))
	}
	if o.bursts > 0 {
		out = append(out, exactVerdict(o, r))
	}
	return out
}

// exactVerdict: every drawn product sold exactly.
func exactVerdict(o options, r sizeRun) verdict {
	want := min(o.bursts, r.Items)
	exact, oversold, unavailable := 0, 0, 0
	for _, b := range r.Bursts {
		if b.Exact {
			exact++
		}
		oversold += b.Oversold
		unavailable += b.Answers.Unavailable
	}
	return verdict{Items: r.Items, Bound: fmt.Sprintf("every burst product sells exactly (%d products)", want),
		Pass:  exact == want && len(r.Bursts) == want && oversold == 0,
		Worst: fmt.Sprintf("%d of %d exact, %d oversold, %d answered 503", exact, want, oversold, unavailable)}
}
