package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/seckill-lab/seckill/loadtest/report"
)

// point is one instance's measurement at one catalogue size, in one
// idle phase (idle, or after bursts).
type point struct {
	Items        int     `json:"items"`
	Fleet        string  `json:"fleet"`
	Label        string  `json:"label,omitempty"`
	Stage        string  `json:"stage"`
	Phase        string  `json:"phase,omitempty"` // empty: no window (the instance exited)
	Instance     string  `json:"instance"`
	Instances    int     `json:"instances"` // sharing the Redis
	FillSeconds  float64 `json:"fill_seconds"`
	ReadySeconds float64 `json:"ready_seconds"`
	Ready        bool    `json:"ready"` // false: not ready within -ready-timeout (ReadySeconds); the window ran anyway, unless it exited
	// Exited is the error the instance ended with before the window, if it did.
	Exited string `json:"exited,omitempty"`
	Idle   idle   `json:"idle"`
}

// topShown is how many commands a row of the table names.
const topShown = 3

// readyCell says how long start-up took, or that it had not ended.
func (p point) readyCell() string {
	if p.Exited != "" {
		return fmt.Sprintf("exited after %.0f s: %s", p.ReadySeconds, p.Exited)
	}
	if !p.Ready {
		return fmt.Sprintf("not ready after %.0f s", p.ReadySeconds)
	}
	return fmt.Sprintf("%.2f s", p.ReadySeconds)
}

// row is p's line of the markdown table.
func (p point) row() string {
	if p.Exited != "" {
		return fmt.Sprintf("| %d | %s | %s | %.1f s | %s | no window | | | | | |", p.Items, p.Instance, p.Phase, p.FillSeconds, p.readyCell())
	}
	cmds, each, rcpu, top := "n/a (embedded)", "n/a", "n/a (embedded)", "n/a"
	if p.Idle.RedisCmdsPerS != nil {
		cmds, rcpu = fmt.Sprintf("%.0f", *p.Idle.RedisCmdsPerS), fmt.Sprintf("%.0f", *p.Idle.RedisCPUMsPerS)
		if p.Idle.RedisCmdsPerInstance != nil {
			each = fmt.Sprintf("%.1f", *p.Idle.RedisCmdsPerInstance)
		}
		var names []string
		for i, c := range p.Idle.Top {
			if i == topShown {
				break
			}
			names = append(names, fmt.Sprintf("%s %d", strings.ToUpper(c.Command), c.Calls))
		}
		top = strings.Join(names, ", ")
		if top == "" {
			top = "none"
		}
	}
	return fmt.Sprintf("| %d | %s | %s | %.1f s | %s | %.0f | %.0f | %s | %s | %s | %s |",
		p.Items, p.Instance, p.Phase, p.FillSeconds, p.readyCell(), p.Idle.CPUMsPerS, p.Idle.RSSMB, cmds, each, rcpu, top)
}

// summary is p in one line, for the terminal.
func (p point) summary() string {
	return strings.TrimSuffix(strings.TrimPrefix(p.row(), "| "), " |")
}

// table is the markdown of the runs: the rows, the bursts, the verdicts.
func table(o options, runs []sizeRun, vs []verdict) string {
	var b strings.Builder
	what := "one idle `seckill " + o.fleet + "`"
	if o.instances > 1 {
		what = fmt.Sprintf("%d idle `seckill %s` on one database and Redis", o.instances, o.fleet)
	}
	fmt.Fprintf(&b, "# Catalogue sweep: %s, stage %s%s\n\n", what, o.stageName(), labelled(o.label))
	fmt.Fprintf(&b, "Idle window %v, %v after ready", o.window, o.settle)
	if o.bursts > 0 {
		fmt.Fprintf(&b, "; then %d random products (seed %d) restocked to %d in one session and each sold out by %d distinct buyers (%d in flight, spread over the instances); the window again %v after the last burst (\"after bursts\")", o.bursts, o.seed, o.burstStock, o.burstBuyers, o.inFlight, o.after)
	}
	b.WriteString(". CPU from /proc/<pid>/stat (10 ms ticks); Redis from INFO commandstats and cpu of its private server, the sweep's own INFO left out: the total, and the total split evenly over the instances (the Redis cannot tell whose command it served). The goal is a flat line.\n\n")
	b.WriteString("| items | instance | phase | catalogue fill | time to ready | instance CPU, ms/s | RSS, MB | Redis commands/s (total) | per instance | Redis CPU, ms/s | top commands in the window |\n")
	b.WriteString("|--:|---|---|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, r := range runs {
		for _, p := range r.Points {
			b.WriteString(p.row() + "\n")
		}
	}
	if o.bursts > 0 {
		b.WriteString("\n## Bursts\n\nAnswers counted by the buyers; orders (units in confirmed and paid orders) read from the database after the burst. Exact: 201+202 = stock = orders, nothing oversold, no 5xx but 503, every request answered.\n\n")
		b.WriteString("| items | product | stock | buyers | 201 | 202 | 4xx | 503 | other 5xx | no answer | orders | oversold | exact |\n")
		b.WriteString("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
		for _, r := range runs {
			for _, x := range r.Bursts {
				b.WriteString(x.row(r.Items) + "\n")
			}
		}
	}
	b.WriteString("\n## Verdicts\n\n")
	for _, v := range vs {
		b.WriteString("- " + v.line() + "\n")
	}
	return b.String()
}

// row is a burst's line of the bursts table.
func (r burstResult) row(items int) string {
	t := r.Answers
	return fmt.Sprintf("| %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %s |", items, r.Product, r.Stock, r.Buyers,
		t.Created, t.Accepted, t.Refused, t.Unavailable, t.Other5xx, t.Unanswered+t.Unexpected, r.Orders, r.Oversold, yesNo(r.Exact))
}

// summary is a burst in one line, for the terminal.
func (r burstResult) summary() string {
	t := r.Answers
	return fmt.Sprintf("burst product %d: %d+%d sold of %d, %d orders, %d oversold, %d refused, %d 503, %d other 5xx, %d unanswered: exact %s",
		r.Product, t.Created, t.Accepted, r.Stock, r.Orders, r.Oversold, t.Refused, t.Unavailable, t.Other5xx, t.Unanswered+t.Unexpected, yesNo(r.Exact))
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "**no**"
}

func labelled(label string) string {
	if label == "" {
		return ""
	}
	return " (" + label + ")"
}

// panels are the chart's: instance CPU, Redis commands per instance and
// RSS against the catalogue's size, one line per phase, the worst
// instance at each size.
func panels(runs []sizeRun) []report.Panel {
	var cpu, cmds, rss []report.Line
	for _, phase := range []string{phaseIdle, phaseAfter} {
		c, m, r := report.Line{Label: phase}, report.Line{Label: phase}, report.Line{Label: phase}
		for _, run := range runs {
			w, ok := worstOf(run.Points, phase)
			if !ok {
				continue
			}
			x := float64(run.Items)
			c.Points = append(c.Points, report.Point{X: x, Y: w.CPUMsPerS})
			r.Points = append(r.Points, report.Point{X: x, Y: w.RSSMB})
			if w.RedisCmdsPerInstance != nil {
				m.Points = append(m.Points, report.Point{X: x, Y: *w.RedisCmdsPerInstance})
			}
		}
		if len(c.Points) > 0 {
			cpu, rss = append(cpu, c), append(rss, r)
		}
		if len(m.Points) > 0 {
			cmds = append(cmds, m)
		}
	}
	if len(cpu) == 0 {
		return nil // no size was measured: no chart
	}
	out := []report.Panel{{Title: "Instance CPU, idle (worst instance)", YLabel: "ms per s", Lines: cpu}}
	if len(cmds) > 0 {
		out = append(out, report.Panel{Title: "Redis commands per instance, idle", YLabel: "commands per s", Lines: cmds})
	}
	return append(out, report.Panel{Title: "Instance RSS (worst instance)", YLabel: "MB", Lines: rss})
}

// worstOf is the highest CPU, RSS and Redis share among one phase's rows.
func worstOf(points []point, phase string) (idle, bool) {
	var w idle
	found := false
	for _, p := range points {
		if p.Phase != phase || p.Exited != "" {
			continue
		}
		if !found {
			w, found = p.Idle, true
			continue
		}
		w.CPUMsPerS, w.RSSMB = max(w.CPUMsPerS, p.Idle.CPUMsPerS), max(w.RSSMB, p.Idle.RSSMB)
		if p.Idle.RedisCmdsPerInstance != nil && (w.RedisCmdsPerInstance == nil || *p.Idle.RedisCmdsPerInstance > *w.RedisCmdsPerInstance) {
			w.RedisCmdsPerInstance = p.Idle.RedisCmdsPerInstance
		}
	}
	return w, found
}

// write puts the table, the chart and results.json into o.out.
func write(o options, runs []sizeRun, vs []verdict, stdout io.Writer) error {
	js, err := json.MarshalIndent(struct {
		Seed     int64     `json:"seed,omitempty"`
		Stage    string    `json:"stage"`
		Sizes    []sizeRun `json:"sizes"`
		Verdicts []verdict `json:"verdicts"`
	}{o.seed, o.stageName(), runs, vs}, "", "  ")
	if err != nil {
		return err
	}
	files := map[string][]byte{"results.json": append(js, '\n')}
	md := table(o, runs, vs)
	if ps := panels(runs); ps != nil {
		svg, err := report.PanelsSVG("items in the catalogue", true, ps)
		if err != nil {
			return err
		}
		files["catalogue-sweep.svg"] = svg
		md += "\n![idle cost against catalogue size](catalogue-sweep.svg)\n"
	}
	files["catalogue-sweep.md"] = []byte(md)
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(o.out, name), body, 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "wrote %s\n", filepath.Join(o.out, "catalogue-sweep.md"))
	return nil
}
