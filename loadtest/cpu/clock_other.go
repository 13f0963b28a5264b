//go:build !linux

package cpu

// processClock is nil where another process's CPU-time clock cannot be
// read: the lab reads /proc/<pid>/stat and /metrics instead.
var processClock func(pid int) (float64, error)
