package metrics

import (
	"runtime"
	"testing"
	"time"
)

// TestRusageCounterIsFinerThanTicks: where getrusage is there, /metrics
// carries seckill_process_cpu_rusage_seconds_total, and it moves with CPU
// spent in steps finer than process_cpu_seconds_total's 10 ms ticks.
func TestRusageCounterIsFinerThanTicks(t *testing.T) {
	if _, ok := rusageCPU(); !ok {
		t.Skip("no getrusage on " + runtime.GOOS)
	}
	m := New("rusage-test")
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		if f.GetName() == "seckill_process_cpu_rusage_seconds_total" {
			n += len(f.GetMetric())
		}
	}
	if n != 1 {
		t.Fatalf("the counter is exported %d times, want once", n)
	}
	before, _ := rusageCPU()
	for d := time.Now(); time.Since(d) < 3*time.Millisecond; {
	}
	after, _ := rusageCPU()
	spent := after - before
	if spent <= 0 {
		t.Fatalf("3 ms of spinning moved the counter by %v", spent)
	}
	// A tick-based reading moves by whole 10 ms steps; this one by
	// whatever was spent.
	if ticks := spent / 0.01; ticks == float64(int(ticks)) {
		t.Fatalf("the counter moved by %v s, a whole number of 10 ms ticks", spent)
	}
}
