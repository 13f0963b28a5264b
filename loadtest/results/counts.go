package results

import (
	"fmt"
	"sort"
	"strings"
)

// CountsText lists counts by name, e.g. "201 ×3, no answer ×1", in name
// order; "none" when empty.
func CountsText(m map[string]int) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	var parts []string
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// StatusCounts lists r's answers by status, e.g. "500 ×12, 503 ×3",
// lowest status first, with "no answer" for requests that got none. With
// serverErrors it lists only the 5xx that count as server errors: a 503
// with Retry-After is overload, not an error.
func StatusCounts(r *Row, serverErrors bool) string {
	codes := make([]int, 0, len(r.Statuses))
	for c := range r.Statuses {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var parts []string
	for _, c := range codes {
		n := r.Statuses[c]
		switch {
		case serverErrors && c < 500:
			continue
		case serverErrors && c == 503:
			n -= r.Overloaded
		case c == 0:
			parts = append(parts, fmt.Sprintf("no answer ×%d", n))
			continue
		}
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d ×%d", c, n))
		}
	}
	return strings.Join(parts, ", ")
}

// TurnedAwayCounts lists the refusals that sent buyers away, e.g.
// "429 ×100, 503 ×70".
func TurnedAwayCounts(r *Row) string {
	var parts []string
	for _, c := range []struct {
		name string
		n    int
	}{{"429", r.TooMany}, {"503", r.Overloaded}, {"409 sold-out", r.SoldOut}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%s ×%d", c.name, c.n))
		}
	}
	return strings.Join(parts, ", ")
}

// CommonError quotes the most frequent transport error, for a reader to
// tell a refused connection from a timeout at a glance.
func CommonError(errs map[string]int) string {
	best, n := "", 0
	for e, c := range errs {
		if c > n || (c == n && e < best) {
			best, n = e, c
		}
	}
	if best == "" {
		return ""
	}
	if len(best) > 160 {
		best = best[:160] + "…"
	}
	return fmt.Sprintf("; most often %q", best)
}

// OtherProblems summarises the problem types other than sold-out.
func OtherProblems(m map[string]int) string {
	var parts []string
	for k, n := range m {
		if k != "/problems/sold-out" {
			parts = append(parts, fmt.Sprintf("%s ×%d", strings.TrimPrefix(k, "/problems/"), n))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	sort.Strings(parts)
	return "answers: " + strings.Join(parts, ", ")
}
