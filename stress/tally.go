package main

import (
	"fmt"
	"regexp"
	"strings"
)

// event is one line of `go test -json` (see `go doc cmd/test2json`).
// Build errors come as "build-output" events, which name an ImportPath
// instead of a Package.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64 // seconds, on a test's pass, skip or fail
}

// packageRow names the row of a failure that belongs to no test: a build
// error, a TestMain that fails after every test passed (goleak), a go
// command that could not start the tests.
const packageRow = "(package)"

// result is what the runs of one test (or subtest) came to in one go test
// invocation.
type result struct {
	Test    string
	Runs    int // "run" events
	Failed  int // "fail" events, and runs cut short by a crash of the package
	Skipped int
	Missing bool   // listed, but never ran
	Message string // first failure, or why it was skipped, or why it is missing
	// Seconds is the time its ended runs took, as go test reports them:
	// where a long stress run spends its hours.
	Seconds float64
}

// tally adds up the events of one `go test -json -count=N` invocation.
// Every "run" event is one run of the test it names. A test binary that
// panics or times out stops mid-test: the panic is in the output of the
// tests that were running, which get no end event of their own, and the
// package then fails; those tests count as failed, with the panic as their
// message. A package that fails with no test running or failed (a build
// error, a TestMain) is a failure of packageRow.
type tally struct {
	onFail func(test string) // told of each failed run as it ends, if set
	onEnd  func(test string) // told of each run of a top-level test as it ends, if set

	results map[string]*result
	order   []string // tests as they first ran
	// running holds the own output of the current run of each test that
	// has started and not ended.
	running map[string][]string
	// logOf holds the whole output of the current run of each running
	// top-level test, subtests included, for the log of failing runs.
	logOf map[string]*strings.Builder
	// firstFail is the own output of each test's first failing run, and
	// lastFail of its latest (what the progress line tells as it ends).
	firstFail, lastFail map[string][]string
	// passedAt holds, per test, the file:line of every output line of its
	// passing runs: those are t.Log lines, which a failing run prints too,
	// before its t.Error.
	passedAt  map[string]map[string]bool
	skipWhy   map[string]string
	pkgOut    []string
	pkgFailed bool
	// cut says the package stopped before its tests had run: a crash, a
	// build error; interrupted, that a signal of ours stopped it.
	cut, interrupted bool
	failureLog       strings.Builder
}

func newTally() *tally {
	return &tally{
		results:   map[string]*result{},
		running:   map[string][]string{},
		logOf:     map[string]*strings.Builder{},
		firstFail: map[string][]string{},
		lastFail:  map[string][]string{},
		passedAt:  map[string]map[string]bool{},
		skipWhy:   map[string]string{},
	}
}

func topLevel(test string) string {
	top, _, _ := strings.Cut(test, "/")
	return top
}

func (t *tally) result(test string) *result {
	r, ok := t.results[test]
	if !ok {
		r = &result{Test: test}
		t.results[test] = r
		t.order = append(t.order, test)
	}
	return r
}

// add takes one event.
func (t *tally) add(e event) {
	if e.Test == "" {
		switch e.Action {
		case "output", "build-output":
			t.pkgOut = append(t.pkgOut, e.Output)
		case "fail":
			t.pkgFailed = true
		}
		return
	}
	top := topLevel(e.Test)
	switch e.Action {
	case "run":
		t.result(e.Test).Runs++
		t.running[e.Test] = nil
		delete(t.lastFail, e.Test) // a failure of an earlier run
		if e.Test == top {
			t.logOf[top] = &strings.Builder{}
		}
	case "output":
		if _, ok := t.running[e.Test]; ok {
			t.running[e.Test] = append(t.running[e.Test], e.Output)
		}
		if b := t.logOf[top]; b != nil {
			b.WriteString(e.Output)
		}
	case "pass", "skip", "fail":
		t.result(e.Test).Seconds += e.Elapsed
		t.end(e.Test, e.Action)
		if e.Test == top && t.onEnd != nil {
			t.onEnd(e.Test)
		}
	}
}

// end closes the current run of test with action pass, skip or fail.
func (t *tally) end(test, action string) {
	r := t.result(test)
	out := t.running[test]
	delete(t.running, test)
	switch action {
	case "pass":
		at := t.passedAt[test]
		if at == nil {
			at = map[string]bool{}
			t.passedAt[test] = at
		}
		for _, line := range out {
			if m := logLine.FindStringSubmatch(strings.TrimRight(line, "\n")); m != nil {
				at[m[1]] = true
			}
		}
	case "skip":
		r.Skipped++
		if _, seen := t.skipWhy[test]; !seen {
			t.skipWhy[test] = skipReason(out)
		}
	case "fail":
		r.Failed++
		if _, seen := t.firstFail[test]; !seen {
			t.firstFail[test] = out
		}
		t.lastFail[test] = out
		if t.onFail != nil {
			t.onFail(test)
		}
	}
	if test == topLevel(test) {
		if b := t.logOf[test]; b != nil && action == "fail" {
			fmt.Fprintf(&t.failureLog, "===== %s: run %d, FAIL\n%s\n", test, r.Runs, b.String())
		}
		delete(t.logOf, test)
	}
}

// finish ends the invocation: goErr is the go command's exit error (nil
// when it succeeded) and stderr what it wrote there. Tests still running
// were cut short by the crash of the package and failed.
func (t *tally) finish(goErr error, stderr string) {
	crashed := len(t.running) > 0
	for _, test := range t.order {
		if _, ok := t.running[test]; ok {
			t.end(test, "fail")
		}
	}
	anyFailed := false
	for _, r := range t.results {
		anyFailed = anyFailed || r.Failed > 0
	}
	t.cut = crashed || ((t.pkgFailed || goErr != nil) && len(t.order) == 0)
	if (t.pkgFailed || goErr != nil) && !anyFailed {
		r := t.result(packageRow)
		r.Runs, r.Failed = 1, 1
		out := append(append([]string{}, t.pkgOut...), strings.SplitAfter(stderr, "\n")...)
		t.firstFail[packageRow] = out
		if goErr != nil && strings.TrimSpace(strings.Join(out, "")) == "" {
			t.firstFail[packageRow] = []string{goErr.Error()}
		}
	}
	if crashed || t.pkgFailed || goErr != nil {
		fmt.Fprintf(&t.failureLog, "===== package output\n%s", strings.Join(t.pkgOut, ""))
		if stderr != "" {
			fmt.Fprintf(&t.failureLog, "===== go test's stderr\n%s", stderr)
		}
		if goErr != nil {
			fmt.Fprintf(&t.failureLog, "===== go test: %v\n", goErr)
		}
	}
}

// expect adds a missing row for each listed test that never ran.
func (t *tally) expect(tests []string) {
	for _, test := range tests {
		if _, ok := t.results[test]; ok {
			continue
		}
		r := t.result(test)
		r.Missing = true
		switch {
		case t.interrupted:
			r.Message = "not run: interrupted"
		case t.cut:
			r.Message = "not run: the package failed before it"
		default:
			r.Message = "not run: no test of this name in the package"
		}
	}
}

// Results returns every test's result, in the order they first ran, each
// with its message.
func (t *tally) Results() []result {
	out := make([]result, 0, len(t.order))
	for _, test := range t.order {
		r := *t.results[test]
		switch {
		case r.Missing:
		case r.Failed > 0:
			r.Message = t.failureMessage(test)
		case r.Skipped > 0:
			r.Message = t.skipWhy[test]
		}
		out = append(out, r)
	}
	return out
}

// FailureLog is the whole output of every failing run, and of the package
// when it failed.
func (t *tally) FailureLog() string { return t.failureLog.String() }

// Failed reports whether any test, or the package, failed.
func (t *tally) Failed() bool {
	for _, r := range t.results {
		if r.Failed > 0 {
			return true
		}
	}
	return false
}

// logLine matches what t.Log, t.Error, t.Fatal and t.Skip print: the file
// and line, then the message.
var logLine = regexp.MustCompile(`^\s+([\w.-]+\.go:\d+): (.*)$`)

// failureMessage is the line that says why the first failing run of test
// failed: a panic (a timeout is one) or a data race; else, when a subtest
// failed, which one and why; else the test's first t.Error or t.Fatal
// line, told from the t.Log lines before it because the passing runs
// printed those too (a test that never passed may show a t.Log line).
func (t *tally) failureMessage(test string) string {
	return t.messageOf(test, t.firstFail)
}

// runMessage is failureMessage for the latest failing run of test, told
// as it ends.
func (t *tally) runMessage(test string) string {
	return t.messageOf(test, t.lastFail)
}

// messageOf is the message of the failing run of test whose own output
// fails holds, and of its subtests'.
func (t *tally) messageOf(test string, fails map[string][]string) string {
	lines := fails[test]
	for i, line := range lines {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "panic: "):
			return line
		case strings.HasPrefix(line, "WARNING: DATA RACE"):
			return "DATA RACE" + raceSite(lines[i+1:])
		}
	}
	for _, sub := range t.order {
		name, isSub := strings.CutPrefix(sub, test+"/")
		if _, failed := fails[sub]; isSub && !strings.Contains(name, "/") && failed {
			return name + ": " + t.messageOf(sub, fails)
		}
	}
	var first string
	for _, line := range lines {
		m := logLine.FindStringSubmatch(strings.TrimRight(line, "\n"))
		if m == nil || strings.HasPrefix(m[1], "testing.go:") {
			continue
		}
		if !t.passedAt[test][m[1]] {
			return m[1] + ": " + m[2]
		}
		if first == "" {
			first = m[1] + ": " + m[2]
		}
	}
	if first != "" {
		return first
	}
	for _, line := range lines {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "=== ") && !strings.HasPrefix(line, "--- ") &&
			!strings.HasPrefix(line, "# ") && !strings.HasPrefix(line, "FAIL") && line != "PASS" {
			return line
		}
	}
	return "failed without a message (see the log)"
}

// raceSite names the function of the first access a race report lists.
func raceSite(lines []string) string {
	for i, line := range lines {
		if (strings.HasPrefix(line, "Write at") || strings.HasPrefix(line, "Read at")) && i+1 < len(lines) {
			return ": " + strings.TrimSpace(lines[i+1])
		}
	}
	return ""
}

// skipReason is the message of t.Skip: the last message of the run, after
// any t.Log lines.
func skipReason(out []string) string {
	why := ""
	for _, line := range out {
		if m := logLine.FindStringSubmatch(strings.TrimRight(line, "\n")); m != nil {
			why = m[2]
		}
	}
	return why
}
