//go:build unix

package cpu

import "syscall"

// labCPU is the CPU time the lab's own process has used so far, user and
// system, in seconds.
func labCPU() (float64, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9, nil
}
