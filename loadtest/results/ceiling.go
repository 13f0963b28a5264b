package results

import (
	"fmt"
	"time"

	"github.com/seckill-lab/seckill/loadtest/cpu"
)

// Ceiling is one baseline measured at one level of buyers in flight.
type Ceiling struct {
	Name      string  `json:"name"`
	Workers   int     `json:"workers"`
	Requests  int     `json:"requests"`
	OK        int     `json:"ok"`
	PerSecond float64 `json:"per_second"` // OK answers (or committed sales) per second
	Note      string  `json:"note,omitempty"`
	// With --repeat: the per-second figure of every round, in order; the
	// fields above are the median round's.
	Runs []float64 `json:"runs,omitempty"`
	cpu.Figures
	Tally `json:"-"`
}

const (
	BaselineHTTP         = "http-ceiling"
	BaselineRedis        = "redis-round-trip"
	BaselineSoldOutKeyed = "sold-out-keyed"
	BaselineSoldOutNoKey = "sold-out-keyless"
	BaselineHotRow       = "raw-hot-row"
)

// Add counts one slice of a baseline into c: its requests, answers,
// other statuses, time and CPU.
func (c *Ceiling) Add(slice Ceiling, used *cpu.Usage) {
	c.Requests += slice.Requests
	c.OK += slice.OK
	c.OKStatus, c.Limit = slice.OKStatus, slice.Limit
	c.Asked += slice.Asked
	c.Capped = c.Capped || slice.Capped
	c.Elapsed += slice.Elapsed
	for code, n := range slice.Others {
		if c.Others == nil {
			c.Others = map[int]int{}
		}
		c.Others[code] += n
	}
	c.SlicesCPU = cpu.Sum(c.SlicesCPU, used)
}

// Settle turns the sums of add into the baseline's figures.
func (c *Ceiling) Settle() {
	c.Sum()
	if c.SlicesCPU != nil {
		c.SetCPU(c.SlicesCPU)
	}
}

// SetCPU keeps a baseline's CPU and its CPU per OK answer.
func (c *Ceiling) SetCPU(u *cpu.Usage) {
	c.CPU = u
	c.CPUPerAnswerMS, c.ServersPerAnswerMS = cpu.PerUnit(u.Seconds, c.OK), cpu.PerUnit(u.Servers(), c.OK)
	if n := u.Unavailable(); n != "" {
		c.Note = JoinNotes(c.Note, n)
	}
}

// JoinNotes joins two notes with "; ", either of which may be empty.
func JoinNotes(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "; " + b
}

// Tally is what a baseline's requests came to before its figures
// are set (sum), over one attack or over its slices (add).
type Tally struct {
	OKStatus int
	Asked    int // requests it was to send
	Others   map[int]int
	Capped   bool // stopped at the --max-duration cap (Limit)
	Limit    time.Duration
	// The time from each attack's first request to its last answer,
	// summed, and the CPU of the slices.
	Elapsed   time.Duration
	SlicesCPU *cpu.Usage
}

// Sum sets a baseline's answers per second and its note from its tally.
func (c *Ceiling) Sum() {
	if c.Elapsed > 0 && c.OK > 0 {
		c.PerSecond = float64(c.OK) / c.Elapsed.Seconds()
	}
	var note string
	if len(c.Others) > 0 {
		note = fmt.Sprintf("not %d: %s", c.OKStatus, StatusCounts(&Row{Statuses: c.Others}, false))
	}
	if c.Capped {
		note = JoinNotes(note, fmt.Sprintf("stopped at the --max-duration cap (%v) after %d of %d requests", c.Limit, c.Requests, c.Asked))
	}
	c.Note = note
}

// BaselineSlices is how many slices each HTTP baseline is sent in. The
// slices are taken in turn (a slice of every baseline, then the next
// slice of every one), so a drift of the machine over a round (a process
// warming up, another program's load, a GC cycle) meets every baseline
// alike instead of the one that ran while it lasted; each baseline's CPU
// and answers are the sums over its slices.
const BaselineSlices = 4
