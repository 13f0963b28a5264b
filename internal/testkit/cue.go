package testkit

import (
	"context"
	"sync"
	"time"
)

// CueDeadline is a context whose deadline passes when the test says
// (Fall), not at a set time: right after the step it must follow. A
// deadline of a few hundred milliseconds could also pass, on a starved
// machine, before that step, and the test would see another outcome.
// Its Err is then context.DeadlineExceeded, and so is that of every
// context derived from it; Deadline reports an hour from the call.
type CueDeadline struct {
	context.Context
	done chan struct{}
	once sync.Once
}

// NewCueDeadline returns a deadline that has not passed.
func NewCueDeadline() *CueDeadline {
	return &CueDeadline{Context: context.Background(), done: make(chan struct{})}
}

// Deadline is an hour from now: the deadline passes at Fall.
func (c *CueDeadline) Deadline() (time.Time, bool) { return time.Now().Add(time.Hour), true }

// Done is closed by Fall.
func (c *CueDeadline) Done() <-chan struct{} { return c.done }

// Err is context.DeadlineExceeded once Fall was called.
func (c *CueDeadline) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// Fall makes the deadline pass; later calls do nothing.
func (c *CueDeadline) Fall() { c.once.Do(func() { close(c.done) }) }
