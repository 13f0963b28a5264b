package scenario

import (
	"slices"
	"sort"
	"time"

	"github.com/seckill-lab/seckill/loadtest/results"
)

// percentile of durations by the nearest-rank method, in milliseconds.
func percentileMS(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(q*float64(len(s))+0.999999) - 1
	return results.MS(s[max(0, min(rank, len(s)-1))])
}

// writtenOrders lists a tally's 201 order numbers, sorted.
func (t *tally) writtenOrders() []string {
	out := make([]string, 0, len(t.written))
	for no := range t.written {
		out = append(out, no)
	}
	slices.Sort(out)
	return out
}

// acceptedOrders lists a tally's 202 order numbers, sorted.
func (t *tally) acceptedOrders() []string {
	out := make([]string, 0, len(t.accepted))
	for no := range t.accepted {
		out = append(out, no)
	}
	sort.Strings(out)
	return out
}
