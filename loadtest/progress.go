package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progressEvery bounds how often the live line is redrawn: often enough to
// watch, rarely enough not to cost the attack anything.
const progressEvery = 200 * time.Millisecond

// progress redraws one status line in place with \r while an attack runs,
// and ends it with a newline when stopped.
type progress struct {
	w        io.Writer
	prefix   string
	snapshot func() string
	done     chan struct{}
	wg       sync.WaitGroup
	width    int // length of the last line drawn, to blank its tail
	started  time.Time
}

func newProgress(w io.Writer, prefix string, snapshot func() string) *progress {
	p := &progress{w: w, prefix: prefix, snapshot: snapshot, done: make(chan struct{}), started: time.Now()}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				p.draw()
			case <-p.done:
				return
			}
		}
	}()
	return p
}

func (p *progress) draw() {
	line := fmt.Sprintf("%s %s  %4.1fs", p.prefix, p.snapshot(), time.Since(p.started).Seconds())
	pad := max(0, p.width-len(line))
	p.width = len(line)
	// A progress line that cannot be written is no reason to stop a test.
	_, _ = fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", pad))
}

// stop draws the final state and ends the line.
func (p *progress) stop() {
	close(p.done)
	p.wg.Wait()
	p.draw()
	_, _ = fmt.Fprintln(p.w)
}
