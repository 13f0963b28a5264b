package scenario

import (
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

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
