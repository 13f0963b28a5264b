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

// point is one catalogue size's measurement.
type point struct {
	Items        int     `json:"items"`
	Fleet        string  `json:"fleet"`
	Label        string  `json:"label,omitempty"`
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
		return fmt.Sprintf("| %d | %.1f s | %s | no window | | | | |", p.Items, p.FillSeconds, p.readyCell())
	}
	cmds, rcpu, top := "n/a (embedded)", "n/a (embedded)", "n/a"
	if p.Idle.RedisCmdsPerS != nil {
		cmds, rcpu = fmt.Sprintf("%.0f", *p.Idle.RedisCmdsPerS), fmt.Sprintf("%.0f", *p.Idle.RedisCPUMsPerS)
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
	return fmt.Sprintf("| %d | %.1f s | %s | %.0f | %.0f | %s | %s | %s |",
		p.Items, p.FillSeconds, p.readyCell(), p.Idle.CPUMsPerS, p.Idle.RSSMB, cmds, rcpu, top)
}

// summary is p in one line, for the terminal.
func (p point) summary() string {
	return strings.TrimSuffix(strings.TrimPrefix(p.row(), "| "), " |")
}

// table is the markdown of the points.
func table(o options, points []point) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Catalogue sweep: one idle `seckill %s`%s\n\n", o.fleet, labelled(o.label))
	fmt.Fprintf(&b, "Idle window %v, %v after ready. CPU from /proc/<pid>/stat (10 ms ticks); Redis from INFO commandstats and cpu of its private server, the sweep's own INFO left out. The goal is a flat line.\n\n", o.window, o.settle)
	b.WriteString("| items | catalogue fill | time to ready | instance CPU, ms/s | RSS, MB | Redis commands/s | Redis CPU, ms/s | top commands in the window |\n")
	b.WriteString("|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, p := range points {
		b.WriteString(p.row() + "\n")
	}
	return b.String()
}

func labelled(label string) string {
	if label == "" {
		return ""
	}
	return " (" + label + ")"
}

// panels are the chart's: instance CPU, Redis commands and RSS against
// the catalogue's size.
func panels(points []point) []report.Panel {
	var cpu, cmds, rss report.Line
	for _, p := range points {
		if p.Exited != "" {
			continue // no window: the table says why
		}
		x := float64(p.Items)
		cpu.Points = append(cpu.Points, report.Point{X: x, Y: p.Idle.CPUMsPerS})
		rss.Points = append(rss.Points, report.Point{X: x, Y: p.Idle.RSSMB})
		if p.Idle.RedisCmdsPerS != nil {
			cmds.Points = append(cmds.Points, report.Point{X: x, Y: *p.Idle.RedisCmdsPerS})
		}
	}
	if len(cpu.Points) == 0 {
		return nil // no size was measured: no chart
	}
	out := []report.Panel{{Title: "Instance CPU, idle", YLabel: "ms per s", Lines: []report.Line{cpu}}}
	if len(cmds.Points) > 0 {
		out = append(out, report.Panel{Title: "Redis commands, idle", YLabel: "commands per s", Lines: []report.Line{cmds}})
	}
	return append(out, report.Panel{Title: "Instance RSS", YLabel: "MB", Lines: []report.Line{rss}})
}

// write puts the table, the chart and results.json into o.out.
func write(o options, points []point, stdout io.Writer) error {
	js, err := json.MarshalIndent(points, "", "  ")
	if err != nil {
		return err
	}
	files := map[string][]byte{"results.json": append(js, '\n')}
	md := table(o, points)
	if ps := panels(points); ps != nil {
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
