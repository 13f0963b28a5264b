//go:build linux

package cpu

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// maxPID bounds a Linux pid (PID_MAX_LIMIT): no pid is larger, and the
// clock's id of one that were could land on another pid's.
const maxPID = 1 << 22

// processClock is the CPU time process pid has used so far, user and
// system, in seconds, to the nanosecond: its CPU-time clock, which Linux
// lets another process read (clock_getcpuclockid(3) makes the same id:
// the pid, inverted, shifted past the clock's kind, CPUCLOCK_SCHED). It
// costs the process read nothing: no request to answer, no page to
// encode. It counts the threads that have ended too, as getrusage does,
// in ns; a thread on a CPU at the moment it is read counts up to its last
// tick or switch, a lag that cancels out between two readings.
func processClock(pid int) (float64, error) {
	if pid <= 0 || pid > maxPID {
		return 0, fmt.Errorf("%d is not a pid", pid)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(int32(^pid<<3|2), &ts); err != nil {
		return 0, err
	}
	return float64(ts.Nano()) / 1e9, nil
}
