package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	hdr "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/seckill-lab/seckill/loadtest/results"
	"github.com/seckill-lab/seckill/loadtest/verdict"
)

// TestClosedScenarioAgainstAFakeShop runs the closed scenario through the
// lab: 4 users, 10 buys each, against a sound shop with 20 units. The row
// says it is closed, sends exactly 40 buys, passes the sale's rules, names
// fell-behind as not judged, and writes both clocks' interval logs, whose
// histograms hold every buy.
func TestClosedScenarioAgainstAFakeShop(t *testing.T) {
	t.Parallel()
	url := startFakeShop(t, func(s *fakeShop, user string) fakeAnswer { return s.sell(user) })
	env := map[string]string{"SECKILL_ADMIN_TOKEN": "fake-token", "NO_COLOR": "1"}
	args := append(append([]string{}, fakeArgs...), "--stages", "db-atomic", "--scenarios", "closed", "--stock", "20",
		"--closed-users", "4", "--closed-iterations", "10", "--closed-duration", "0s", "--closed-think", "1ms")
	rep, err := runShortEnv(t, env, []string{url}, args...)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(rep.dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var out struct{ Rows []results.Row }
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Rows) != 1 {
		t.Fatalf("results.json: %v, %d rows", err, len(out.Rows))
	}
	r := out.Rows[0]
	if r.Model != results.ModelClosed || r.Requests != 40 || r.Verdict != results.Pass || r.Sold != 20 {
		t.Errorf("closed row: model %q, %d requests, %d sold, %s %v %q: want closed, 40, 20, pass", r.Model, r.Requests, r.Sold, r.Verdict, r.Broken, r.Note)
	}
	if r.NotJudged[verdict.RuleFellBehind] == "" {
		t.Errorf("not judged %v: want fell-behind named", r.NotJudged)
	}
	if r.Send == nil || r.Send.PeakInFlight > 4 {
		t.Errorf("send %+v: want at most the 4 users in flight", r.Send)
	}
	for _, file := range []string{r.HDRLog, r.BuyerHDRLog} {
		if n := hlogCount(t, filepath.Join(rep.dir, file)); file == "" || n != 40 {
			t.Errorf("interval log %q holds %d values, want 40", file, n)
		}
	}
}

// hlogCount is the number of values in the interval log at path, read
// with the HdrHistogram library's reader.
func hlogCount(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Error(err)
		return 0
	}
	defer f.Close()
	rd := hdr.NewHistogramLogReader(f)
	var n int64
	for {
		h, err := rd.NextIntervalHistogram()
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return n
		}
		if h == nil {
			return n
		}
		n += h.TotalCount()
	}
}
