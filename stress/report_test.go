package main

import (
	"strings"
	"testing"
)

// A test that passed is not a plain 0 when some runs, or some subtests in
// every run, were skipped; a missing test is not a 0 either.
func TestReportFailuresCell(t *testing.T) {
	r := report{elapsed: []envTime{{env: "bare"}}, rows: []row{
		{env: "bare", pkg: "./p", result: result{Test: "TestA", Runs: 2}},
		{env: "bare", pkg: "./p", result: result{Test: "TestA/sqlite", Runs: 2}},
		{env: "bare", pkg: "./p", result: result{Test: "TestA/mysql", Runs: 2, Skipped: 2, Message: "no MySQL"}},
		{env: "bare", pkg: "./p", result: result{Test: "TestB", Runs: 2, Failed: 1, Skipped: 1, Message: "b_test.go:3: broke"}},
		{env: "bare", pkg: "./p", result: result{Test: "TestC", Missing: true, Message: "not run"}},
	}}
	for i, want := range []string{"0 (1 subtest skipped)", "0", "skipped", "1 (1 of 2 runs skipped)", "MISSING"} {
		if got := r.failures(r.rows[i]); got != want {
			t.Errorf("%s: %q, want %q", r.rows[i].Test, got, want)
		}
	}
	var out strings.Builder
	r.text(&out)
	if strings.Contains(out.String(), "TestA/sqlite") || !strings.Contains(out.String(), "bare: 1 of 3 tests failed, 0 skipped in every run, 1 missing") {
		t.Errorf("the terminal table:\n%s", out.String())
	}
	if md := r.markdown(); !strings.Contains(md, "| bare | ./p | TestA/sqlite | 2 | 0s | 0 |  |") {
		t.Errorf("table.md lacks a subtest:\n%s", md)
	}
}
