package main

import (
	"bufio"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux this lab runs on.
const clockTicks = 100

// procSample is what /proc/<pid>/stat says of a process at one moment.
type procSample struct {
	cpuTicks int64 // utime + stime
	rssPages int64
}

// parseProcStat reads utime, stime (fields 14 and 15) and rss (field 24)
// of a /proc/<pid>/stat line. The command name (field 2) is in
// parentheses and may hold spaces and parentheses itself, so the fields
// are counted from the last ')'.
func parseProcStat(stat string) (procSample, error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return procSample{}, fmt.Errorf("proc stat: no command name in %q", stat)
	}
	f := strings.Fields(stat[end+1:]) // f[0] is field 3 (state)
	if len(f) < 22 {
		return procSample{}, fmt.Errorf("proc stat: %d fields after the name, want at least 22", len(f))
	}
	var n [3]int64
	for i, field := range []int{14, 15, 24} {
		v, err := strconv.ParseInt(f[field-3], 10, 64)
		if err != nil {
			return procSample{}, fmt.Errorf("proc stat field %d: %w", field, err)
		}
		n[i] = v
	}
	return procSample{cpuTicks: n[0] + n[1], rssPages: n[2]}, nil
}

// redisSample is what INFO says of a Redis at one moment: each command's
// calls (INFO commandstats) and the server's CPU seconds (INFO cpu).
type redisSample struct {
	calls map[string]int64
	cpu   float64 // used_cpu_sys + used_cpu_user
}

// parseInfo reads the commandstats and cpu sections of an INFO answer:
// lines "cmdstat_xreadgroup:calls=12,usec=…" and "used_cpu_sys:0.5".
func parseInfo(info string) (redisSample, error) {
	s := redisSample{calls: map[string]int64{}}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, value, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(name, "cmdstat_"):
			calls, err := callsOf(value)
			if err != nil {
				return redisSample{}, fmt.Errorf("INFO %s: %w", name, err)
			}
			s.calls[strings.TrimPrefix(name, "cmdstat_")] = calls
		case name == "used_cpu_sys" || name == "used_cpu_user":
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return redisSample{}, fmt.Errorf("INFO %s: %w", name, err)
			}
			s.cpu += v
		}
	}
	return s, sc.Err()
}

// callsOf reads calls= of a commandstats value.
func callsOf(value string) (int64, error) {
	for _, kv := range strings.Split(value, ",") {
		if v, ok := strings.CutPrefix(kv, "calls="); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no calls= in %q", value)
}

// commandCount is how often one command ran in a window.
type commandCount struct {
	Command string `json:"command"`
	Calls   int64  `json:"calls"`
}

// selfCommands are the sweep's own reads of the Redis it measures, left
// out of the counts.
var selfCommands = map[string]bool{"info": true, "ping": true, "hello": true, "client|setinfo": true, "client": true}

// commandDelta lists the commands that ran between two samples, the most
// frequent first (ties by name), without the sweep's own.
func commandDelta(before, after map[string]int64) []commandCount {
	var out []commandCount
	for cmd, n := range after {
		if d := n - before[cmd]; d > 0 && !selfCommands[cmd] {
			out = append(out, commandCount{Command: cmd, Calls: d})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Calls != out[j].Calls {
			return out[i].Calls > out[j].Calls
		}
		return out[i].Command < out[j].Command
	})
	return out
}

// idle is one instance's idle cost over a window.
type idle struct {
	CPUMsPerS     float64  `json:"cpu_ms_per_s"`
	RSSMB         float64  `json:"rss_mb"`
	RedisCmdsPerS *float64 `json:"redis_commands_per_s,omitempty"` // the Redis's total; nil: no Redis to read (the demo's are embedded)
	// RedisCmdsPerInstance is the total split evenly over the instances
	// sharing the Redis: the figure the per-instance bound is held to.
	RedisCmdsPerInstance *float64       `json:"redis_commands_per_s_per_instance,omitempty"`
	RedisCPUMsPerS       *float64       `json:"redis_cpu_ms_per_s,omitempty"` // nil likewise
	Top                  []commandCount `json:"top_commands,omitempty"`
}

// idleOver turns the samples at both ends of a window into rates; rb and
// ra are nil when there is no Redis to read; instances share the Redis.
func idleOver(window time.Duration, pb, pa procSample, pageSize int, rb, ra *redisSample, instances int) idle {
	s := window.Seconds()
	out := idle{
		CPUMsPerS: float64(pa.cpuTicks-pb.cpuTicks) * 1000 / clockTicks / s,
		RSSMB:     float64(pa.rssPages) * float64(pageSize) / (1 << 20),
	}
	if rb == nil || ra == nil {
		return out
	}
	out.Top = commandDelta(rb.calls, ra.calls)
	var total int64
	for _, c := range out.Top {
		total += c.Calls
	}
	cmds, cpu := float64(total)/s, (ra.cpu-rb.cpu)*1000/s
	each := perInstance(cmds, instances)
	out.RedisCmdsPerS, out.RedisCPUMsPerS, out.RedisCmdsPerInstance = &cmds, &cpu, &each
	return out
}

// perInstance splits a shared Redis's total evenly over the instances
// using it (the Redis cannot tell whose command it served); one instance
// when instances is not positive.
func perInstance(total float64, instances int) float64 {
	if instances < 1 {
		return total
	}
	return total / float64(instances)
}

// exitLine finds the error a seckill command ended with in its log: the
// last line that starts with "seckill: ".
func exitLine(log, logPath string) string {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if msg, ok := strings.CutPrefix(lines[i], "seckill: "); ok {
			return msg
		}
	}
	return "exited without an error line; see " + logPath
}
