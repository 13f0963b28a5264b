package scenario

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory"
	"github.com/seckill-lab/seckill/loadtest/fleet"
	"github.com/seckill-lab/seckill/loadtest/results"
)

// Who won. A flash sale's buyers judge it by whether the first to ask were
// the ones served. The paced scenario (paced.go) sends buyers one after
// another and records the instant each request left; the first-come score
// is the share of the units that went to the first `stock` of them.

// FirstComeTargets are the lowest first-come scores the paced scenario
// accepts, per stage, by default: a stage that takes its units in one
// atomic step serves buyers in the order their requests reach it. The lock
// stages let a late arrival take a lock that was just released ahead of
// buyers already waiting (barging), and have no target: their score is
// shown as it is. --first-come-target changes them for a run: a fleet
// whose redis-lock runs a fair lock is held to redis-lock=0.95.
var FirstComeTargets = map[string]float64{
	inventory.StageDBAtomic:    0.95,
	inventory.StageRedisAtomic: 0.95,
	inventory.StageRedisStream: 0.95,
}

// arrival is one paced buyer: its place in the plan, when the plan meant
// it to leave, when its request was written (zero: never written), and
// whether it was answered with a unit.
type arrival struct {
	seq      int
	intended time.Time
	sent     time.Time
	won      bool
}

// firstCome is the first-come score of the arrivals: among those whose
// request was written, in the order they were written, the share of the
// units won that went to the first stock of them. firstWon counts those
// units and won all of them; ok is false when nobody won a unit (or the
// stock was 0), where no share can be taken.
func firstCome(arrivals []arrival, stock int) (score float64, firstWon, won int, ok bool) {
	for _, a := range arrivals {
		if a.won {
			won++
		}
	}
	asked := writtenOrder(arrivals)
	for _, a := range asked[:min(stock, len(asked))] {
		if a.won {
			firstWon++
		}
	}
	if won == 0 || stock <= 0 {
		return 0, firstWon, won, false
	}
	return float64(firstWon) / float64(won), firstWon, won, true
}

// writtenOrder is the arrivals whose request was written, in the order
// they were written; equal instants keep the planned order.
func writtenOrder(arrivals []arrival) []arrival {
	asked := make([]arrival, 0, len(arrivals))
	for _, a := range arrivals {
		if !a.sent.IsZero() {
			asked = append(asked, a)
		}
	}
	sort.SliceStable(asked, func(i, j int) bool {
		if !asked[i].sent.Equal(asked[j].sent) {
			return asked[i].sent.Before(asked[j].sent)
		}
		return asked[i].seq < asked[j].seq
	})
	return asked
}

// lateWins counts the units won by arrivals more than window places past
// the first stock, in the order the requests were written. With window
// the places the lab's p99 lateness spans (p99 jitter over the pace), these
// are wins the lab's own reordering of neighbours cannot explain: a buyer
// who came that much later was served ahead of one who waited.
func lateWins(arrivals []arrival, stock, window int) int {
	n := 0
	for i, a := range writtenOrder(arrivals) {
		if a.won && i >= stock+window {
			n++
		}
	}
	return n
}

// jitterWindow is how many places of the paced order the lab's p99
// lateness spans.
func jitterWindow(p99ms, paceMS float64) int {
	if paceMS <= 0 {
		return 0
	}
	return int(math.Ceil(p99ms / paceMS))
}

// jitter is how far the lab's own sending strayed from its plan: how late
// each request was written after its planned instant, and how many left
// before the one planned just ahead of them.
type jitter struct {
	P50ms, P99ms, MaxMs float64
	// Reordered counts the arrivals written before the arrival planned
	// just ahead of them: neighbours the lab itself swapped.
	Reordered int
	// Measured is how many arrivals the figures cover (those written).
	Measured int
}

// schedulingJitter measures the lateness (written minus planned) of the
// arrivals that were written, and the neighbours written out of order.
// An arrival written early counts as 0 late.
func schedulingJitter(arrivals []arrival) jitter {
	planned := slices.Clone(arrivals)
	sort.SliceStable(planned, func(i, j int) bool { return planned[i].seq < planned[j].seq })
	var late []time.Duration
	var j jitter
	var prev time.Time
	for _, a := range planned {
		if a.sent.IsZero() {
			continue
		}
		late = append(late, max(0, a.sent.Sub(a.intended)))
		if !prev.IsZero() && a.sent.Before(prev) {
			j.Reordered++
		}
		prev = a.sent
	}
	j.Measured = len(late)
	if len(late) > 0 {
		j.P50ms, j.P99ms = percentileMS(late, 0.50), percentileMS(late, 0.99)
		j.MaxMs = results.MS(slices.Max(late))
	}
	return j
}

// DescribeTargets lists targets as stage=score, in the stages' order.
func DescribeTargets(targets map[string]float64) string {
	var parts []string
	for _, st := range inventory.Stages {
		if v, ok := targets[st]; ok {
			parts = append(parts, fmt.Sprintf("%s=%g", st, v))
		}
	}
	return strings.Join(parts, ",")
}

// FairLockTarget holds redis-lock to the atomic stages' first-come target
// when every target says its redis-lock runs the fair lock (lock_fair in
// /api/v1/info), unless --first-come-target named redis-lock. It reports
// whether it did.
func FairLockTarget(o *Config, f *fleet.Fleet) bool {
	if o.FirstComeNamed[inventory.StageRedisLock] || len(f.Infos) == 0 {
		return false
	}
	for _, in := range f.Infos {
		if !in.LockFair {
			return false
		}
	}
	o.FirstComeTargets = maps.Clone(o.FirstComeTargets)
	o.FirstComeTargets[inventory.StageRedisLock] = FirstComeTargets[inventory.StageRedisAtomic]
	return true
}
