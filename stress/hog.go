package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

// hogArg runs this program as a CPU hog: `stress -hog <limit>` spins one
// core until its standard input reaches end of file or limit passes.
const hogArg = "-hog"

// runHog is the hog: one goroutine spins while the main one waits for the
// end of its input. Its input is a pipe whose write end only the parent
// holds, so the kernel closes it when the parent exits, however it exits
// (a panic, SIGKILL): no hog outlives the run.
func runHog(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: stress %s <limit>", hogArg)
	}
	limit, err := time.ParseDuration(args[0])
	if err != nil {
		return err
	}
	go func() {
		for {
		}
	}()
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	select {
	case <-eof:
	case <-time.After(limit):
	}
	return nil
}

// hogs are the CPU hogs of one run.
type hogs struct {
	cmds []*exec.Cmd
	pipe *os.File // the write end of every hog's input
}

// startHogs starts n hogs, copies of this program in hog mode that end by
// themselves after limit, should the end of their input never come.
func startHogs(n int, limit time.Duration) (*hogs, error) {
	h := &hogs{}
	if n == 0 {
		return h, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("CPU hogs: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("CPU hogs: %w", err)
	}
	defer r.Close() // each hog has its own copy
	h.pipe = w
	for i := 0; i < n; i++ {
		cmd := exec.Command(self, hogArg, limit.String())
		cmd.Stdin = r
		if err := cmd.Start(); err != nil {
			h.stop()
			return nil, fmt.Errorf("CPU hog: %w", err)
		}
		h.cmds = append(h.cmds, cmd)
	}
	return h, nil
}

// stop ends every hog and waits for it.
func (h *hogs) stop() {
	if h.pipe != nil {
		_ = h.pipe.Close()
	}
	for _, cmd := range h.cmds {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	h.cmds = nil
}
