package scenario

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/seckill-lab/seckill/loadtest/report"
	"github.com/seckill-lab/seckill/loadtest/results"
)

// TestClocksFromARateSchedule feeds the clocks a rate attack of 10 a
// second for 1 s that sent 5 of its 10 buyers, each answered in 50 ms,
// the last 300 ms after its instant: buyer time, send lag, the achieved
// rate and the peak in flight follow from the arithmetic alone.
func TestClocksFromARateSchedule(t *testing.T) {
	pacer := vegeta.ConstantPacer{Freq: 10, Per: time.Second}
	began := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	c := newClocks(results.ScheduleRate, 10, 20)
	c.until = began.Add(time.Second)
	for seq := range uint64(5) {
		due := dueOf(pacer, began, seq)
		if want := began.Add(time.Duration(seq+1) * 100 * time.Millisecond); !due.Equal(want) {
			t.Fatalf("hit %d due at %v, want %v", seq, due, want)
		}
		sent := due
		if seq == 4 {
			sent = due.Add(300 * time.Millisecond)
		}
		c.add(&vegeta.Result{Seq: seq, Timestamp: sent, Latency: 50 * time.Millisecond, Code: 201}, due)
	}
	var r results.Row
	c.fill(&r)
	if r.BuyerTime == nil || r.SendLag == nil || r.Send == nil {
		t.Fatalf("fill left %+v", r)
	}
	if r.BuyerTime.MaxMs != 350 || r.SendLag.MaxMs != 300 || r.SendLag.P50ms != 0 {
		t.Errorf("buyer time max %.1f ms, send lag max %.1f p50 %.1f: want 350, 300, 0", r.BuyerTime.MaxMs, r.SendLag.MaxMs, r.SendLag.P50ms)
	}
	if want := (results.Send{Schedule: results.ScheduleRate, TargetPerS: 10, AchievedPerS: 5, PeakInFlight: 1, MaxInFlight: 20}); *r.Send != want {
		t.Errorf("send %+v, want %+v", *r.Send, want)
	}
}

// TestClocksOfABurst: every buyer of a burst arrives at its start, so the
// buyer queued behind the others carries the wait in its buyer time.
func TestClocksOfABurst(t *testing.T) {
	began := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	pacer := BurstPacer{Hits: 2}
	c := newClocks(results.ScheduleBurst, 0, 1)
	c.add(&vegeta.Result{Seq: 0, Timestamp: began, Latency: 40 * time.Millisecond}, dueOf(pacer, began, 0))
	c.add(&vegeta.Result{Seq: 1, Timestamp: began.Add(40 * time.Millisecond), Latency: 40 * time.Millisecond}, dueOf(pacer, began, 1))
	var r results.Row
	c.fill(&r)
	if r.BuyerTime.MaxMs != 80 || r.SendLag.MaxMs != 40 || r.Send.AchievedPerS != 0 || r.Send.PeakInFlight != 1 || r.Send.Scheduled() {
		t.Errorf("buyer time %+v, send lag %+v, send %+v: want the second buyer at 80 ms, 40 of them in the lab, one in flight, no rate", *r.BuyerTime, *r.SendLag, *r.Send)
	}
}

// TestIntervalLogsHoldTheRowsClocks writes a row's two clocks as
// HdrHistogram interval logs and reads them back with the library's own
// reader: 1,000 requests over 2.5 s, request i answered i ms after it
// left, sent i/2 ms after its buyer arrived. The logs hold one histogram
// a second (3), every request once in each, and the merged histograms'
// percentiles are the row's (vegeta's estimates against HDR's buckets,
// so within 1%).
func TestIntervalLogsHoldTheRowsClocks(t *testing.T) {
	began := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	c := newClocks(results.ScheduleRate, 400, 0)
	const n = 1000
	for i := range n {
		due := began.Add(time.Duration(i) * 2500 * time.Microsecond)
		lag := time.Duration(i) * time.Millisecond / 2
		c.add(&vegeta.Result{Seq: uint64(i), Timestamp: due.Add(lag), Latency: time.Duration(i+1) * time.Millisecond, Code: 201}, due)
	}
	res := Result{clocks: c}
	r := results.Row{Scenario: "buy", Stage: "db-atomic"}
	c.fill(&r)
	dir := t.TempDir()
	if err := report.WriteHDRLogs(dir, &r, false, res.Samples()); err != nil {
		t.Fatal(err)
	}
	for _, l := range []struct {
		file, tag string
		want      *results.Latencies
	}{
		{r.HDRLog, report.TagResponseTime, &results.Latencies{P50ms: results.MS(500 * time.Millisecond), P99ms: results.MS(990 * time.Millisecond), MaxMs: 1000}},
		{r.BuyerHDRLog, report.TagBuyerTime, r.BuyerTime},
	} {
		merged, intervals := readHDRLog(t, filepath.Join(dir, l.file), l.tag)
		if merged.TotalCount() != n || intervals < 3 {
			t.Errorf("%s: %d values in %d intervals, want %d in at least 3", l.file, merged.TotalCount(), intervals, n)
		}
		for _, q := range []struct {
			name      string
			pct, want float64
		}{{"p50", 50, l.want.P50ms}, {"p99", 99, l.want.P99ms}, {"max", 100, l.want.MaxMs}} {
			got := results.MS(time.Duration(merged.ValueAtPercentile(q.pct)))
			if d := got/q.want - 1; d > 0.01 || d < -0.01 {
				t.Errorf("%s: %s %.1f ms, the row's %.1f", l.file, q.name, got, q.want)
			}
		}
	}
}

// readHDRLog merges the interval histograms of an interval log, each of
// which must carry tag.
func readHDRLog(t *testing.T, path, tag string) (*hdr.Histogram, int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd := hdr.NewHistogramLogReader(f)
	merged := hdr.New(1, int64(time.Hour), 3)
	intervals := 0
	for {
		h, err := rd.NextIntervalHistogram()
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h == nil {
			return merged, intervals
		}
		if h.Tag() != tag {
			t.Errorf("%s: interval tagged %q, want %q", path, h.Tag(), tag)
		}
		intervals++
		merged.Merge(h)
	}
}
