package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seckill-lab/seckill/loadtest/results"
)

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
	rows := medianRows(rounds, ceilings)
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
	got := medianCeilings(rounds)
	if len(got) != 2 || got[0].PerSecond != 800 || got[0].OK != 3 || got[1].PerSecond != 20 {
		t.Fatalf("ceilings %+v, want round 3's http-ceiling (800/s) and the 20/s hot row", got)
	}
	if !slices.Equal(got[0].Runs, []float64{900, 700, 800}) {
		t.Errorf("http-ceiling runs %v, want 900 700 800", got[0].Runs)
	}
}

// TestRepeatAgainstAFakeShop: --repeat 3 attacks the stage three times
// (three resets), reports one row with three runs and an HDR file of its
// own run, and fails the stage when only its second run oversold.
func TestRepeatAgainstAFakeShop(t *testing.T) {
	url := startFakeShop(t, (*fakeShop).sell)
	r, err := runAgainst(t, url, "--stages", "db-atomic", "--repeat", "3")
	if err != nil || r.Verdict != results.Pass {
		t.Fatalf("sound shop, 3 rounds: %v, %s %q", err, r.Verdict, r.Note)
	}
	if len(r.Runs) != 3 || r.Round < 1 || r.Round > 3 || !strings.HasSuffix(r.HDR, "-run"+itoa(r.Round)+".txt") {
		t.Errorf("row runs %v, round %d, HDR %q; want 3 runs and the median run's own HDR file", r.Runs, r.Round, r.HDR)
	}

	url = startFakeShop(t, func(s *fakeShop, user string) fakeAnswer {
		if s.resets == 2 {
			return s.oversell(user)
		}
		return s.sell(user)
	})
	env := map[string]string{"SECKILL_ADMIN_TOKEN": "fake-token", "NO_COLOR": "1"}
	rep, err := runShortEnv(t, env, []string{url}, append(slices.Clone(fakeArgs), "--stages", "db-atomic", "--repeat", "3")...)
	if err == nil || len(rep.Rows) != 1 {
		t.Fatalf("a stage that oversold in round 2 of 3: %v, %d rows; want a failed verdict on one row", err, len(rep.Rows))
	}
	if b := rep.Rows[0]; b.Verdict != results.Fail || !strings.HasPrefix(b.Note, "run 2 of 3: ") || b.Round != 2 {
		t.Errorf("row %s %q (round %d), want round 2's failure", b.Verdict, b.Note, b.Round)
	}
	md, rerr := os.ReadFile(filepath.Join(rep.dir, "report.md"))
	if rerr != nil || !strings.Contains(string(md), "3 rounds") {
		t.Errorf("report.md does not say it ran 3 rounds (%v)", rerr)
	}
}
