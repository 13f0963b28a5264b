//go:build unix

package testkit

import (
	"sync"
	"syscall"
	"testing"
	"time"
)

// ParallelCPU runs n calls of run spread over workers goroutines and
// returns the CPU time, user and system, this whole process spent
// meanwhile: a benchmark's client-side cost of a call, for two variants
// interleaved in one run. A failed call fails tb and stops its goroutine.
func ParallelCPU(tb testing.TB, workers, n int, run func() error) time.Duration {
	var wg sync.WaitGroup
	before := processCPU(tb)
	for w := 0; w < workers; w++ {
		share := n / workers
		if w < n%workers {
			share++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < share; i++ {
				if err := run(); err != nil {
					tb.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return processCPU(tb) - before
}

// processCPU is this process's CPU time so far, user and system.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
