//go:build linux

package cpu

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestProcessClockReadsThatProcess: processClock of this process's pid
// falls between two readings of this process's own CPU clock.
func TestProcessClockReadsThatProcess(t *testing.T) {
	self := func() float64 {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
			t.Fatal(err)
		}
		return float64(ts.Nano()) / 1e9
	}
	before := self()
	got, err := processClock(os.Getpid())
	after := self()
	if err != nil || got < before || got > after {
		t.Fatalf("processClock(own pid) = %v, %v; want between %v and %v", got, err, before, after)
	}
	// pid_max is one past the largest pid the kernel hands out.
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	unused, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{unused, 0, -1, maxPID + 1} {
		if v, err := processClock(pid); err == nil {
			t.Errorf("pid %d, which no process has: read %v, want an error", pid, v)
		}
	}
}
