//go:build unix

package metrics

import "syscall"

// rusageCPU is the CPU time this process has used, user and system, in
// seconds, from getrusage: Linux keeps that sum to the nanosecond (it
// scales the tick samples to the scheduler's exact runtime), where
// process_cpu_seconds_total, read from /proc/self/stat, counts whole clock
// ticks of 10 ms.
func rusageCPU() (float64, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9, true
}
