package report

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tsenart/vegeta/v12/lib/plot"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/loadtest/results"
)

// Report is results.json. The dashboard reads started_at, targets and rows;
// the lab page also charts and knees.
type Report struct {
	StartedAt  time.Time     `json:"started_at"`
	FinishedAt time.Time     `json:"finished_at"`
	Targets    []string      `json:"targets"`
	Settings   Settings      `json:"settings"`
	Rows       []results.Row `json:"rows"`
	Charts     []chart       `json:"charts,omitempty"`
	// Knees name, per scenario and stage of a sweep, where more buyers in
	// flight stopped buying more answers per second.
	Knees []knee `json:"knees,omitempty"`
	// Models are the capacity model (usl.go) of each stage of a sweep of
	// at least three levels.
	Models []uslFit `json:"models,omitempty"`
	// Ceilings are the baselines measured with --baselines.
	Ceilings []results.Ceiling `json:"baselines,omitempty"`
	// CPUTargets are the CPU targets (cpucompare.go) checked on the
	// baselines and rows that measure them.
	CPUTargets []cpuTargetResult `json:"cpu_targets,omitempty"`
	// Scenes say, for the headings, how each scenario's crowd arrives
	// and what it is about; not part of results.json.
	Scenes map[string]Scene `json:"-"`
}

// Scene is what a heading says of a scenario.
type Scene struct {
	Crowd results.Crowd
	About string
}

// Settings records how the run was configured, so a report can be read
// (and rerun) without its command line.
type Settings struct {
	Shape      string  `json:"shape"`
	Buyers     int     `json:"buyers,omitempty"`
	Rate       int     `json:"rate,omitempty"`
	DurationMS float64 `json:"duration_ms,omitempty"`
	Stock      int     `json:"stock"`
	Workers    int     `json:"workers"`
	Sweep      []int   `json:"sweep,omitempty"` // buyers in flight of each round of a sweep
	TimeoutMS  float64 `json:"timeout_ms"`
	MaxMS      float64 `json:"max_duration_ms,omitempty"`
	Product    int64   `json:"product"`
	Coupon     int64   `json:"coupon"`
	MySQLCheck bool    `json:"mysql_check"`
	Repeat     int     `json:"repeat,omitempty"` // rounds, when more than one
	// BaselineRequests is the requests of each HTTP baseline, when not
	// Buyers; SoldOutStage the stage of the sold-out baselines.
	BaselineRequests int      `json:"baseline_requests,omitempty"`
	SoldOutStage     string   `json:"sold_out_stage,omitempty"`
	CPURedis         []string `json:"cpu_redis,omitempty"` // the Redis servers whose CPU was read
	// The T-0 crowd and its lead, and the paced arrivals' pace and most
	// arrivals, when those scenarios ran.
	T0Buyers    int     `json:"t0_buyers,omitempty"`
	T0LeadMS    float64 `json:"t0_lead_ms,omitempty"`
	PaceMS      float64 `json:"pace_ms,omitempty"`
	PacedBuyers int     `json:"paced_buyers,omitempty"`
	// FirstComeTargets are the paced scenario's targets in this run.
	FirstComeTargets map[string]float64 `json:"first_come_targets,omitempty"`
	// The scalper scenarios' crowd and limit (scenario/scalper.go).
	ScalperPeople          int     `json:"scalper_people,omitempty"`
	ScalperLimitIntervalMS float64 `json:"scalper_limit_interval_ms,omitempty"`
	ScalperLimitBurst      int     `json:"scalper_limit_burst,omitempty"`
	ScalperTarget          float64 `json:"scalper_target,omitempty"`
	// The closed scenario's users, think time, duration and iterations
	// per user (scenario/closed.go).
	ClosedUsers      int     `json:"closed_users,omitempty"`
	ClosedThinkMS    float64 `json:"closed_think_ms,omitempty"`
	ClosedDurationMS float64 `json:"closed_duration_ms,omitempty"`
	ClosedIterations int     `json:"closed_iterations,omitempty"`
}

// failed names the rows that failed their verdict.
func (rep Report) Failed() []string {
	var out []string
	for _, r := range rep.Rows {
		if r.Verdict == results.Fail {
			name := r.Scenario + "/" + r.Stage
			if len(rep.Settings.Sweep) > 0 {
				name += fmt.Sprintf("@%d", r.Workers)
			}
			out = append(out, name)
		}
	}
	return out
}

// tableGroups splits the rows into one table per scenario and number of
// buyers in flight, in run order.
func (rep Report) tableGroups() [][]results.Row {
	var groups [][]results.Row
	type key struct {
		scenario string
		workers  int
	}
	index := map[key]int{}
	for _, r := range rep.Rows {
		k := key{r.Scenario, r.Workers}
		i, ok := index[k]
		if !ok {
			i = len(groups)
			index[k] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], r)
	}
	return groups
}

// scenarios lists the scenarios of the rows in run order.
func (rep Report) scenarios() []string {
	var out []string
	for _, r := range rep.Rows {
		if !slices.Contains(out, r.Scenario) {
			out = append(out, r.Scenario)
		}
	}
	return out
}

// NewDir creates <parent>/<timestamp>/, with a suffix when a run in
// the same second already took the name.
func NewDir(parent string, started time.Time) (string, error) {
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

// PointLatest makes <parent>/latest a symlink to dir, and writes
// <parent>/latest.txt naming it for readers that cannot follow links.
// Both are replaced by rename, so a reader never sees a half-written one.
func PointLatest(parent, dir string) error {
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

// PlotFile is the latency plot of stage.
func PlotFile(stage string) string { return "latency-" + stage + ".html" }

// HDRFile names the HDR histogram of one row: per scenario and stage, and
// per concurrency in a sweep.
func HDRFile(r results.Row, sweeping bool) string {
	name := "hdr-" + r.Scenario + "-" + r.Stage
	if sweeping {
		name += fmt.Sprintf("-%d", r.Workers)
	}
	if r.Round > 0 {
		name += fmt.Sprintf("-run%d", r.Round)
	}
	return name + ".txt"
}

// BuyerHDRFile names the file of r's buyer times, beside HDRFile's.
func BuyerHDRFile(r results.Row, sweeping bool) string {
	return "hdr-buyer-" + strings.TrimPrefix(HDRFile(r, sweeping), "hdr-")
}

// WritePlots writes one HTML latency plot per stage that ran, and names it
// in that stage's rows.
func WritePlots(dir string, plots map[string]*plot.Plot, rows []results.Row) error {
	for stage, pl := range plots {
		pl.Close()
		var buf bytes.Buffer
		if _, err := pl.WriteTo(&buf); err != nil {
			return fmt.Errorf("plot of %s: %w", stage, err)
		}
		if err := os.WriteFile(filepath.Join(dir, PlotFile(stage)), buf.Bytes(), 0o644); err != nil {
			return fmt.Errorf("plot of %s: %w", stage, err)
		}
	}
	for i := range rows {
		if _, ok := plots[rows[i].Stage]; ok && rows[i].Verdict != results.Skipped {
			rows[i].Plot = PlotFile(rows[i].Stage)
		}
	}
	return nil
}

// WriteReport writes results.json and report.md into dir.
func WriteReport(dir string, rep Report) error {
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
var columns = []string{"stage", "instances", "requests", "201", "409", "429", "503", "other 4xx", "5xx", "no answer",
	"sold", "final stock", "oversold", "conserved", "req/s", "× db-atomic", "µs CPU/answer", "µs CPU/sale", "p50 ms", "p95 ms", "p99 ms",
	"buyer p99 ms", "lab queue p99 ms", "model"}

// cells renders r under columns; base is db-atomic's throughput in the same
// table (0 when it did not run).
func cells(r results.Row, base float64) []string {
	ratio := "–"
	if base > 0 {
		ratio = fmt.Sprintf("%.2f", r.Throughput/base)
	}
	conserved := "yes"
	if !r.Conserved {
		conserved = "NO"
	}
	requests := itoa(r.Requests)
	if r.Capped() {
		requests += "*"
	}
	return []string{r.Stage, itoa(r.Instances), requests, itoa(r.Created), itoa(r.SoldOut + r.Conflicts), itoa(r.TooMany),
		itoa(r.Overloaded), itoa(r.Other4xx), itoa(r.ServerErrors), itoa(r.Timeouts + r.NetErrors), itoa(r.Sold), itoa(r.FinalStock), itoa(r.Oversold), conserved,
		fmt.Sprintf("%.0f", r.Throughput), ratio, CPUCell(r.Figures, r.CPUPerAnswerMS), CPUCell(r.Figures, r.CPUPerSaleMS), fmt.Sprintf("%.1f", r.P50ms), fmt.Sprintf("%.1f", r.P95ms), fmt.Sprintf("%.1f", r.P99ms),
		clockCell(r.BuyerTime), clockCell(r.SendLag), or(r.Model, "–")}
}

// clockCell is a clock's p99, or – for a row that kept none.
func clockCell(l *results.Latencies) string {
	if l == nil {
		return "–"
	}
	return fmt.Sprintf("%.1f", l.P99ms)
}

func itoa(n int) string { return fmt.Sprintf("%d", n) }

// capNote is the footnote of a table with capped rows, or "".
func capNote(rows []results.Row, s Settings) string {
	for _, r := range rows {
		if r.Capped() {
			return fmt.Sprintf("* stopped at the %gs --max-duration cap before the whole crowd was sent", s.MaxMS/1000)
		}
	}
	return ""
}

// baseline is db-atomic's throughput among rows, or 0.
func baseline(rows []results.Row) float64 {
	for _, r := range rows {
		if r.Stage == inventory.StageDBAtomic && r.Verdict != results.Skipped {
			return r.Throughput
		}
	}
	return 0
}

func heading(r results.Row, s Settings, scenes map[string]Scene) string {
	sc := scenes[r.Scenario]
	switch sc.Crowd {
	case results.CrowdT0:
		return fmt.Sprintf("%s · %d buyers connected early, the opening %gs ahead · stock %d — %s", r.Scenario, s.T0Buyers, s.T0LeadMS/1000, s.Stock, sc.About)
	case results.CrowdPaced:
		return fmt.Sprintf("%s · one arrival every %g ms, at most %d · stock %d — %s", r.Scenario, s.PaceMS, s.PacedBuyers, s.Stock, sc.About)
	case results.CrowdScalper:
		return fmt.Sprintf("%s · %d people · stock %d — %s", r.Scenario, s.ScalperPeople, s.Stock, sc.About)
	case results.CrowdClosed:
		return fmt.Sprintf("%s · closed model · %s · stock %d — %s", r.Scenario, closedLoad(s), s.Stock, sc.About)
	case results.CrowdRoom:
		if m := r.Room; m != nil {
			return fmt.Sprintf("%s · %d people, %d passes/s, %d inside, shuffle %g ms · stock %d — %s", r.Scenario, m.People, m.PassesPerSecond, m.MaxInside, m.ShuffleMS, s.Stock, sc.About)
		}
		return fmt.Sprintf("%s · stock %d — %s", r.Scenario, s.Stock, sc.About)
	case results.CrowdMany:
		if m := r.Many; m != nil {
			return fmt.Sprintf("%s · burst · %d buyers over %d products × %d units, %d in flight, Zipf s=%g, seed %d — %s",
				r.Scenario, m.Buyers, m.Products, m.StockEach, r.Workers, m.Exponent, m.Seed, sc.About)
		}
		return fmt.Sprintf("%s · burst · %d in flight — %s", r.Scenario, r.Workers, sc.About)
	}
	load := fmt.Sprintf("%d buyers, %d in flight", s.Buyers, r.Workers)
	if s.Shape == "constant" {
		load = fmt.Sprintf("%d req/s for %gs", s.Rate, s.DurationMS/1000)
	}
	return fmt.Sprintf("%s · %s · %s · stock %d — %s", r.Scenario, s.Shape, load, s.Stock, sc.About)
}

// verdictLine is one stage's verdict in words: PASS or FAIL, what was
// expected, and the note, which names any broken rule first.
func verdictLine(r results.Row) (mark, expect, note string) {
	mark = strings.ToUpper(r.Verdict)
	if r.Verdict == results.Skipped {
		return "SKIP", "", r.Note
	}
	expect = "expected safe"
	if r.ExpectOversell {
		expect = "expected to oversell"
	}
	return mark, expect, r.Note
}

// PrintTables writes one table per scenario (and concurrency), one row per
// stage, a verdict line per stage under it, and with a sweep the scaling
// table.
func PrintTables(w io.Writer, rep Report, color bool) {
	paint := func(code, s string) string {
		if !color {
			return s
		}
		return "\x1b[" + code + "m" + s + "\x1b[0m"
	}
	for _, group := range rep.tableGroups() {
		fmt.Fprintf(w, "\n%s\n", paint("1", heading(group[0], rep.Settings, rep.Scenes)))
		base := baseline(group)
		var lines [][]string
		for _, r := range group {
			if r.Verdict == results.Skipped {
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
			mark, expect, note := verdictLine(r)
			mark = map[string]string{"PASS": paint("32", "PASS"), "FAIL": paint("31;1", "FAIL"), "SKIP": paint("33", "SKIP")}[mark]
			if r.Verdict == results.Skipped {
				fmt.Fprintf(w, "  %s  %-12s %s\n", mark, r.Stage, note)
				continue
			}
			fmt.Fprintf(w, "  %s  %-12s %-21s %s\n", mark, r.Stage, expect, note)
		}
		if title, head, lines := saleTable(group); len(lines) > 0 {
			fmt.Fprintf(w, "\n%s\n", paint("1", title))
			renderText(w, head, lines)
		}
	}
	PrintCPU(w, rep, paint)
	for _, sc := range rep.scenarios() {
		head, lines := scalingTable(rep, sc)
		if len(lines) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s\n", paint("1", "scaling · "+sc+" · answered/s and p99 by buyers in flight"))
		renderText(w, head, lines)
		for _, k := range rep.Knees {
			if k.Scenario == sc {
				fmt.Fprintf(w, "  %-12s %s\n", k.Stage, k.Text)
			}
		}
		for _, f := range rep.Models {
			if f.Scenario == sc {
				fmt.Fprintf(w, "  %-12s model: %s\n", f.Stage, f.text())
			}
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

// markdownTable writes head and lines as a Markdown table, the first
// column left-aligned and the rest right-aligned.
func markdownTable(w io.Writer, head []string, lines [][]string) {
	fmt.Fprintf(w, "| %s |\n|", strings.Join(head, " | "))
	for i := range head {
		if i == 0 {
			fmt.Fprint(w, "---|")
		} else {
			fmt.Fprint(w, "--:|")
		}
	}
	fmt.Fprintln(w)
	for _, l := range lines {
		fmt.Fprintf(w, "| %s |\n", strings.Join(l, " | "))
	}
}

// ms1 formats milliseconds with one decimal.
func ms1(v float64) string { return fmt.Sprintf("%.1f", v) }

// writeMarkdown renders report.md: the summary chart, the tables, the
// verdicts, the scaling table and charts of a sweep, the latency
// percentiles with their HDR files, links to the plots, and how to read it.
func writeMarkdown(w io.Writer, rep Report) {
	writeMarkdownHead(w, rep)
	writeStageTables(w, rep)
	for _, sc := range rep.scenarios() {
		writeScaling(w, rep, sc)
	}
	writeCeilings(w, rep)
	writeCPUMarkdown(w, rep)
	writeLatencies(w, rep)
	writeReadingGuide(w)
}

// writeMarkdownHead is the run's settings, its outcome and the summary
// chart.
func writeMarkdownHead(w io.Writer, rep Report) {
	s := rep.Settings
	fmt.Fprintf(w, "# seckill lab, %s\n\n", rep.StartedAt.Format("2006-01-02 15:04:05 MST"))
	fmt.Fprintf(w, "- targets: %s\n", strings.Join(rep.Targets, ", "))
	switch {
	case s.Shape == "burst" && len(s.Sweep) > 0:
		fmt.Fprintf(w, "- load: bursts of %d buyers at each of %s buyers in flight, per-request timeout %gs, each burst capped at %gs\n",
			s.Buyers, JoinInts(s.Sweep), s.TimeoutMS/1000, s.MaxMS/1000)
	case s.Shape == "burst":
		fmt.Fprintf(w, "- load: burst of %d buyers, %d in flight, per-request timeout %gs, each burst capped at %gs\n", s.Buyers, s.Workers, s.TimeoutMS/1000, s.MaxMS/1000)
	default:
		fmt.Fprintf(w, "- load: constant %d req/s for %gs (at most %d workers), per-request timeout %gs\n", s.Rate, s.DurationMS/1000, s.Workers, s.TimeoutMS/1000)
	}
	fmt.Fprintf(w, "- stock reset to %d before each stage (product %d, coupon batch %d)\n", s.Stock, s.Product, s.Coupon)
	if s.MySQLCheck {
		fmt.Fprintln(w, "- MySQL counted directly after each stage and compared with the audit")
	}
	if s.Repeat > 1 {
		fmt.Fprintf(w, "- %d rounds: every attack ran once per round; each row is its median run, and passes only if every run passed\n", s.Repeat)
	}
	fmt.Fprintf(w, "- wall time %s\n", rep.FinishedAt.Sub(rep.StartedAt).Round(100*time.Millisecond))
	if failed := rep.Failed(); len(failed) > 0 {
		fmt.Fprintf(w, "\n**FAILED: %s**\n", strings.Join(failed, ", "))
	} else {
		fmt.Fprintln(w, "\n**Every verdict passed.**")
	}
	for _, c := range rep.Charts {
		if c.Kind == chartSummary {
			fmt.Fprintf(w, "\n![%s](%s)\n", c.Title, c.File)
		}
	}
}

// writeStageTables is one table per scenario (and level), with each
// stage's verdict under it.
func writeStageTables(w io.Writer, rep Report) {
	s := rep.Settings
	for _, group := range rep.tableGroups() {
		fmt.Fprintf(w, "\n## %s\n\n", heading(group[0], s, rep.Scenes))
		base := baseline(group)
		var lines [][]string
		for _, r := range group {
			if r.Verdict == results.Skipped {
				l := make([]string, len(columns)+1)
				l[0], l[1], l[len(l)-1] = r.Stage, "skipped: not available on target", "SKIPPED"
				lines = append(lines, l)
				continue
			}
			c := cells(r, base)
			c[0] = fmt.Sprintf("[%s](%s)", r.Stage, r.Plot)
			lines = append(lines, append(c, strings.ToUpper(r.Verdict)))
		}
		markdownTable(w, append(slices.Clone(columns), "verdict"), lines)
		if n := capNote(group, s); n != "" {
			fmt.Fprintf(w, "\n\\%s\n", n)
		}
		fmt.Fprintln(w)
		for _, r := range group {
			mark, expect, note := verdictLine(r)
			if r.Verdict == results.Skipped {
				fmt.Fprintf(w, "- **SKIPPED** `%s`: %s\n", r.Stage, strings.TrimPrefix(note, "skipped: "))
				continue
			}
			fmt.Fprintf(w, "- **%s** `%s` (%s): %s\n", mark, r.Stage, expect, note)
		}
		if title, head, lines := saleTable(group); len(lines) > 0 {
			fmt.Fprintf(w, "\n### %s\n\n", title)
			markdownTable(w, head, lines)
		}
	}
}

// writeScaling is a sweep's scaling table for scenario sc, its knees, the
// capacity model, the charts and the answers at each level.
func writeScaling(w io.Writer, rep Report, sc string) {
	head, lines := scalingTable(rep, sc)
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## Scaling: %s\n\nAnswered buyers per second, p99 and the largest resident memory of an instance (from its /metrics, after the burst) at each number of buyers in flight; the knee is where more buyers in flight stopped adding answers per second (less than %d%% more).\n\n",
		sc, int(math.Round((kneeGain-1)*100)))
	markdownTable(w, head, lines)
	fmt.Fprintln(w)
	for _, k := range rep.Knees {
		if k.Scenario == sc {
			fmt.Fprintf(w, "- `%s`: %s\n", k.Stage, k.Text)
		}
	}
	fmt.Fprintln(w)
	if head, lines := uslTable(rep.Models, sc); len(lines) > 0 {
		fmt.Fprintf(w, "Capacity model: the universal scalability law, X(N) = λN / (1 + σ(N−1) + κN(N−1)), fitted to each stage's answered/s; each level is also predicted by a fit of the other levels alone (loadtest/report/usl.go).\n\n")
		for _, f := range rep.Models {
			if f.Scenario == sc {
				fmt.Fprintf(w, "- `%s`: %s\n", f.Stage, f.text())
			}
		}
		fmt.Fprintln(w)
		markdownTable(w, head, lines)
		fmt.Fprintln(w)
	}
	for _, c := range rep.Charts {
		if c.Scenario == sc && c.Kind != chartSummary {
			fmt.Fprintf(w, "![%s](%s)\n", c.Title, c.File)
		}
	}
	fmt.Fprintf(w, "\nAnswers at each number of buyers in flight:\n\n")
	ah, al := answersTable(rep, sc)
	markdownTable(w, ah, al)
}

// writeLatencies is every row's latency percentiles and plots.
func writeLatencies(w io.Writer, rep Report) {
	s := rep.Settings
	fmt.Fprint(w, "\n## Latency percentiles\n\nEvery request's latency in milliseconds; the HDR file of each row is in `vegeta report -type=hdrplot` format, for the HdrHistogram plotter, and its .hlog beside it an HdrHistogram interval log (one histogram a second, values in ns), for HistogramLogProcessor and the other HdrHistogram tools.\n")
	for _, group := range rep.tableGroups() {
		head := []string{"stage", "p50", "p90", "p95", "p99", "p99.9", "max", "HDR histogram"}
		var lines [][]string
		for _, r := range group {
			if r.Verdict == results.Skipped || r.Requests == 0 {
				continue
			}
			lines = append(lines, []string{r.Stage, ms1(r.P50ms), ms1(r.P90ms), ms1(r.P95ms), ms1(r.P99ms), ms1(r.P999ms), ms1(r.MaxMs),
				fmt.Sprintf("[%s](%s)", r.HDR, r.HDR) + logLink(r.HDRLog)})
		}
		if len(lines) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n### %s\n\n", heading(group[0], s, rep.Scenes))
		markdownTable(w, head, lines)
		if bh, bl := buyerTable(group); len(bl) > 0 {
			fmt.Fprint(w, "\nBuyer time, from each buyer's arrival (the instant the schedule says it came), and the lab's queue (send lag: buyer time less response time, the wait inside the lab before the request left, which is no fault of the server):\n\n")
			markdownTable(w, bh, bl)
		}
	}

	fmt.Fprint(w, "\n## Latency plots\n\n")
	seen := map[string]bool{}
	for _, r := range rep.Rows {
		if r.Plot != "" && !seen[r.Plot] {
			seen[r.Plot] = true
			fmt.Fprintf(w, "- [%s](%s): every request's latency over the attack, one series per scenario and answer, and each scenario's buyer time\n", r.Stage, r.Plot)
		}
	}
}

// buyerTable is a group's buyer times and lab queue, one line per row
// that kept them.
func buyerTable(group []results.Row) (head []string, lines [][]string) {
	head = []string{"stage", "schedule", "buyer p50", "p90", "p95", "p99", "p99.9", "max", "lab queue p50", "p99", "max",
		"sends/s (target)", "peak in flight", "fell-behind", "HDR histogram"}
	for _, r := range group {
		b, q, sd := r.BuyerTime, r.SendLag, r.Send
		if r.Verdict == results.Skipped || b == nil || q == nil || sd == nil {
			continue
		}
		rate := "–"
		if sd.TargetPerS > 0 {
			rate = fmt.Sprintf("%.0f (%.0f)", sd.AchievedPerS, sd.TargetPerS)
		}
		peak := itoa(sd.PeakInFlight)
		if sd.MaxInFlight > 0 {
			peak += fmt.Sprintf(" of %d", sd.MaxInFlight)
		}
		hdr := "–"
		if r.BuyerHDR != "" {
			hdr = fmt.Sprintf("[%s](%s)", r.BuyerHDR, r.BuyerHDR) + logLink(r.BuyerHDRLog)
		}
		lines = append(lines, []string{r.Stage, sd.Schedule, ms1(b.P50ms), ms1(b.P90ms), ms1(b.P95ms), ms1(b.P99ms), ms1(b.P999ms), ms1(b.MaxMs),
			ms1(q.P50ms), ms1(q.P99ms), ms1(q.MaxMs), rate, peak, fellBehindCell(r), hdr})
	}
	return head, lines
}

// writeReadingGuide says how to read the tables.
func writeReadingGuide(w io.Writer) {
	fmt.Fprint(w, `
## Reading the table

- **201** counts every created answer, idempotent replays included, and the **202**s of a stage that queues its orders (redis-stream: the sale accepted, the order written later); **409** counts sold-out (the correct answer once the stock is gone) and the retry storm's already-purchased and in-flight answers.
- **429** (lock timeout, queue full) and **503** (overloaded, with Retry-After) turn a buyer away honestly: nothing was written and the client may retry; all but 503 `+"`outcome-unknown`"+`, whose write was on its way (it may hold an order, which a retry with its Idempotency-Key is answered with). A safe stage fails the liveness rule when it turns buyers away while stock is left.
- **5xx** counts every other server error, a 503 without Retry-After included: a bug, and a failed verdict for a safe stage.
- **no answer** counts client timeouts and network errors; their outcome is known only to the audit, and a safe stage fails for them.
- **sold**, **final stock**, **oversold** and **conserved** come from the audit endpoint, read after the attack: oversold = sold beyond the initial stock; conserved = every unit that left the stock is in exactly one order.
- **req/s** counts answered requests (201, 202 or 409) per second, from the first request to the last answer; **× db-atomic** divides it by db-atomic's in the same table.
- **µs CPU/answer** and **µs CPU/sale** are the CPU time the measured processes (instances, Redis, MySQL when local, the lab; see "CPU per answer") spent on the attack, per answered request and per unit sold: n/a when a process could not be read, – when nothing was read.
- **p50/p95/p99** are the latencies of every request, in milliseconds: response time, from the moment the lab sent it.
- **buyer p99** is the p99 of buyer time, from each buyer's arrival: the instant the crowd's schedule says the buyer came (the burst's start, a rate attack's tick, a paced arrival's instant, the opening at T-0, the moment a buyer was told to come back). **lab queue p99** is the p99 of the send lag, buyer time less response time: how long buyers waited inside the lab (for a worker, a goroutine, the CPU) before their request left. A burst queues its crowd behind its workers by design; a rate or paced row whose lab fell behind its schedule fails `+"`fell-behind`"+`; the rule does not apply (n/a, and the row's `+"`not_judged`"+` in results.json says why) to a burst, whose schedule is all at once, nor to a closed model, which claims no arrival rate.
- **model** is how the scenario's buyers come. **open**: they arrive on a schedule of their own (all at once, at a rate, one every --pace), whatever the answers, so a slow shop meets a growing queue. **closed**: a fixed population of users, each waiting for its answer and thinking before it comes back (the closed scenario, as behind a waiting room), so a slow shop slows the arrivals down with it and its latency looks better than an open crowd would find it.
- A stage expected to oversell passes when it did. Any other stage passes only when it keeps every rule: `+"`oversold`"+` (nothing sold beyond the stock), `+"`conservation`"+`, `+"`orders-match`"+` (buyers answered 201 or 202 = units sold, or fewer by at most the buyers answered 503 `+"`outcome-unknown`"+`), `+"`unconfirmed`"+` (for redis-stream, every 202's order confirmed, after waiting up to --confirm-timeout; the note gives the time to confirm, p50 and p99, and the peak lag: the most orders accepted and not yet written at once), `+"`server-errors`"+` (no 5xx but a 503 with Retry-After), `+"`transport-errors`"+` (every request answered in time), `+"`sold-nothing`"+`, `+"`liveness`"+` (no stock left while buyers were turned away) and `+"`capped`"+` (no stock left when --max-duration stopped the burst) and `+"`post-sale-503`"+` (no 503 to a request sent after the last sale was answered: after the sell-out the answer is 409) and `+"`refused-with-stock`"+` (no sold-out answer received before the last order was created: nobody refused while a unit remained). Each row with 503s notes their share of the requests. A failed verdict names the rules it broke, with the counts.
- A star (*) after the request count marks a burst stopped at the --max-duration cap: the stage could not serve the whole crowd in time, and its verdict judges what it did serve.
`)
}

// saleTable is the table of a T-0 or paced group's own figures, one line
// per stage that ran, or no lines for the other scenarios.
func saleTable(group []results.Row) (title string, head []string, lines [][]string) {
	opt := func(v *float64, format string) string {
		if v == nil {
			return "–"
		}
		return fmt.Sprintf(format, *v)
	}
	for _, r := range group {
		switch {
		case r.T0 != nil && r.Verdict != results.Skipped:
			t := r.T0
			title = "T-0 · the opening, by the reference clock"
			head = []string{"stage", "buyers", "refused early", "sold early", "sold", "T-0 → last unit ms", "by", "T-0 → last sale answer ms", "1st s p50 ms", "1st s p99 ms", "verdict"}
			early := itoa(t.SoldEarly)
			if t.SoldEarlyMySQL != nil {
				early += fmt.Sprintf(" (MySQL %d)", *t.SoldEarlyMySQL)
			}
			lines = append(lines, []string{r.Stage, itoa(t.Buyers), itoa(t.RefusedEarly), early, fmt.Sprintf("%d/%d", r.Sold, r.InitialStock),
				opt(t.ToLastOrderMS, "%.0f"), or(t.LastOrderBy, "–"), opt(t.ToLastSaleAnswerMS, "%.0f"),
				ms1(t.FirstSecondP50ms), ms1(t.FirstSecondP99ms), strings.ToUpper(r.Verdict)})
		case r.Scalper != nil && r.Verdict != results.Skipped:
			sp := r.Scalper
			title = "scalpers · who won, by kind of buyer"
			head = []string{"stage", "limit", "people", "scalpers", "scalper requests", "429 to scalpers", "units to scalpers", "units to others", "share of units", "share of people", "gain", "target", "verdict"}
			limit := "off"
			if sp.Limited {
				limit = fmt.Sprintf("%d, then 1 per %g s per address", sp.LimitBurst, sp.LimitIntervalMS/1000)
			}
			share, gain := "–", "–"
			if sp.Gain != nil {
				share, gain = fmt.Sprintf("%.0f%%", 100**sp.ShareOfUnits), fmt.Sprintf("%.2f×", *sp.Gain)
			}
			target := "–"
			if sp.TargetMet != nil {
				target = fmt.Sprintf("≤ %.2f×: ", *sp.Target)
				if *sp.TargetMet {
					target += "met"
				} else {
					target += "NOT MET"
				}
			}
			lines = append(lines, []string{r.Stage, limit, itoa(sp.People), itoa(sp.Scalpers), itoa(sp.ScalperRequests), itoa(sp.ScalperLimited),
				itoa(sp.ScalperWon), itoa(sp.NormalWon), share, fmt.Sprintf("%.0f%%", 100*sp.ShareOfPeople), gain, target, strings.ToUpper(r.Verdict)})
		case r.Room != nil && r.Verdict != results.Skipped:
			title, head = roomTableHead()
			lines = append(lines, roomLine(r))
		case r.Paced != nil && r.Verdict != results.Skipped:
			p := r.Paced
			title = "fairness · who won, by the order the buyers asked in"
			head = []string{"stage", "arrivals", "pace ms", "peak in flight", "first won / won", "first-come score", "target", "first-come", "jitter p50 ms", "jitter p99 ms", "jitter max ms", "swapped", "wins past jitter", "verdict"}
			met := "no target"
			switch {
			case p.Target != nil && p.Score == nil:
				met = "n/a"
			case p.Target != nil && *p.Score >= *p.Target:
				met = "MET"
			case p.Target != nil:
				met = "NOT MET"
			}
			lines = append(lines, []string{r.Stage, itoa(p.Arrivals), fmt.Sprintf("%g", p.PaceMS), itoa(p.PeakInFlight),
				fmt.Sprintf("%d/%d", p.FirstWon, p.Won), opt(p.Score, "%.2f"), opt(p.Target, "≥ %.2f"), met,
				fmt.Sprintf("%.2f", p.JitterP50ms), fmt.Sprintf("%.2f", p.JitterP99ms), fmt.Sprintf("%.2f", p.JitterMaxMs), itoa(p.Reordered), fmt.Sprintf("%d (+%d)", p.LateWins, p.JitterWindow), strings.ToUpper(r.Verdict)})
		}
	}
	return title, head, lines
}

// JoinInts lists numbers with commas, e.g. "16, 64".
func JoinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ", ")
}

// IsTerminal reports whether w is a terminal, which gets colour and a
// progress line redrawn in place.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// joinFloats prints xs with format, separated by middle dots; "–" when
// there are none.
func joinFloats(xs []float64, format string) string {
	if len(xs) == 0 {
		return "–"
	}
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(parts, " · ")
}

// writeCeilings adds the baselines of --baselines, and every row as a ratio
// of the ceilings that bound it: every stage by the HTTP ceiling and by the
// Redis round trip, db-atomic also by its own transaction straight on MySQL.
func writeCeilings(w io.Writer, rep Report) {
	if len(rep.Ceilings) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## Baselines\n\nMeasured in this run, with the same buyers in flight: `http-ceiling` is GET /healthz on the same targets (everything but a buy's work); `redis-round-trip` is GET /api/v1/admin/redis-ping on them (the same, plus the one Redis round trip a keyed buy makes first, so no stage can beat it); `sold-out-keyed` and `sold-out-keyless` are buys of the product after a reset to 0, under %s, each buyer its own, with an Idempotency-Key and without (their OK answer is 409 sold-out); `raw-hot-row` is db-atomic's transaction (guarded UPDATE of the hot row, order INSERT) straight on MySQL with no HTTP, on a scratch product. The HTTP baselines are sent in %d slices taken in turn, and each one's figures are the sums over its slices.%s\n\n", or(rep.Settings.SoldOutStage, "the --sold-out-stage"), results.BaselineSlices, baselineRequestsNote(rep.Settings))
	repeated := len(rep.Ceilings[0].Runs) > 1
	var lines [][]string
	at := map[string]float64{} // name@workers -> per second
	for _, c := range rep.Ceilings {
		at[fmt.Sprintf("%s@%d", c.Name, c.Workers)] = c.PerSecond
		line := []string{c.Name, itoa(c.Workers), itoa(c.Requests), itoa(c.OK), fmt.Sprintf("%.0f", c.PerSecond)}
		if repeated {
			line = append(line, joinFloats(c.Runs, "%.0f"))
		}
		lines = append(lines, append(line, c.Note))
	}
	head := []string{"baseline", "in flight", "requests", "ok", "per second"}
	if repeated {
		fmt.Fprintf(w, "Each baseline ran once per round, %d rounds: the table shows the median round, and every round's figure in order.\n\n", len(rep.Ceilings[0].Runs))
		head = append(head, "every round")
	}
	markdownTable(w, append(head, "note"), lines)
	lines = nil
	for _, r := range rep.Rows {
		if r.Verdict == results.Skipped || r.Throughput == 0 {
			continue
		}
		ratio := func(name string) string {
			if c := at[fmt.Sprintf("%s@%d", name, r.Workers)]; c > 0 {
				return fmt.Sprintf("%.2f", r.Throughput/c)
			}
			return "–"
		}
		line := []string{r.Scenario, r.Stage, itoa(r.Workers), fmt.Sprintf("%.0f", r.Throughput), ratio(results.BaselineHTTP), ratio(results.BaselineRedis), ratio(results.BaselineHotRow)}
		if repeated {
			line = append(line, joinFloats(r.RunsPerCeiling, "%.2f"))
		}
		lines = append(lines, line)
	}
	fmt.Fprint(w, "\nEach row's answered requests per second as a share of each ceiling at its number of buyers in flight:\n\n")
	head = []string{"scenario", "stage", "in flight", "answered/s", "× http-ceiling", "× redis-round-trip", "× raw-hot-row"}
	if repeated {
		fmt.Fprint(w, "With repeated rounds, the ratios are the median run's over the median baselines; the last column divides every run by the HTTP ceiling of its own round.\n\n")
		head = append(head, "each run × its round's http-ceiling")
	}
	markdownTable(w, head, lines)
}

// baselineRequestsNote says how many requests each HTTP baseline sent when
// that was not one per buyer, or "".
func baselineRequestsNote(s Settings) string {
	if s.BaselineRequests <= 0 {
		return ""
	}
	return fmt.Sprintf(" Each HTTP baseline sent %d requests (--baseline-requests); the raw loop sold %d units.", s.BaselineRequests, s.Buyers)
}

// or is s, or def when s is empty.
func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// randomHex is n random bytes in hex, for a temporary file's name.
func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b)
}
