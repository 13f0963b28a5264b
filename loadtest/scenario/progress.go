package scenario

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progressEvery bounds how often the live line is redrawn on a terminal:
// often enough to watch, rarely enough not to cost the attack anything.
// progressEveryPlain is the pace of whole lines written to a file or a
// pipe, where every line stays and a redraw would only pile up.
const (
	progressEvery      = 200 * time.Millisecond
	progressEveryPlain = 5 * time.Second
)

// progress reports an attack while it runs. On a terminal it redraws one
// status line in place with \r and ends it with a newline when stopped;
// anywhere else (a file, a pipe, CI's log) it writes a whole line now and
// then and a last one when stopped, so the log reads line by line.
type progress struct {
	w           io.Writer
	prefix      string
	snapshot    func() string
	interactive bool
	done        chan struct{}
	wg          sync.WaitGroup
	width       int // length of the last line drawn, to blank its tail
	started     time.Time
}

func newProgress(w io.Writer, interactive bool, prefix string, snapshot func() string) *progress {
	p := &progress{w: w, prefix: prefix, snapshot: snapshot, interactive: interactive, done: make(chan struct{}), started: time.Now()}
	every := progressEvery
	if !interactive {
		every = progressEveryPlain
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(every)
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

// draw writes the current state. A progress line that cannot be written
// is no reason to stop an attack, so write errors are dropped.
func (p *progress) draw() {
	line := fmt.Sprintf("%s %s  %4.1fs", p.prefix, p.snapshot(), time.Since(p.started).Seconds())
	if !p.interactive {
		_, _ = fmt.Fprintln(p.w, line)
		return
	}
	pad := max(0, p.width-len(line))
	p.width = len(line)
	_, _ = fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", pad))
}

// stop draws the final state and ends the line.
func (p *progress) stop() {
	close(p.done)
	p.wg.Wait()
	p.draw()
	if p.interactive {
		_, _ = fmt.Fprintln(p.w)
	}
}
