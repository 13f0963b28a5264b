package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/seckill-lab/seckill/loadtest/results"
)

// TestRepeatAgainstAFakeShop: --repeat 3 attacks the stage three times
// (three resets), reports one row with three runs and an HDR file of its
// own run, and fails the stage when only its second run oversold.
func TestRepeatAgainstAFakeShop(t *testing.T) {
	url := startFakeShop(t, (*fakeShop).sell)
	r, err := runAgainst(t, url, "--stages", "db-atomic", "--repeat", "3")
	if err != nil || r.Verdict != results.Pass {
		t.Fatalf("sound shop, 3 rounds: %v, %s %q", err, r.Verdict, r.Note)
	}
	if len(r.Runs) != 3 || r.Round < 1 || r.Round > 3 || !strings.HasSuffix(r.HDR, "-run"+strconv.Itoa(r.Round)+".txt") {
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
