package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// feed gives tl the events of stream, one test2json object per line, as
// `go test -json` prints them (the Time fields left out), and finishes it
// as a go command that exited with goErr.
func feed(t *testing.T, tl *tally, stream string, goErr error) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(stream), "\n") {
		var e event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("bad canned event %s: %v", line, err)
		}
		tl.add(e)
	}
	tl.finish(goErr, "")
}

// byTest indexes results by test name.
func byTest(rs []result) map[string]result {
	m := map[string]result{}
	for _, r := range rs {
		m[r.Test] = r
	}
	return m
}

// Two runs (-count=2) of a passing test, a test that fails in a subtest
// after a t.Log of its own, and a skipped test; the events are those Go
// 1.26 printed for such a package.
const twoRuns = `
{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestPass"}
{"Action":"output","Package":"p","Test":"TestPass","Output":"=== RUN   TestPass\n"}
{"Action":"output","Package":"p","Test":"TestPass","Output":"    a_test.go:9: hello\n"}
{"Action":"output","Package":"p","Test":"TestPass","Output":"--- PASS: TestPass (0.00s)\n"}
{"Action":"pass","Package":"p","Test":"TestPass","Elapsed":0}
{"Action":"run","Package":"p","Test":"TestFail"}
{"Action":"output","Package":"p","Test":"TestFail","Output":"=== RUN   TestFail\n"}
{"Action":"output","Package":"p","Test":"TestFail","Output":"    a_test.go:11: a log line\n"}
{"Action":"run","Package":"p","Test":"TestFail/sub1"}
{"Action":"output","Package":"p","Test":"TestFail/sub1","Output":"=== RUN   TestFail/sub1\n"}
{"Action":"output","Package":"p","Test":"TestFail/sub1","Output":"--- PASS: TestFail/sub1 (0.00s)\n"}
{"Action":"pass","Package":"p","Test":"TestFail/sub1","Elapsed":0}
{"Action":"run","Package":"p","Test":"TestFail/sub2"}
{"Action":"output","Package":"p","Test":"TestFail/sub2","Output":"=== RUN   TestFail/sub2\n"}
{"Action":"output","Package":"p","Test":"TestFail/sub2","Output":"    a_test.go:13: sub2 broke: 2\n"}
{"Action":"output","Package":"p","Test":"TestFail/sub2","Output":"--- FAIL: TestFail/sub2 (0.00s)\n"}
{"Action":"fail","Package":"p","Test":"TestFail/sub2","Elapsed":0}
{"Action":"output","Package":"p","Test":"TestFail","Output":"--- FAIL: TestFail (0.00s)\n"}
{"Action":"fail","Package":"p","Test":"TestFail","Elapsed":0}
{"Action":"run","Package":"p","Test":"TestSkip"}
{"Action":"output","Package":"p","Test":"TestSkip","Output":"=== RUN   TestSkip\n"}
{"Action":"output","Package":"p","Test":"TestSkip","Output":"    a_test.go:15: no service here\n"}
{"Action":"output","Package":"p","Test":"TestSkip","Output":"--- SKIP: TestSkip (0.00s)\n"}
{"Action":"skip","Package":"p","Test":"TestSkip","Elapsed":0}
{"Action":"run","Package":"p","Test":"TestPass"}
{"Action":"output","Package":"p","Test":"TestPass","Output":"=== RUN   TestPass\n"}
{"Action":"output","Package":"p","Test":"TestPass","Output":"--- PASS: TestPass (0.00s)\n"}
{"Action":"pass","Package":"p","Test":"TestPass","Elapsed":0}
{"Action":"run","Package":"p","Test":"TestFail"}
{"Action":"output","Package":"p","Test":"TestFail","Output":"=== RUN   TestFail\n"}
{"Action":"run","Package":"p","Test":"TestFail/sub1"}
{"Action":"pass","Package":"p","Test":"TestFail/sub1","Elapsed":0}
{"Action":"run","Package":"p","Test":"TestFail/sub2"}
{"Action":"output","Package":"p","Test":"TestFail/sub2","Output":"    a_test.go:13: sub2 broke: 3\n"}
{"Action":"fail","Package":"p","Test":"TestFail/sub2","Elapsed":0}
{"Action":"fail","Package":"p","Test":"TestFail","Elapsed":0}
{"Action":"run","Package":"p","Test":"TestSkip"}
{"Action":"output","Package":"p","Test":"TestSkip","Output":"    a_test.go:15: no service here\n"}
{"Action":"skip","Package":"p","Test":"TestSkip","Elapsed":0}
{"Action":"output","Package":"p","Output":"FAIL\n"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t0.004s\n"}
{"Action":"fail","Package":"p","Elapsed":0.005}
`

func TestTallyCountsEachTestAndSubtest(t *testing.T) {
	tl := newTally()
	var told []string
	var messages []string
	tl.onFail = func(test string) {
		told = append(told, test)
		if test == "TestFail" {
			messages = append(messages, tl.runMessage(test))
		}
	}
	feed(t, tl, twoRuns, errors.New("exit status 1"))
	// Each failing run is told with its own message, as it ends.
	if want := []string{"sub2: a_test.go:13: sub2 broke: 2", "sub2: a_test.go:13: sub2 broke: 3"}; strings.Join(messages, "|") != strings.Join(want, "|") {
		t.Errorf("the failing runs were told with %q, want %q", messages, want)
	}
	tl.expect([]string{"TestPass", "TestFail", "TestSkip", "TestRenamed"})
	got := byTest(tl.Results())

	for _, want := range []result{
		{Test: "TestPass", Runs: 2},
		{Test: "TestFail", Runs: 2, Failed: 2, Message: "sub2: a_test.go:13: sub2 broke: 2"},
		{Test: "TestFail/sub1", Runs: 2},
		{Test: "TestFail/sub2", Runs: 2, Failed: 2, Message: "a_test.go:13: sub2 broke: 2"},
		{Test: "TestSkip", Runs: 2, Skipped: 2, Message: "no service here"},
		{Test: "TestRenamed", Missing: true, Message: "not run: no test of this name in the package"},
	} {
		if got[want.Test] != want {
			t.Errorf("%s: got %+v, want %+v", want.Test, got[want.Test], want)
		}
	}
	if _, ok := got[packageRow]; ok {
		t.Errorf("the package failed because its tests did; want no %s row", packageRow)
	}
	if len(got) != 6 {
		t.Errorf("%d rows, want 6: %+v", len(got), got)
	}
	if want := "TestFail/sub2 TestFail TestFail/sub2 TestFail"; strings.Join(told, " ") != want {
		t.Errorf("told of failed runs %q, want %q", told, want)
	}
	if cell := (report{}).failures(row{result: got["TestSkip"]}); cell != "skipped" {
		t.Errorf("a test skipped in every run shows %q in the failures column, want skipped", cell)
	}
	log := tl.FailureLog()
	for _, want := range []string{"===== TestFail: run 1, FAIL", "sub2 broke: 2", "===== TestFail: run 2, FAIL", "sub2 broke: 3", "===== package output"} {
		if !strings.Contains(log, want) {
			t.Errorf("the failure log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "hello") || strings.Contains(log, "no service here") {
		t.Errorf("the failure log holds the output of runs that did not fail:\n%s", log)
	}
}

// A test binary that times out (or panics) stops mid-test: the tests
// running get no end event, their output holds the panic, and the package
// fails.
func TestTallyCountsACrashAgainstTheRunningTests(t *testing.T) {
	const timeout = `
{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestPass"}
{"Action":"pass","Package":"p","Test":"TestPass","Elapsed":0}
{"Action":"run","Package":"p","Test":"TestHang"}
{"Action":"output","Package":"p","Test":"TestHang","Output":"=== RUN   TestHang\n"}
{"Action":"run","Package":"p","Test":"TestHang/inner"}
{"Action":"output","Package":"p","Test":"TestHang/inner","Output":"    a_test.go:18: about to hang\n"}
{"Action":"output","Package":"p","Test":"TestHang/inner","Output":"panic: test timed out after 3s\n"}
{"Action":"output","Package":"p","Test":"TestHang/inner","Output":"\trunning tests:\n"}
{"Action":"output","Package":"p","Test":"TestHang/inner","Output":"\t\tTestHang (3s)\n"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t3.006s\n"}
{"Action":"fail","Package":"p","Elapsed":3.006}
`
	tl := newTally()
	feed(t, tl, timeout, errors.New("exit status 1"))
	tl.expect([]string{"TestPass", "TestHang", "TestNext"})
	got := byTest(tl.Results())
	for _, want := range []result{
		{Test: "TestPass", Runs: 1},
		{Test: "TestHang", Runs: 1, Failed: 1, Message: "inner: panic: test timed out after 3s"},
		{Test: "TestHang/inner", Runs: 1, Failed: 1, Message: "panic: test timed out after 3s"},
		{Test: "TestNext", Missing: true, Message: "not run: the package failed before it"},
	} {
		if got[want.Test] != want {
			t.Errorf("%s: got %+v, want %+v", want.Test, got[want.Test], want)
		}
	}
	if !strings.Contains(tl.FailureLog(), "about to hang") {
		t.Errorf("the failure log lacks the crashed run:\n%s", tl.FailureLog())
	}
}

// A package that fails while no test runs, or with every test passed, is a
// failure of the package row.
func TestTallyPackageFailures(t *testing.T) {
	for _, c := range []struct {
		name, stream, want string
	}{{
		name: "build error",
		stream: `
{"ImportPath":"p [p.test]","Action":"build-output","Output":"# p [p.test]\n"}
{"ImportPath":"p [p.test]","Action":"build-output","Output":"./b.go:2:12: undefined: y\n"}
{"ImportPath":"p [p.test]","Action":"build-fail"}
{"Action":"start","Package":"p"}
{"Action":"output","Package":"p","Output":"FAIL\tp [build failed]\n"}
{"Action":"fail","Package":"p","Elapsed":0,"FailedBuild":"p [p.test]"}
`,
		want: "./b.go:2:12: undefined: y",
	}, {
		name: "goleak after the tests passed",
		stream: `
{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestPass"}
{"Action":"pass","Package":"p","Test":"TestPass","Elapsed":0}
{"Action":"output","Package":"p","Output":"PASS\n"}
{"Action":"output","Package":"p","Output":"goleak: Errors on successful test run: found unexpected goroutines:\n"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t0.1s\n"}
{"Action":"fail","Package":"p","Elapsed":0.1}
`,
		want: "goleak: Errors on successful test run: found unexpected goroutines:",
	}} {
		t.Run(c.name, func(t *testing.T) {
			tl := newTally()
			feed(t, tl, c.stream, errors.New("exit status 1"))
			got := byTest(tl.Results())[packageRow]
			if want := (result{Test: packageRow, Runs: 1, Failed: 1, Message: c.want}); got != want {
				t.Errorf("got %+v, want %+v", got, want)
			}
			if !tl.Failed() {
				t.Error("Failed() = false")
			}
		})
	}
}

// The first failure message is the t.Error line, not the t.Log lines the
// passing runs printed too, and a data race names where it happened.
func TestTallyFirstFailureMessage(t *testing.T) {
	const stream = `
{"Action":"run","Package":"p","Test":"TestFigures"}
{"Action":"output","Package":"p","Test":"TestFigures","Output":"    figures_test.go:40: 200 buyers, 50 sold\n"}
{"Action":"pass","Package":"p","Test":"TestFigures","Elapsed":1}
{"Action":"run","Package":"p","Test":"TestFigures"}
{"Action":"output","Package":"p","Test":"TestFigures","Output":"    figures_test.go:40: 200 buyers, 51 sold\n"}
{"Action":"output","Package":"p","Test":"TestFigures","Output":"    figures_test.go:52: oversold: 51 of 50 sold\n"}
{"Action":"output","Package":"p","Test":"TestFigures","Output":"    figures_test.go:53: second complaint\n"}
{"Action":"fail","Package":"p","Test":"TestFigures","Elapsed":1}
{"Action":"run","Package":"p","Test":"TestRacy"}
{"Action":"output","Package":"p","Test":"TestRacy","Output":"==================\n"}
{"Action":"output","Package":"p","Test":"TestRacy","Output":"WARNING: DATA RACE\n"}
{"Action":"output","Package":"p","Test":"TestRacy","Output":"Write at 0x00c000012345 by goroutine 8:\n"}
{"Action":"output","Package":"p","Test":"TestRacy","Output":"  p.TestRacy.func1()\n"}
{"Action":"output","Package":"p","Test":"TestRacy","Output":"    testing.go:1617: race detected during execution of test\n"}
{"Action":"fail","Package":"p","Test":"TestRacy","Elapsed":1}
{"Action":"fail","Package":"p","Elapsed":2}
`
	tl := newTally()
	feed(t, tl, stream, errors.New("exit status 1"))
	got := byTest(tl.Results())
	if m := got["TestFigures"].Message; m != "figures_test.go:52: oversold: 51 of 50 sold" {
		t.Errorf("TestFigures: %q", m)
	}
	if m := got["TestRacy"].Message; m != "DATA RACE: p.TestRacy.func1()" {
		t.Errorf("TestRacy: %q", m)
	}
}

// TestTallyAddsUpTimeAndTellsEachEnd: each test's runs add up the Elapsed
// go test reports (subtests their own), and every ended run of a top-level
// test is told, passed, skipped or failed, so that a long run can say how
// far it got.
func TestTallyAddsUpTimeAndTellsEachEnd(t *testing.T) {
	tl := newTally()
	var ended []string
	tl.onEnd = func(test string) { ended = append(ended, test) }
	feed(t, tl, `
{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":1.5}
{"Action":"run","Package":"p","Test":"TestB"}
{"Action":"run","Package":"p","Test":"TestB/sub"}
{"Action":"fail","Package":"p","Test":"TestB/sub","Elapsed":0.25}
{"Action":"fail","Package":"p","Test":"TestB","Elapsed":0.5}
{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"skip","Package":"p","Test":"TestA","Elapsed":2}
{"Action":"fail","Package":"p","Elapsed":4.3}
`, errors.New("exit status 1"))
	got := byTest(tl.Results())
	for test, want := range map[string]float64{"TestA": 3.5, "TestB": 0.5, "TestB/sub": 0.25} {
		if got[test].Seconds != want {
			t.Errorf("%s took %v s, want %v", test, got[test].Seconds, want)
		}
	}
	if want := "TestA TestB TestA"; strings.Join(ended, " ") != want {
		t.Errorf("told of ended runs %q, want %q", strings.Join(ended, " "), want)
	}
	if cell := (row{result: got["TestA"]}).time(); cell != "4s" {
		t.Errorf("TestA's time cell: %q, want 4s (3.5 s, rounded)", cell)
	}
}
