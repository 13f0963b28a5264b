package report

import (
	"fmt"
	"slices"
	"time"

	"github.com/seckill-lab/seckill/loadtest/results"
)

// The fell-behind rule's name, as the verdict names it (the report reads
// rows, not the verdict's package).
const ruleFellBehind = "fell-behind"

// closedLoad says what the closed scenario's population did: its users,
// their think time, and how long or how often they came back.
func closedLoad(s Settings) string {
	load := fmt.Sprintf("%d users, think %v", s.ClosedUsers, msDuration(s.ClosedThinkMS))
	if s.ClosedDurationMS > 0 {
		load += fmt.Sprintf(", for %v", msDuration(s.ClosedDurationMS))
	}
	if s.ClosedIterations > 0 {
		load += fmt.Sprintf(", at most %d buys each", s.ClosedIterations)
	}
	return load
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// fellBehindCell is what the fell-behind rule made of r: kept, BROKEN, or
// n/a when it does not apply to r's crowd (a closed model, a burst; the
// row's not_judged says why).
func fellBehindCell(r results.Row) string {
	switch {
	case slices.Contains(r.Broken, ruleFellBehind):
		return "BROKEN"
	case r.NotJudged[ruleFellBehind] != "":
		return "n/a"
	}
	return "kept"
}
