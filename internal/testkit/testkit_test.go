package testkit

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeTB records a failure instead of ending the test, so a test can check
// what StartProcess does when the process it runs dies, or what Eventually
// does when its wait runs out.
type fakeTB struct {
	testing.TB
	failed   bool
	msg      string // the format of the Fatalf call
	text     string // its message
	cleanups []func()
}

func (f *fakeTB) Helper()                        {}
func (f *fakeTB) Cleanup(fn func())              { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Logf(format string, a ...any)   {}
func (f *fakeTB) Errorf(format string, a ...any) { f.failed = true }
func (f *fakeTB) Failed() bool                   { return f.failed }
func (f *fakeTB) Fatalf(format string, a ...any) {
	f.failed = true
	f.msg = format
	f.text = fmt.Sprintf(format, a...)
	panic(f) // stands in for runtime.Goexit
}

// TestEventuallyPollsUntilOK: Eventually asks again until ok holds, then
// returns without failing the test.
func TestEventuallyPollsUntilOK(t *testing.T) {
	calls := 0
	Eventually(t, "the third call", 10*time.Second, func() bool {
		calls++
		return calls == 3
	})
	if calls != 3 {
		t.Fatalf("ok was called %d times; want 3 (until it held, and no more)", calls)
	}
}

// TestEventuallyFailsNamingWhatItWaitedFor: when the limit passes, Eventually
// ends the test with Fatalf, and the message says what never happened.
func TestEventuallyFailsNamingWhatItWaitedFor(t *testing.T) {
	f := &fakeTB{TB: t}
	calls, returned := 0, false
	func() {
		defer func() {
			if r := recover(); r != nil && r != any(f) {
				panic(r)
			}
		}()
		Eventually(f, "the moon to turn blue", 100*time.Millisecond, func() bool {
			calls++
			return false
		})
		returned = true
	}()
	if !f.failed || returned {
		t.Fatalf("Eventually past its limit: failed=%v, returned=%v; want a Fatalf", f.failed, returned)
	}
	if !strings.Contains(f.text, "the moon to turn blue") {
		t.Errorf("the failure %q does not say what was awaited", f.text)
	}
	if calls < 2 {
		t.Errorf("ok was called %d times in 100ms; want it asked again", calls)
	}
}

// TestStartProcessThatDiesIsReportedAndCleanedUp: a process that exits
// before it is healthy fails the start with a message, and its cleanup
// returns instead of waiting for an exit that was already seen.
func TestStartProcessThatDiesIsReportedAndCleanedUp(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	f := &fakeTB{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil && r != any(f) {
				panic(r)
			}
		}()
		StartProcess(f, sh, os.Environ(), []string{"http://127.0.0.1:1"}, "-c", "exit 3")
	}()
	if !f.failed || !strings.Contains(f.msg, "%v") {
		t.Fatalf("a process that died before it was healthy must fail the start (failed=%v)", f.failed)
	}
	done := make(chan struct{})
	go func() {
		for i := len(f.cleanups) - 1; i >= 0; i-- {
			f.cleanups[i]()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the cleanup of a process that died early never returned")
	}
}

// TestFreePortsStayOutOfTheEphemeralRange checks what FreePorts promises:
// distinct ports, each bindable, none in the range the kernel hands out
// for :0 listeners and outgoing connections, and never the same port
// twice in one test binary.
func TestFreePortsStayOutOfTheEphemeralRange(t *testing.T) {
	eph := ephemeralStart()
	seen := map[int]bool{}
	for range 3 {
		for _, p := range FreePorts(t, 20) {
			if p < lowestPort || p >= eph {
				t.Fatalf("port %d outside [%d, %d)", p, lowestPort, eph)
			}
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				t.Fatalf("port %d is not free: %v", p, err)
			}
			l.Close()
		}
	}
}

// TestFreePortsSkipsAPortInUse holds the port FreePorts would hand out
// next and checks it hands out another.
func TestFreePortsSkipsAPortInUse(t *testing.T) {
	FreePorts(t, 1) // set the range up
	ports.Lock()
	next := ports.next
	ports.Unlock()
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", next))
	if err != nil {
		t.Skipf("port %d is taken already: %v", next, err)
	}
	defer l.Close()
	if got := FreePorts(t, 1)[0]; got == next {
		t.Fatalf("FreePorts handed out port %d, which a listener holds", got)
	}
}

// TestCueDeadlinePassesOnCue: nothing has passed until Fall; then the
// deadline and every context derived from it report DeadlineExceeded.
func TestCueDeadlinePassesOnCue(t *testing.T) {
	cue := NewCueDeadline()
	child, cancel := context.WithTimeout(cue, time.Hour)
	defer cancel()
	if cue.Err() != nil || child.Err() != nil {
		t.Fatalf("before Fall: %v, %v; want nil", cue.Err(), child.Err())
	}
	cue.Fall()
	cue.Fall() // a second call does nothing
	<-child.Done()
	if !errors.Is(cue.Err(), context.DeadlineExceeded) || !errors.Is(child.Err(), context.DeadlineExceeded) {
		t.Fatalf("after Fall: %v, %v; want DeadlineExceeded", cue.Err(), child.Err())
	}
}

// TestParallelAtLeastKeepsAGivenFlag: without -test.parallel the limit is
// raised to at least n; once given (by the command line, or by the first
// call), it is left as it is.
func TestParallelAtLeastKeepsAGivenFlag(t *testing.T) {
	f := flag.Lookup("test.parallel")
	given := false
	flag.Visit(func(v *flag.Flag) { given = given || v.Name == "test.parallel" })
	before := f.Value.String()
	ParallelAtLeast(1 << 10)
	if want := strconv.Itoa(1 << 10); !given && f.Value.String() != want {
		t.Fatalf("-test.parallel not given: %s after the call, want %s", f.Value, want)
	}
	if given && f.Value.String() != before {
		t.Fatalf("-test.parallel given as %s: %s after the call, want it kept", before, f.Value)
	}
	after := f.Value.String()
	ParallelAtLeast(1 << 11)
	if f.Value.String() != after {
		t.Fatalf("a second call changed -test.parallel from %s to %s", after, f.Value)
	}
}
