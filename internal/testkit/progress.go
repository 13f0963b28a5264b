package testkit

import (
	"testing"
	"time"
)

// PollProgress calls ok every 20 ms until it returns true, and reports
// whether it did before what it watches stood still: state, read at every
// poll, says where the awaited work is (a replica's sync offsets, the
// Sentinels' view of a failover), and PollProgress gives up only once it
// has not changed for still. A wait bounded by the clock fails a slow
// machine (both cores taken, the work only slowed down); a wait bounded by
// a stall fails only work that stopped moving. Leave time-driven values
// (seconds since, timestamps) out of state: they move when nothing else
// does.
func PollProgress(still time.Duration, state func() string, ok func() bool) bool {
	last, since := state(), time.Now()
	for !ok() {
		if now := state(); now != last {
			last, since = now, time.Now()
		} else if time.Since(since) > still {
			return false
		}
		time.Sleep(pollEvery)
	}
	return true
}

// WaitProgress is PollProgress that fails the test with t.Fatalf, naming
// what it waited for and where it stood, when the work stood still for
// still. Like Fatalf, call it from the test's own goroutine.
func WaitProgress(t testing.TB, what string, still time.Duration, state func() string, ok func() bool) {
	t.Helper()
	var last string
	if !PollProgress(still, func() string { last = state(); return last }, ok) {
		t.Fatalf("waiting for %s: nothing moved for %v; it stood at:\n%s", what, still, last)
	}
}
