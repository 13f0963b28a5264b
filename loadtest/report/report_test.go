package report

import (
	"bytes"
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/seckill-lab/seckill/loadtest/cpu"
	"github.com/seckill-lab/seckill/loadtest/results"
)

func f64(v float64) *float64 { return &v }

// near compares CPU figures computed from floats.
func near(got *float64, want float64) bool { return got != nil && math.Abs(*got-want) < 1e-6 }

// TestMedianRowsKeepsTheMedianRun: three rounds of two attacks. The first
// attack's row is its median run (answered/s 2 of 1, 2, 3), whole, with
// every run's answered/s and each run's ratio to its own round's HTTP
// ceiling. The second failed in round 2: its row is that run, and says so.
func TestMedianRowsKeepsTheMedianRun(t *testing.T) {
	run := func(stage string, rate float64, verdict, note string) results.Row {
		return results.Row{Stage: stage, Workers: 16, Throughput: rate, Created: int(rate * 10), Verdict: verdict, Note: note}
	}
	rounds := [][]results.Row{
		{run("a", 3, results.Pass, "r1"), run("b", 5, results.Pass, "ok")},
		{run("a", 1, results.Pass, "r2"), run("b", 9, results.Fail, "oversold: 3 units")},
		{run("a", 2, results.Pass, "r3"), run("b", 7, results.Pass, "ok")},
	}
	ceilings := [][]results.Ceiling{
		{{Name: results.BaselineHTTP, Workers: 16, PerSecond: 10}},
		{{Name: results.BaselineHTTP, Workers: 16, PerSecond: 10}},
		{{Name: results.BaselineHTTP, Workers: 16, PerSecond: 4}},
	}
	rows := MedianRows(rounds, ceilings)
	if len(rows) != 2 {
		t.Fatalf("%d rows, want one per attack", len(rows))
	}
	a := rows[0]
	if a.Note != "r3" || a.Throughput != 2 || a.Created != 20 {
		t.Errorf("attack a: row %+v, want round 3's run whole (2/s, 20 created)", a)
	}
	if !slices.Equal(a.Runs, []float64{3, 1, 2}) || !slices.Equal(a.RunsPerCeiling, []float64{0.3, 0.1, 0.5}) {
		t.Errorf("attack a: runs %v, per ceiling %v; want 3 1 2 and 0.3 0.1 0.5", a.Runs, a.RunsPerCeiling)
	}
	b := rows[1]
	if b.Verdict != results.Fail || b.Note != "run 2 of 3: oversold: 3 units" {
		t.Errorf("attack b: %s %q, want round 2's failure, named", b.Verdict, b.Note)
	}
}

// TestMedianCeilingsKeepsEveryRound: the median round of each baseline,
// and every round's figure in order.
func TestMedianCeilingsKeepsEveryRound(t *testing.T) {
	rounds := [][]results.Ceiling{
		{{Name: results.BaselineHTTP, Workers: 16, PerSecond: 900, OK: 1}, {Name: results.BaselineHotRow, Workers: 16, PerSecond: 10}},
		{{Name: results.BaselineHTTP, Workers: 16, PerSecond: 700, OK: 2}, {Name: results.BaselineHotRow, Workers: 16, PerSecond: 30}},
		{{Name: results.BaselineHTTP, Workers: 16, PerSecond: 800, OK: 3}, {Name: results.BaselineHotRow, Workers: 16, PerSecond: 20}},
	}
	got := MedianCeilings(rounds)
	if len(got) != 2 || got[0].PerSecond != 800 || got[0].OK != 3 || got[1].PerSecond != 20 {
		t.Fatalf("ceilings %+v, want round 3's http-ceiling (800/s) and the 20/s hot row", got)
	}
	if !slices.Equal(got[0].Runs, []float64{900, 700, 800}) {
		t.Errorf("http-ceiling runs %v, want 900 700 800", got[0].Runs)
	}
}

// TestCompareCPUTakesTheMedianOfEachRoundsRatio: each round's CPU per
// answer is divided by the baseline's of the same round, and the median of
// those ratios is reported; a round whose CPU could not be read is null
// and left out of the median.
func TestCompareCPUTakesTheMedianOfEachRoundsRatio(t *testing.T) {
	base := func(http, redis float64) []results.Ceiling {
		return []results.Ceiling{
			{Name: results.BaselineHTTP, Workers: 16, Figures: cpu.Figures{CPUPerAnswerMS: f64(http), ServersPerAnswerMS: f64(http / 2)}},
			{Name: results.BaselineRedis, Workers: 16, Figures: cpu.Figures{CPUPerAnswerMS: f64(redis), ServersPerAnswerMS: f64(redis / 2)}},
			{Name: results.BaselineSoldOutKeyed, Workers: 16, Figures: cpu.Figures{CPUPerAnswerMS: f64(redis * 1.1)}},
		}
	}
	ceilingRounds := [][]results.Ceiling{base(100, 200), base(50, 100), base(200, 400), base(100, 200)}
	burst := func(us *float64) results.Row {
		f := cpu.Figures{CPUPerAnswerMS: us}
		if us != nil {
			f.ServersPerAnswerMS = f64(*us - 50) // the lab spent 50 per answer (the unit cancels in the ratios)
		}
		return results.Row{Stage: "redis-atomic", Workers: 16, Figures: f}
	}
	rowRounds := [][]results.Row{{burst(f64(250))}, {burst(f64(150))}, {burst(nil)}, {burst(f64(180))}}
	rows := MedianRows(rowRounds, ceilingRounds)
	ceils := MedianCeilings(ceilingRounds)
	CompareCPU(rows, rowRounds, ceils, ceilingRounds)

	r := rows[0]
	want := []string{"2.50", "3.00", "n/a", "1.80"}
	for k, x := range r.CPUxHTTP.Runs {
		if ratioOrNA(x) != want[k] {
			t.Errorf("round %d: × http-ceiling %s, want %s", k+1, ratioOrNA(x), want[k])
		}
	}
	if !near(r.CPUxHTTP.Median, 2.5) || !near(r.CPUxRedis.Median, 1.25) {
		t.Errorf("median × http-ceiling %s, × redis-round-trip %s; want 2.50 (of 1.8, 2.5, 3) and 1.25", ratioOrNA(r.CPUxHTTP.Median), ratioOrNA(r.CPUxRedis.Median))
	}
	// Servers alone: 200/50, 100/25, –, 130/50.
	if !near(r.ServersxHTTP.Median, 4) || ratiosText(r.ServersxHTTP.Runs) != "4.00 · 4.00 · n/a · 2.60" {
		t.Errorf("servers × http-ceiling %s (%s), want 4.00 of 4, 4, n/a, 2.6", ratioOrNA(r.ServersxHTTP.Median), ratiosText(r.ServersxHTTP.Runs))
	}
	if keyed := ceils[2]; !near(keyed.CPUxRedis.Median, 1.1) || len(keyed.CPUxRedis.Runs) != 4 || keyed.ServersxRedis.Median != nil {
		t.Errorf("keyed sold-out × redis-round-trip %+v, servers %+v; want 1.10 over 4 rounds, servers unknown", keyed.CPUxRedis, keyed.ServersxRedis)
	}
	if m := medianOf([]*float64{f64(4), f64(1), f64(3), f64(2)}); !near(m, 2) {
		t.Errorf("median of an even count: %s, want the lower middle one, 2", ratioOrNA(m))
	}
	if medianOf([]*float64{nil, nil}) != nil {
		t.Error("median of nothing known must be unknown")
	}
}

// TestCheckCPUTargets: each target is checked at 16 in flight, where its
// answers were measured, against its own baseline, and says met (at the
// limit included), not met, or unavailable; other levels are left out.
func TestCheckCPUTargets(t *testing.T) {
	fig := func(xHTTP, xRedis *float64) cpu.Figures {
		return cpu.Figures{CPU: &cpu.Usage{}, CPUxHTTP: cpu.Ratio{Median: xHTTP}, CPUxRedis: cpu.Ratio{Median: xRedis}}
	}
	rep := Report{
		Ceilings: []results.Ceiling{
			{Name: results.BaselineSoldOutKeyed, Workers: 16, Figures: fig(f64(2), f64(1.2))},
			{Name: results.BaselineSoldOutNoKey, Workers: 16, Figures: fig(f64(1.3), f64(0.7))},
			{Name: results.BaselineSoldOutNoKey, Workers: 64, Figures: fig(f64(1), f64(0.5))},
			{Name: results.BaselineHotRow, Workers: 16},
		},
		Rows: []results.Row{
			{Scenario: "buy", Shape: "burst", Stage: "redis-atomic", Workers: 16, Verdict: results.Pass, Figures: fig(nil, nil)},
			{Scenario: "buy", Shape: "burst", Stage: "redis-atomic", Workers: 64, Verdict: results.Pass, Figures: fig(f64(1.5), f64(1))},
			{Scenario: "grab", Shape: "burst", Stage: "redis-atomic", Workers: 16, Verdict: results.Pass, Figures: fig(f64(9), f64(9))},
		},
	}
	got := CheckCPUTargets(rep, "redis-atomic")
	var lines []string
	for _, r := range got {
		mark, text := targetLine(r, 1)
		lines = append(lines, mark+" "+text)
	}
	want := []string{
		"MET keyed sold-out buy (redis-atomic) at 16 in flight: ≤ 1.2× redis-round-trip CPU per answer; measured 1.20×",
		"NOT MET keyless sold-out buy (redis-atomic) at 16 in flight: ≤ 1.2× http-ceiling CPU per answer; measured 1.30×",
		"n/a whole buy burst, redis-atomic at 16 in flight: ≤ 2.0× http-ceiling CPU per answer; unavailable: no round measured both its CPU and http-ceiling's",
	}
	if len(lines) != len(want) {
		t.Fatalf("targets:\n%s\nwant %d", strings.Join(lines, "\n"), len(want))
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("target %d:\n got %s\nwant %s", i, lines[i], want[i])
		}
	}
}

func TestRenderTextAligns(t *testing.T) {
	var b bytes.Buffer
	renderText(&b, []string{"stage", "n", "ok"}, [][]string{{"unlocked", "1200", "NO"}, {"redis-atomic", "skipped: not available on target"}})
	got := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	want := []string{
		"stage            n  ok",
		"────────────  ────  ──",
		"unlocked      1200  NO",
		"redis-atomic  skipped: not available on target",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// readings is a fake source: it returns its values one read after another,
// and an error where the value is NaN.
func readings(vals ...float64) func(context.Context) (float64, error) {
	i := 0
	return func(context.Context) (float64, error) {
		v := vals[i]
		i++
		if math.IsNaN(v) {
			return 0, errors.New("connection refused")
		}
		return v, nil
	}
}

// TestCPUUsageAddsWhatWasMeasured: the parts are the differences between
// two readings; a skipped source is listed and not counted; a source that
// failed, or whose counter went back, makes the total unavailable, not
// smaller.
func TestCPUUsageAddsWhatWasMeasured(t *testing.T) {
	meter := func(redis func(context.Context) (float64, error)) *cpu.Meter {
		return &cpu.Meter{Sources: []cpu.Source{
			{Kind: cpu.Instance, Name: "instance a", Read: readings(10, 10.5)},
			{Kind: cpu.Instance, Name: "instance b", Read: readings(3, 3.25)},
			{Kind: cpu.Redis, Name: "redis r", Read: redis},
			{Kind: cpu.MySQL, Name: "mysql", Skip: "not measured: not local"},
			{Kind: cpu.Lab, Name: "lab", Read: readings(1, 1.125)},
		}}
	}
	m := meter(readings(7, 7.125))
	u := m.Usage(m.Read(context.Background()), m.Read(context.Background()))
	if !near(u.Seconds, 1) || !near(u.OfKind(cpu.Instance), 0.75) || !near(u.OfKind(cpu.Redis), 0.125) || u.OfKind(cpu.MySQL) != nil {
		t.Fatalf("usage %+v: want 1 s in all, 0.75 instances, 0.125 redis, mysql unknown", u)
	}
	if !near(u.Servers(), 0.875) {
		t.Errorf("servers alone %s s, want 0.875 (all but the lab's 0.125)", ratioOrNA(u.Servers()))
	}
	if u.Parts[3].Skipped != "not measured: not local" || u.Unavailable() != "" {
		t.Errorf("mysql part %+v; unavailable %q", u.Parts[3], u.Unavailable())
	}
	if !near(cpu.PerUnit(u.Seconds, 2000), 0.5) || cpu.PerUnit(u.Seconds, 0) != nil || cpu.PerUnit(nil, 10) != nil {
		t.Errorf("per unit: 1 s over 2,000 answers is 0.5 ms; over none, or unknown, nothing")
	}

	for name, redis := range map[string]func(context.Context) (float64, error){
		"failed after": readings(7, math.NaN()),
		"went back":    readings(7, 2),
	} {
		m := meter(redis)
		u := m.Usage(m.Read(context.Background()), m.Read(context.Background()))
		if u.Seconds != nil || u.Servers() != nil || u.OfKind(cpu.Redis) != nil || !near(u.OfKind(cpu.Instance), 0.75) {
			t.Errorf("%s: usage %+v, want the total and redis unavailable, the instances still known", name, u)
		}
		if !strings.HasPrefix(u.Unavailable(), "redis r CPU: unavailable (") {
			t.Errorf("%s: %q, want redis named unavailable", name, u.Unavailable())
		}
		if got := kindCell(u, cpu.Redis, 100); got != "n/a" {
			t.Errorf("%s: redis cell %q, want n/a", name, got)
		}
	}
}

// TestCPUCellsOfAnUnreadRow: a row whose CPU could not be read shows n/a
// in its CPU columns, not 0.
func TestCPUCellsOfAnUnreadRow(t *testing.T) {
	r := results.Row{Verdict: results.Pass, Figures: cpu.Figures{CPU: &cpu.Usage{Parts: []cpu.Part{{Kind: cpu.Instance, Name: "instance fake-1", Unavailable: "404"}}}}}
	c, at := cells(r, 0), slices.Index(columns, "µs CPU/answer")
	if c[at] != "n/a" || c[at+1] != "n/a" {
		t.Errorf("CPU cells %q, %q; want n/a", c[at], c[at+1])
	}
}

// TestModelAndFellBehindColumns: a closed row says so in the table, and
// its buyer-time table says fell-behind does not apply rather than kept.
func TestModelAndFellBehindColumns(t *testing.T) {
	r := results.Row{Stage: "db-atomic", Model: results.ModelClosed, Verdict: results.Pass, Requests: 10,
		BuyerTime: &results.Latencies{P99ms: 40}, SendLag: &results.Latencies{P99ms: 1},
		Send:      &results.Send{Schedule: results.ScheduleClosed, PeakInFlight: 8, MaxInFlight: 8},
		NotJudged: map[string]string{ruleFellBehind: "a closed model claims no arrival rate"}}
	if c := cells(r, 0); c[slices.Index(columns, "model")] != "closed" {
		t.Errorf("model cell %q, want closed", c[slices.Index(columns, "model")])
	}
	rate := r
	rate.Model, rate.NotJudged, rate.Send = results.ModelOpen, nil, &results.Send{Schedule: results.ScheduleRate, TargetPerS: 10}
	head, lines := buyerTable([]results.Row{r, rate})
	at := slices.Index(head, "fell-behind")
	if len(lines) != 2 || lines[0][at] != "n/a" || lines[1][at] != "kept" {
		t.Errorf("fell-behind cells %v, want n/a for the closed row and kept for the rate row", lines)
	}
}
