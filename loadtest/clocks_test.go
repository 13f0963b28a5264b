package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/loadtest/results"
	"github.com/seckill-lab/seckill/loadtest/verdict"
)

// The calibration of the lab's two clocks: a fake shop injects a known
// delay, and the lab's arithmetic must find it where a buyer lives it.
// Every bound below is one the injected delay guarantees whatever the
// machine does (a busy machine only makes the lab later, and buyer time
// longer); none is a timing threshold on a real server.

// closesAt is a channel closed at instant at: a fake answer's wait that
// holds the buyer until then.
func closesAt(at time.Time) <-chan struct{} {
	c := make(chan struct{})
	time.AfterFunc(time.Until(at), func() { close(c) })
	return c
}

// stalling is a policy that freezes the shop for stall once in every
// window, counted from the first buy it sees: a buy that arrives in the
// frozen part is held until it ends, then sold to; any other is sold to at
// once.
func stalling(window, stall time.Duration) func(s *fakeShop, user string) fakeAnswer {
	var first time.Time
	return func(s *fakeShop, user string) fakeAnswer {
		now := time.Now()
		if first.IsZero() {
			first = now
		}
		into := now.Sub(first) % window
		if into < stall {
			return fakeAnswer{wait: closesAt(now.Add(stall - into))}
		}
		return s.sell(user)
	}
}

// clockRow is the part of a results.json row the calibration reads, by
// its JSON names.
type clockRow struct {
	Verdict   string   `json:"verdict"`
	Broken    []string `json:"broken"`
	Note      string   `json:"note"`
	Requests  int      `json:"requests"`
	P99ms     float64  `json:"p99_ms"`
	HDR       string   `json:"hdr"`
	Plot      string   `json:"plot"`
	BuyerHDR  string   `json:"hdr_buyer_time"`
	BuyerTime struct {
		P99ms float64 `json:"p99_ms"`
		MaxMs float64 `json:"max_ms"`
	} `json:"buyer_time"`
	SendLag struct {
		P99ms float64 `json:"p99_ms"`
		MaxMs float64 `json:"max_ms"`
	} `json:"send_lag"`
}

// clockRowOf reads the one row of the results.json in dir.
func clockRowOf(t *testing.T, dir string) clockRow {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Rows []clockRow `json:"rows"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil || len(rep.Rows) != 1 {
		t.Fatalf("results.json: %v, %d rows", err, len(rep.Rows))
	}
	return rep.Rows[0]
}

// runClocks runs the lab's buy scenario on db-atomic against url, at
// args, and returns the report's directory and its one row.
func runClocks(t *testing.T, url string, args ...string) (string, clockRow, error) {
	t.Helper()
	env := map[string]string{"SECKILL_ADMIN_TOKEN": "fake-token", "NO_COLOR": "1"}
	all := append(append(append([]string{}, fakeArgs...), "--stages", "db-atomic"), args...)
	rep, err := runShortEnv(t, env, []string{url}, all...)
	return rep.dir, clockRowOf(t, rep.dir), err
}

// TestBuyerTimeShowsAStallingShop drives the lab at 20 buyers a second,
// at most 20 in flight, against a shop that freezes for 1.2 s in every
// 2 s. A buyer who arrives as the freeze begins waits all of it, in the
// shop or in the lab's queue (the 20 workers are all held 1 s in, so the
// buyers due in the freeze's last 0.2 s wait for a worker). Buyer time
// must show the freeze, the lab's queue must be counted, and the report
// must print buyer time beside response time, each with its own HDR file
// and its own series in the latency-over-time plot.
func TestBuyerTimeShowsAStallingShop(t *testing.T) {
	t.Parallel()
	const window, stall = 2 * time.Second, 1200 * time.Millisecond
	url := startFakeShop(t, stalling(window, stall))
	dir, r, err := runClocks(t, url, "--shape", "constant", "--rate", "20", "--duration", "4s", "--workers", "1", "--stock", "1000")
	// The shop is sound, so no rule of the stage's may fail. Whether the
	// lab's queue passed fell-behind's bound depends on how late the lab
	// was besides the freeze's 0.2 s; the starved test below judges it.
	if r.Requests == 0 || slices.ContainsFunc(r.Broken, func(b string) bool { return b != verdict.RuleFellBehind }) {
		t.Fatalf("want no rule broken but fell-behind (a slow shop is not a broken one), got %v: %s %v %q", err, r.Verdict, r.Broken, r.Note)
	}
	// At 20 a second, over a tenth of the buyers arrive in the first
	// 0.6 s of a freeze and wait at least 0.6 s from their arrival.
	if min := float64(stall/2) / float64(time.Millisecond); r.BuyerTime.P99ms < min {
		t.Errorf("buyer-time p99 %.1f ms, want at least %.0f ms: the freeze is hidden", r.BuyerTime.P99ms, min)
	}
	if r.BuyerTime.P99ms < r.P99ms || r.BuyerTime.MaxMs < r.BuyerTime.P99ms {
		t.Errorf("buyer time p99 %.1f ms, max %.1f ms, response time p99 %.1f ms: a buyer's clock starts no later than the request's",
			r.BuyerTime.P99ms, r.BuyerTime.MaxMs, r.P99ms)
	}
	// The buyer due 1 s into the freeze finds every worker held until it
	// ends, 0.2 s later.
	if r.SendLag.MaxMs < 100 {
		t.Errorf("largest send lag %.1f ms, want at least 100 ms: the lab's own queue went uncounted", r.SendLag.MaxMs)
	}
	for _, want := range []string{"buyer p99 ms", "lab queue"} {
		assertFile(t, filepath.Join(dir, "report.md"), want)
	}
	if r.Plot == "" {
		t.Error("the row names no latency plot")
	} else {
		assertFile(t, filepath.Join(dir, r.Plot), "(buyer time)")
	}
	if r.BuyerHDR == "" || r.BuyerHDR == r.HDR {
		t.Errorf("buyer time's HDR file %q, response time's %q: want one file each", r.BuyerHDR, r.HDR)
	} else {
		assertHDR(t, filepath.Join(dir, r.BuyerHDR), r.Requests)
	}
}

// TestFellBehindWhenTheLabIsStarved drives the lab at 20 buyers a second
// with at most 20 in flight against a shop that holds every answer 1.5 s:
// keeping the rate takes 30 in flight, so the lab sends at most 20 every
// 1.5 s, two thirds of the rate it claims. The row must not pass, and
// fell-behind must say that the workers were the shortage.
func TestFellBehindWhenTheLabIsStarved(t *testing.T) {
	t.Parallel()
	slow := func(s *fakeShop, user string) fakeAnswer {
		return fakeAnswer{wait: closesAt(time.Now().Add(1500 * time.Millisecond))}
	}
	url := startFakeShop(t, slow)
	_, r, err := runClocks(t, url, "--shape", "constant", "--rate", "20", "--duration", "3s", "--workers", "1", "--stock", "1000")
	if err == nil || r.Verdict != results.Fail || !slices.Contains(r.Broken, verdict.RuleFellBehind) {
		t.Fatalf("want a failed verdict naming %s, got %v: %s %v %q", verdict.RuleFellBehind, err, r.Verdict, r.Broken, r.Note)
	}
	if !strings.Contains(r.Note, verdict.RuleFellBehind+":") || !strings.Contains(r.Note, "workers") {
		t.Errorf("the note does not name %s and the workers: %q", verdict.RuleFellBehind, r.Note)
	}
}
