package cpu

import (
	"context"
	"fmt"
	"strings"
)

// Kinds of CPU source, in the order the report lists them.
const (
	Instance = "instances"
	Redis    = "redis"
	MySQL    = "mysql"
	Lab      = "lab"
)

// Kinds are the kinds of source, in the order the report lists them.
var Kinds = []string{Instance, Redis, MySQL, Lab}

// Source is one process whose CPU time the lab reads.
type Source struct {
	Kind string
	Name string
	// Read returns the CPU seconds the process has used so far; nil when
	// the source is not measured at all, and Skip says why.
	Read func(ctx context.Context) (float64, error)
	Skip string
	How  string // how Read reads it, for the lab's opening lines
}

// Meter reads every source at once, before and after an attack.
type Meter struct {
	Sources []Source
}

// Reading is one reading of every source of a meter, in its order.
type Reading struct {
	seconds []float64
	errs    []error
}

// Usage is the CPU the processes spent over one attack.
type Usage struct {
	Parts []Part `json:"parts"`
	// Seconds is the sum of the parts measured; nil when a part that is
	// there could not be read, since the sum would then be too small.
	Seconds *float64 `json:"seconds,omitempty"`
}

// Part is one process's share of a Usage.
type Part struct {
	Kind    string   `json:"kind"`
	Name    string   `json:"name"`
	Seconds *float64 `json:"seconds,omitempty"`
	// Skipped says why a source is not measured at all; Unavailable why
	// one that is there could not be read this time.
	Skipped     string `json:"skipped,omitempty"`
	Unavailable string `json:"unavailable,omitempty"`
	// How is where the lab read it (a clock, a /metrics and why, INFO).
	How string `json:"how,omitempty"`
}

// read reads every source. A failed read is kept as an error: it never
// stops the attack.
func (m *Meter) Read(ctx context.Context) Reading {
	r := Reading{seconds: make([]float64, len(m.Sources)), errs: make([]error, len(m.Sources))}
	for i, s := range m.Sources {
		if s.Read == nil {
			continue
		}
		r.seconds[i], r.errs[i] = s.Read(ctx)
	}
	return r
}

// usage is the CPU each source spent between two readings.
func (m *Meter) Usage(before, after Reading) *Usage {
	u := &Usage{}
	total, complete := 0.0, true
	for i, s := range m.Sources {
		p := Part{Kind: s.Kind, Name: s.Name, How: s.How}
		switch {
		case s.Read == nil:
			p.Skipped = s.Skip
		case before.errs[i] != nil:
			p.Unavailable = before.errs[i].Error()
		case after.errs[i] != nil:
			p.Unavailable = after.errs[i].Error()
		case after.seconds[i] < before.seconds[i]:
			p.Unavailable = fmt.Sprintf("the counter went back from %.2f s to %.2f s: restarted?", before.seconds[i], after.seconds[i])
		default:
			d := after.seconds[i] - before.seconds[i]
			p.Seconds = &d
			total += d
		}
		if p.Unavailable != "" {
			complete = false
		}
		u.Parts = append(u.Parts, p)
	}
	if complete {
		u.Seconds = &total
	}
	return u
}

// Sum adds b's CPU to a's, process by process, into a new usage; a
// nil a is none yet. Both come from the same meter, so their parts are the
// same processes in the same order. A part unavailable in either is
// unavailable in the sum, and so is the total.
func Sum(a, b *Usage) *Usage {
	if a == nil || b == nil {
		if a == nil {
			return b
		}
		return a
	}
	u := &Usage{}
	total, complete := 0.0, true
	for i, p := range a.Parts {
		if i >= len(b.Parts) || b.Parts[i].Name != p.Name || b.Parts[i].Kind != p.Kind {
			p.Seconds, p.Unavailable = nil, "its readings come from different meters"
		} else if q := b.Parts[i]; p.Unavailable == "" && q.Unavailable != "" {
			p.Seconds, p.Unavailable = nil, q.Unavailable
		} else if p.Seconds != nil && q.Seconds != nil {
			s := *p.Seconds + *q.Seconds
			p.Seconds = &s
		}
		if p.Unavailable != "" {
			complete = false
		} else if p.Seconds != nil {
			total += *p.Seconds
		}
		u.Parts = append(u.Parts, p)
	}
	if complete {
		u.Seconds = &total
	}
	return u
}

// PerUnit is seconds spent per unit in milliseconds; nil when the seconds
// are unknown or there is nothing to divide by.
func PerUnit(seconds *float64, n int) *float64 {
	if seconds == nil || n <= 0 {
		return nil
	}
	v := *seconds * 1e3 / float64(n)
	return &v
}

// ofKind is the CPU seconds of the parts of one kind; nil when one of them
// could not be read or none was measured.
func (u *Usage) OfKind(kind string) *float64 {
	if u == nil {
		return nil
	}
	sum, any := 0.0, false
	for _, p := range u.Parts {
		if p.Kind != kind {
			continue
		}
		if p.Unavailable != "" {
			return nil
		}
		if p.Seconds != nil {
			sum += *p.Seconds
			any = true
		}
	}
	if !any {
		return nil
	}
	return &sum
}

// unavailable says which parts could not be read, or "".
func (u *Usage) Unavailable() string {
	if u == nil {
		return ""
	}
	var out []string
	for _, p := range u.Parts {
		if p.Unavailable != "" {
			out = append(out, fmt.Sprintf("%s CPU: unavailable (%s)", p.Name, p.Unavailable))
		}
	}
	return strings.Join(out, "; ")
}

// servers is the CPU seconds of every part but the lab's own: the
// processes that serve the answers. nil when one of them could not be read
// or none was measured.
func (u *Usage) Servers() *float64 {
	if u == nil {
		return nil
	}
	sum, any := 0.0, false
	for _, p := range u.Parts {
		if p.Kind == Lab {
			continue
		}
		if p.Unavailable != "" {
			return nil
		}
		if p.Seconds != nil {
			sum += *p.Seconds
			any = true
		}
	}
	if !any {
		return nil
	}
	return &sum
}

// Figures are the CPU figures of a row or a baseline.
type Figures struct {
	CPU            *Usage   `json:"cpu,omitempty"`
	CPUPerAnswerMS *float64 `json:"cpu_per_answer_ms,omitempty"`
	// ServersPerAnswerMS leaves the lab's own CPU out. The lab does more
	// per answer of an attack (it reads every body, plots and tallies
	// it) than per answer of a baseline, so this is the fairer ratio of
	// what the service spends; the targets are stated on the whole.
	ServersPerAnswerMS *float64 `json:"servers_cpu_per_answer_ms,omitempty"`
	// The CPU per answer over the http-ceiling's and the
	// redis-round-trip's at the same buyers in flight, in the same round.
	CPUxHTTP      Ratio `json:"cpu_x_http_ceiling"`
	CPUxRedis     Ratio `json:"cpu_x_redis_round_trip"`
	ServersxHTTP  Ratio `json:"servers_cpu_x_http_ceiling"`
	ServersxRedis Ratio `json:"servers_cpu_x_redis_round_trip"`
}

// Ratio is a CPU per answer over a baseline's, round by round: the
// median over the rounds (the lower middle one for an even count) and
// every round's, in order (null where a round could not be read).
type Ratio struct {
	Median *float64   `json:"median,omitempty"`
	Runs   []*float64 `json:"runs,omitempty"`
}
