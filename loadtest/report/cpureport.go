package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/seckill-lab/seckill/loadtest/cpu"
	"github.com/seckill-lab/seckill/loadtest/results"
)

// usOrNA formats a figure in milliseconds as whole microseconds, the
// tables' unit for CPU per answer, or "n/a" for a figure that could not
// be measured: never 0.
func usOrNA(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.0f", *v*1000)
}

// ratioOrNA formats a ratio, or "n/a".
func ratioOrNA(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", *v)
}

// CPUCell is a CPU figure of a row in the main table: "–" when the row's
// CPU was not read at all, "n/a" when it could not be.
func CPUCell(c cpu.Figures, v *float64) string {
	if c.CPU == nil {
		return "–"
	}
	return usOrNA(v)
}

// ratiosText lists every round's ratio, or "".
func ratiosText(xs []*float64) string {
	if len(xs) < 2 {
		return ""
	}
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = ratioOrNA(x)
	}
	return strings.Join(parts, " · ")
}

// hasCPU reports whether any row or baseline had its CPU read.
func (rep Report) hasCPU() bool {
	for _, r := range rep.Rows {
		if r.CPU != nil {
			return true
		}
	}
	for _, c := range rep.Ceilings {
		if c.CPU != nil {
			return true
		}
	}
	return false
}

// rounds is the number of rounds of the run.
func (rep Report) rounds() int { return max(1, rep.Settings.Repeat) }

// cpuTable is the CPU per answer of every baseline and row that had its
// CPU read: the total, per unit sold, as ratios of the baselines, and split
// by kind of process.
func cpuTable(rep Report) ([]string, [][]string) {
	head := []string{"answers of", "in flight", "answered/s", "µs CPU/answer", "µs CPU/sale", "× http-ceiling", "× redis-round-trip"}
	repeated := rep.rounds() > 1
	if repeated {
		head = append(head, "× http-ceiling, each round")
	}
	head = append(head, "servers µs/answer", "servers × http-ceiling", "servers × redis-round-trip")
	for _, k := range cpu.Kinds {
		head = append(head, "µs "+k)
	}
	line := func(name string, workers int, perSecond float64, c cpu.Figures, perSale string, answers int) []string {
		l := []string{name, itoa(workers), fmt.Sprintf("%.0f", perSecond), usOrNA(c.CPUPerAnswerMS), perSale, ratioOrNA(c.CPUxHTTP.Median), ratioOrNA(c.CPUxRedis.Median)}
		if repeated {
			l = append(l, orDash(ratiosText(c.CPUxHTTP.Runs)))
		}
		l = append(l, usOrNA(c.ServersPerAnswerMS), ratioOrNA(c.ServersxHTTP.Median), ratioOrNA(c.ServersxRedis.Median))
		for _, k := range cpu.Kinds {
			l = append(l, kindCell(c.CPU, k, answers))
		}
		return l
	}
	var lines [][]string
	for _, c := range rep.Ceilings {
		if c.CPU != nil {
			lines = append(lines, line(c.Name, c.Workers, c.PerSecond, c.Figures, "–", c.OK))
		}
	}
	for _, r := range rep.Rows {
		if r.CPU != nil && r.Verdict != results.Skipped {
			lines = append(lines, line(r.Scenario+" / "+r.Stage, r.Workers, r.Throughput, r.Figures, usOrNA(r.CPUPerSaleMS), r.Created+r.SoldOut+r.Conflicts))
		}
	}
	return head, lines
}

// kindCell is the CPU of one kind of process per answer: "–" when none of
// that kind is measured, "n/a" when one could not be read.
func kindCell(u *cpu.Usage, kind string, answers int) string {
	measured, failed := false, false
	for _, p := range u.Parts {
		if p.Kind == kind {
			measured = measured || p.Seconds != nil
			failed = failed || p.Unavailable != ""
		}
	}
	switch {
	case failed:
		return "n/a"
	case !measured:
		return "–"
	}
	return usOrNA(cpu.PerUnit(u.OfKind(kind), answers))
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

// cpuCoverage says which processes the CPU figures add up, and which are
// not measured and why, from the first reading of the run.
func cpuCoverage(rep Report) (measured, skipped []string) {
	var u *cpu.Usage
	for _, c := range rep.Ceilings {
		if u == nil && c.CPU != nil {
			u = c.CPU
		}
	}
	for _, r := range rep.Rows {
		if u == nil && r.CPU != nil {
			u = r.CPU
		}
	}
	if u == nil {
		return nil, nil
	}
	for _, p := range u.Parts {
		if p.Skipped != "" {
			skipped = append(skipped, p.Name+": "+p.Skipped)
		} else if p.How != "" {
			measured = append(measured, p.Name+", from "+p.How)
		} else {
			measured = append(measured, p.Name)
		}
	}
	return measured, skipped
}

// targetLine is one CPU target's verdict in words.
func targetLine(t cpuTargetResult, rounds int) (mark, text string) {
	mark = "n/a"
	if t.Met != nil {
		mark = map[bool]string{true: "MET", false: "NOT MET"}[*t.Met]
	}
	text = fmt.Sprintf("%s at %d in flight: ≤ %.1f× %s CPU per answer", t.What, t.Workers, t.Limit, t.Against)
	if t.Ratio.Median == nil {
		return mark, text + "; " + t.Note
	}
	text += fmt.Sprintf("; measured %.2f×", *t.Ratio.Median)
	if rounds > 1 {
		text += fmt.Sprintf(" (median of %d rounds: %s)", rounds, ratiosText(t.Ratio.Runs))
	} else {
		text += " (one round: the target asks for the median of five, make lab-cpu)"
	}
	if t.Servers.Median != nil {
		text += fmt.Sprintf("; servers alone %.2f×", *t.Servers.Median)
	}
	return mark, text
}

// PrintCPU writes the CPU table, what it covers, and the CPU targets.
func PrintCPU(w io.Writer, rep Report, paint func(code, s string) string) {
	if !rep.hasCPU() {
		return
	}
	fmt.Fprintf(w, "\n%s\n", paint("1", "CPU per answer · µs of CPU of the measured processes per answer, × the baselines' in the same round"))
	head, lines := cpuTable(rep)
	renderText(w, head, lines)
	measured, skipped := cpuCoverage(rep)
	fmt.Fprintf(w, "  measured: %s\n", strings.Join(measured, "; "))
	for _, s := range skipped {
		fmt.Fprintf(w, "  %s\n", s)
	}
	if len(rep.CPUTargets) > 0 {
		fmt.Fprintf(w, "\n%s\n", paint("1", "CPU targets"))
		for _, t := range rep.CPUTargets {
			mark, text := targetLine(t, rep.rounds())
			fmt.Fprintf(w, "  %-7s  %s\n", mark, text)
		}
	}
}

// writeCPUMarkdown is printCPU for report.md.
func writeCPUMarkdown(w io.Writer, rep Report) {
	if !rep.hasCPU() {
		return
	}
	fmt.Fprint(w, "\n## CPU per answer\n\nAround every attack and baseline the lab reads the CPU time of every process that takes part: each instance process (on this machine, when its clock agrees with its own getrusage counter, its process's CPU-time clock, which costs it nothing; otherwise its /metrics, whose scrape costs it about a millisecond, mostly counted in the attack that follows), each Redis of `--cpu-redis` (`INFO CPU`, used_cpu_sys + used_cpu_user), MySQL when it runs on this machine (its process's CPU-time clock, or utime + stime of mariadbd or mysqld in /proc, in 10 ms ticks), and the lab itself (getrusage). The list under the table says how it read each. **µs CPU/answer** is their sum over the answers (201, 202 or 409; a baseline's OK answers); **µs CPU/sale** the same over the units sold. The ratios divide it by the baseline's CPU per answer at the same buyers in flight in the same round")
	if rep.rounds() > 1 {
		fmt.Fprintf(w, ", and are the median of the %d rounds' ratios (each round in the next column)", rep.rounds())
	}
	fmt.Fprint(w, ". The last columns split the CPU per answer by process; n/a marks a figure that could not be read (the note of the row says why), – one not measured.\n\n")
	head, lines := cpuTable(rep)
	markdownTable(w, head, lines)
	measured, skipped := cpuCoverage(rep)
	fmt.Fprintf(w, "\n- measured: %s\n", strings.Join(measured, "; "))
	for _, s := range skipped {
		fmt.Fprintf(w, "- %s\n", s)
	}
	if len(rep.CPUTargets) > 0 {
		fmt.Fprint(w, "\n### CPU targets\n\n")
		for _, t := range rep.CPUTargets {
			mark, text := targetLine(t, rep.rounds())
			fmt.Fprintf(w, "- **%s** %s\n", mark, text)
		}
	}
}
