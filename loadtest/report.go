package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tsenart/vegeta/v12/lib/plot"
)

// report is results.json. The dashboard reads started_at, targets and rows.
type report struct {
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	Targets    []string  `json:"targets"`
	Settings   settings  `json:"settings"`
	Rows       []row     `json:"rows"`
}

// settings records how the run was configured, so a report can be read
// (and rerun) without its command line.
type settings struct {
	Shape      string  `json:"shape"`
	Buyers     int     `json:"buyers,omitempty"`
	Rate       int     `json:"rate,omitempty"`
	DurationS  float64 `json:"duration_s,omitempty"`
	Stock      int     `json:"stock"`
	Workers    int     `json:"workers"`
	TimeoutS   float64 `json:"timeout_s"`
	MaxS       float64 `json:"max_duration_s,omitempty"`
	Product    int64   `json:"product"`
	Coupon     int64   `json:"coupon"`
	MySQLCheck bool    `json:"mysql_check"`
}

func settingsOf(o options) settings {
	s := settings{Shape: o.shape, Stock: o.stock, Workers: o.workers, TimeoutS: o.timeout.Seconds(),
		Product: o.product, Coupon: o.coupon, MySQLCheck: o.mysqlDSN != ""}
	if o.shape == "burst" {
		s.Buyers, s.MaxS = o.buyers, o.maxDuration.Seconds()
	} else {
		s.Rate, s.DurationS = o.rate, o.duration.Seconds()
	}
	return s
}

// failed names the rows that failed their verdict.
func (rep report) failed() []string {
	var out []string
	for _, r := range rep.Rows {
		if r.Verdict == verdictFail {
			out = append(out, r.Scenario+"/"+r.Stage)
		}
	}
	return out
}

// scenarioGroups splits the rows into one group per scenario, in run order.
func (rep report) scenarioGroups() [][]row {
	var groups [][]row
	index := map[string]int{}
	for _, r := range rep.Rows {
		i, ok := index[r.Scenario]
		if !ok {
			i = len(groups)
			index[r.Scenario] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], r)
	}
	return groups
}

// newReportDir creates <parent>/<timestamp>/, with a suffix when a run in
// the same second already took the name.
func newReportDir(parent string, started time.Time) (string, error) {
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("report folder: %w", err)
	}
	base := started.Format("20060102-150405")
	for i := 1; ; i++ {
		name := base
		if i > 1 {
			name = fmt.Sprintf("%s-%d", base, i)
		}
		dir := filepath.Join(parent, name)
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			return dir, nil
		}
		if !errors.Is(err, os.ErrExist) || i > 100 {
			return "", fmt.Errorf("report folder: %w", err)
		}
	}
}

// pointLatest makes <parent>/latest a symlink to dir, and writes
// <parent>/latest.txt naming it for readers that cannot follow links.
// Both are replaced by rename, so a reader never sees a half-written one.
func pointLatest(parent, dir string) error {
	name := filepath.Base(dir)
	if err := writeFileAtomic(filepath.Join(parent, "latest.txt"), []byte(name+"\n")); err != nil {
		return fmt.Errorf("latest.txt: %w", err)
	}
	tmp := filepath.Join(parent, ".latest-"+randomHex(4))
	if err := os.Symlink(name, tmp); err != nil {
		return fmt.Errorf("latest link: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(parent, "latest")); err != nil {
		return errors.Join(fmt.Errorf("latest link: %w", err), os.Remove(tmp))
	}
	return nil
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp-" + randomHex(4)
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return errors.Join(err, os.Remove(tmp))
	}
	return nil
}

func plotFile(stage string) string { return "latency-" + stage + ".html" }

// writePlots writes one HTML latency plot per stage that ran, and names it
// in that stage's rows.
func writePlots(dir string, plots map[string]*plot.Plot, rows []row) error {
	for stage, pl := range plots {
		pl.Close()
		var buf bytes.Buffer
		if _, err := pl.WriteTo(&buf); err != nil {
			return fmt.Errorf("plot of %s: %w", stage, err)
		}
		if err := os.WriteFile(filepath.Join(dir, plotFile(stage)), buf.Bytes(), 0o644); err != nil {
			return fmt.Errorf("plot of %s: %w", stage, err)
		}
	}
	for i := range rows {
		if _, ok := plots[rows[i].Stage]; ok && rows[i].Verdict != verdictSkipped {
			rows[i].Plot = plotFile(rows[i].Stage)
		}
	}
	return nil
}

func writeReport(dir string, rep report) error {
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("results.json: %w", err)
	}
	var md bytes.Buffer
	writeMarkdown(&md, rep)
	if err := os.WriteFile(filepath.Join(dir, "report.md"), md.Bytes(), 0o644); err != nil {
		return fmt.Errorf("report.md: %w", err)
	}
	return nil
}

// columns of the table, shared by the terminal and report.md.
var columns = []string{"stage", "instances", "requests", "201", "409 sold-out", "other 4xx", "5xx", "timeouts",
	"sold", "final stock", "oversold", "conserved", "req/s", "× db-atomic", "p50 ms", "p95 ms", "p99 ms"}

// cells renders r under columns; base is db-atomic's throughput in the same
// scenario (0 when it did not run).
func cells(r row, base float64) []string {
	ratio := "–"
	if base > 0 {
		ratio = fmt.Sprintf("%.2f", r.Throughput/base)
	}
	conserved := "yes"
	if !r.Conserved {
		conserved = "NO"
	}
	requests := itoa(r.Requests)
	if r.capped() {
		requests += "*"
	}
	return []string{r.Stage, itoa(r.Instances), requests, itoa(r.Created), itoa(r.SoldOut), itoa(r.Other4xx),
		itoa(r.ServerErrors), itoa(r.Timeouts + r.NetErrors), itoa(r.Sold), itoa(r.FinalStock), itoa(r.Oversold), conserved,
		fmt.Sprintf("%.0f", r.Throughput), ratio, fmt.Sprintf("%.1f", r.P50ms), fmt.Sprintf("%.1f", r.P95ms), fmt.Sprintf("%.1f", r.P99ms)}
}

func itoa(n int) string { return fmt.Sprintf("%d", n) }

// capped reports whether the burst was stopped before its whole crowd.
func (r row) capped() bool { return r.Planned > r.Requests }

// capNote is the footnote of a table with capped rows, or "".
func capNote(rows []row, s settings) string {
	for _, r := range rows {
		if r.capped() {
			return fmt.Sprintf("* stopped at the %gs --max-duration cap before the whole crowd was sent", s.MaxS)
		}
	}
	return ""
}

// baseline is db-atomic's throughput among rows, or 0.
func baseline(rows []row) float64 {
	for _, r := range rows {
		if r.Stage == "db-atomic" && r.Verdict != verdictSkipped {
			return r.Throughput
		}
	}
	return 0
}

func heading(r row, s settings) string {
	sc, _ := lookupScenario(r.Scenario)
	load := fmt.Sprintf("%d buyers at once", s.Buyers)
	if s.Shape == "constant" {
		load = fmt.Sprintf("%d req/s for %gs", s.Rate, s.DurationS)
	}
	return fmt.Sprintf("%s · %s · %s · stock %d — %s", r.Scenario, s.Shape, load, s.Stock, sc.about)
}

// printTables writes one table per scenario, one row per stage, and a
// verdict line per stage under it.
func printTables(w io.Writer, rep report, color bool) {
	paint := func(code, s string) string {
		if !color {
			return s
		}
		return "\x1b[" + code + "m" + s + "\x1b[0m"
	}
	for _, group := range rep.scenarioGroups() {
		fmt.Fprintf(w, "\n%s\n", paint("1", heading(group[0], rep.Settings)))
		base := baseline(group)
		var lines [][]string
		for _, r := range group {
			if r.Verdict == verdictSkipped {
				lines = append(lines, []string{r.Stage, "skipped: not available on target"})
				continue
			}
			lines = append(lines, cells(r, base))
		}
		renderText(w, columns, lines)
		if n := capNote(group, rep.Settings); n != "" {
			fmt.Fprintln(w, n)
		}
		for _, r := range group {
			mark := map[string]string{verdictPass: paint("32", "PASS"), verdictFail: paint("31;1", "FAIL"), verdictSkipped: paint("33", "SKIP")}[r.Verdict]
			expect := "expected safe"
			if r.ExpectOversell {
				expect = "expected to oversell"
			}
			if r.Verdict == verdictSkipped {
				fmt.Fprintf(w, "  %s  %-12s %s\n", mark, r.Stage, r.Note)
				continue
			}
			fmt.Fprintf(w, "  %s  %-12s %-21s %s\n", mark, r.Stage, expect, r.Note)
		}
	}
}

// renderText lays out a table with the first column left-aligned and the
// rest right-aligned. A row shorter than the header (a skipped stage) runs
// its second cell across the remaining columns.
func renderText(w io.Writer, head []string, lines [][]string) {
	width := make([]int, len(head))
	for i, h := range head {
		width[i] = utf8.RuneCountInString(h)
	}
	for _, l := range lines {
		for i, c := range l {
			if len(l) != len(head) && i > 0 {
				break // a spanning cell sets no column's width
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	pad := func(s string, n int, left bool) string {
		gap := strings.Repeat(" ", max(0, n-utf8.RuneCountInString(s)))
		if left {
			return s + gap
		}
		return gap + s
	}
	write := func(l []string) {
		var b strings.Builder
		for i, c := range l {
			if i > 0 {
				b.WriteString("  ")
			}
			if len(l) != len(head) && i == len(l)-1 {
				b.WriteString(c)
				break
			}
			b.WriteString(pad(c, width[i], i == 0))
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	write(head)
	rule := make([]string, len(head))
	for i := range rule {
		rule[i] = strings.Repeat("─", width[i])
	}
	write(rule)
	for _, l := range lines {
		write(l)
	}
}

// writeMarkdown renders report.md: the same tables, the verdicts, links to
// the plots, and how to read the columns.
func writeMarkdown(w io.Writer, rep report) {
	s := rep.Settings
	fmt.Fprintf(w, "# seckill lab, %s\n\n", rep.StartedAt.Format("2006-01-02 15:04:05 MST"))
	fmt.Fprintf(w, "- targets: %s\n", strings.Join(rep.Targets, ", "))
	if s.Shape == "burst" {
		fmt.Fprintf(w, "- load: burst of %d buyers through %d workers, per-request timeout %gs, each burst capped at %gs\n", s.Buyers, s.Workers, s.TimeoutS, s.MaxS)
	} else {
		fmt.Fprintf(w, "- load: constant %d req/s for %gs (at most %d workers), per-request timeout %gs\n", s.Rate, s.DurationS, s.Workers, s.TimeoutS)
	}
	fmt.Fprintf(w, "- stock reset to %d before each stage (product %d, coupon batch %d)\n", s.Stock, s.Product, s.Coupon)
	if s.MySQLCheck {
		fmt.Fprintln(w, "- MySQL counted directly after each stage and compared with the audit")
	}
	fmt.Fprintf(w, "- wall time %s\n", rep.FinishedAt.Sub(rep.StartedAt).Round(100*time.Millisecond))
	if failed := rep.failed(); len(failed) > 0 {
		fmt.Fprintf(w, "\n**FAILED: %s**\n", strings.Join(failed, ", "))
	} else {
		fmt.Fprintln(w, "\n**Every verdict passed.**")
	}

	for _, group := range rep.scenarioGroups() {
		fmt.Fprintf(w, "\n## %s\n\n", heading(group[0], s))
		fmt.Fprintf(w, "| %s | verdict |\n|", strings.Join(columns, " | "))
		for i := range len(columns) + 1 {
			if i == 0 {
				fmt.Fprint(w, "---|")
			} else {
				fmt.Fprint(w, "--:|")
			}
		}
		fmt.Fprintln(w)
		base := baseline(group)
		for _, r := range group {
			if r.Verdict == verdictSkipped {
				fmt.Fprintf(w, "| %s | skipped: not available on target |%s SKIPPED |\n", r.Stage, strings.Repeat(" |", len(columns)-2))
				continue
			}
			c := cells(r, base)
			c[0] = fmt.Sprintf("[%s](%s)", r.Stage, r.Plot)
			fmt.Fprintf(w, "| %s | %s |\n", strings.Join(c, " | "), strings.ToUpper(r.Verdict))
		}
		if n := capNote(group, s); n != "" {
			fmt.Fprintf(w, "\n\\%s\n", n)
		}
		fmt.Fprintln(w)
		for _, r := range group {
			expect := "expected safe"
			if r.ExpectOversell {
				expect = "expected to oversell"
			}
			if r.Verdict == verdictSkipped {
				fmt.Fprintf(w, "- **SKIPPED** `%s`: %s\n", r.Stage, strings.TrimPrefix(r.Note, "skipped: "))
				continue
			}
			fmt.Fprintf(w, "- **%s** `%s` (%s): %s\n", strings.ToUpper(r.Verdict), r.Stage, expect, r.Note)
		}
	}

	fmt.Fprint(w, "\n## Latency plots\n\n")
	seen := map[string]bool{}
	for _, r := range rep.Rows {
		if r.Plot != "" && !seen[r.Plot] {
			seen[r.Plot] = true
			fmt.Fprintf(w, "- [%s](%s): every request's latency over the attack, one series per scenario and answer\n", r.Stage, r.Plot)
		}
	}

	fmt.Fprint(w, `
## Reading the table

- **201** counts every created answer, idempotent replays included; **409 sold-out** is the correct answer once the stock is gone.
- **other 4xx** holds already-purchased, idempotency-in-flight, lock-timeout (429) and the like; **5xx** holds lock-lost and unavailable. Neither is wrong in itself: they are the stage refusing rather than guessing.
- **timeouts** got no answer within the timeout (network errors included); their outcome is known only to the audit.
- **sold**, **final stock**, **oversold** and **conserved** come from the audit endpoint, read after the attack: oversold = sold beyond the initial stock; conserved = every unit that left the stock is in exactly one order.
- **req/s** counts answered buyers (201 or 409) per second, from the first request to the last answer; **× db-atomic** divides it by db-atomic's in the same table.
- **p50/p95/p99** are the latencies of every request, in milliseconds.
- A stage expected to oversell passes when it did; any other stage passes when nothing was oversold, stock was conserved, the buyers answered 201 match the audit's count, and it sold something if there was stock.
- A star (*) after the request count marks a burst stopped at the --max-duration cap: the stage could not serve the whole crowd in time, and its verdict judges what it did serve.
`)
}

// colorful reports whether w is a terminal that wants colour.
func colorful(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
