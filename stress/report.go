package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// row is one test's result in one environment.
type row struct {
	env, pkg string
	result
}

type envTime struct {
	env     string
	elapsed time.Duration
}

// report is the table of a whole run.
type report struct {
	count, hogs int
	noDocker    bool
	elapsed     []envTime
	rows        []row
}

func (r report) failed() bool {
	for _, row := range r.rows {
		if row.Failed > 0 || row.Missing {
			return true
		}
	}
	return false
}

// failures is the failures cell: a test skipped in every run, or never
// run, says so instead of a reassuring 0, and so does a test that passed
// while some of its subtests were skipped in every run.
func (r report) failures(row row) string {
	switch {
	case row.Missing:
		return "MISSING"
	case row.Runs > 0 && row.Skipped == row.Runs:
		return "skipped"
	}
	var notes []string
	if row.Skipped > 0 {
		notes = append(notes, fmt.Sprintf("%d of %d runs skipped", row.Skipped, row.Runs))
	}
	subs := 0
	for _, sub := range r.rows {
		if sub.env == row.env && sub.pkg == row.pkg && strings.HasPrefix(sub.Test, row.Test+"/") &&
			sub.Runs > 0 && sub.Skipped == sub.Runs {
			subs++
		}
	}
	if subs > 0 {
		notes = append(notes, plural(subs, "subtest")+" skipped")
	}
	if notes == nil {
		return fmt.Sprint(row.Failed)
	}
	return fmt.Sprintf("%d (%s)", row.Failed, strings.Join(notes, ", "))
}

// time is the time the row's runs took together, as go test reported it.
func (row row) time() string {
	return round(time.Duration(row.Seconds * float64(time.Second))).String()
}

// maxMessage is the longest message a cell shows; the logs have the rest.
const maxMessage = 160

func (row row) message() string {
	m := strings.Join(strings.Fields(row.Message), " ")
	if runes := []rune(m); len(runes) > maxMessage {
		m = string(runes[:maxMessage-1]) + "…"
	}
	return m
}

// text writes the table for a terminal: every top-level test, and the
// subtests that failed or are missing; table.md has every subtest.
func (r report) text(w io.Writer) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ENV\tPACKAGE\tTEST\tRUNS\tTIME\tFAILURES\tFIRST FAILURE, OR WHY SKIPPED")
	hidden := 0
	for _, row := range r.rows {
		if row.Test != topLevel(row.Test) && row.Failed == 0 && !row.Missing {
			hidden++
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", row.env, row.pkg, row.Test, row.Runs, row.time(), r.failures(row), row.message())
	}
	_ = tw.Flush()
	if hidden > 0 {
		fmt.Fprintf(w, "(%d subtests without failures are listed in table.md only)\n", hidden)
	}
	fmt.Fprintln(w, r.summary())
}

// summary is the last word: how many tests failed, were always skipped or
// are missing, in each environment.
func (r report) summary() string {
	var parts []string
	for _, e := range r.elapsed {
		tests, failed, skipped, missing := 0, 0, 0, 0
		for _, row := range r.rows {
			if row.env != e.env || row.Test != topLevel(row.Test) {
				continue
			}
			tests++
			switch {
			case row.Missing:
				missing++
			case row.Failed > 0:
				failed++
			case row.Runs > 0 && row.Skipped == row.Runs:
				skipped++
			}
		}
		parts = append(parts, fmt.Sprintf("%s: %d of %d tests failed, %d skipped in every run, %d missing (%s)",
			e.env, failed, tests, skipped, missing, round(e.elapsed)))
	}
	return strings.Join(parts, "; ")
}

// markdown is table.md: the settings, the summary, and every test and
// subtest.
func (r report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# make stress\n\n%d run(s) of each test under -race beside %d CPU hog(s)", r.count, r.hogs)
	if r.noDocker {
		b.WriteString("; bare runs without Docker (STRESS_NO_DOCKER=1)")
	}
	fmt.Fprintf(&b, ".\n\n%s.\n\n", r.summary())
	b.WriteString("| env | package | test | runs | time | failures | first failure, or why skipped |\n|---|---|---|---|--:|---|---|\n")
	cell := strings.NewReplacer("|", `\|`).Replace
	for _, row := range r.rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %s | %s |\n", row.env, row.pkg, cell(row.Test), row.Runs, row.time(), r.failures(row), cell(row.message()))
	}
	return b.String()
}
