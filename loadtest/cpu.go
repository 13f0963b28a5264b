package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/seckill-lab/seckill/internal/api"
)

// Answers per second on a shared machine move with whatever else the
// machine runs, by a third from one run to the next. The CPU time that the
// processes of a sale spend per answer moves far less: another engineer's
// build slows an answer down, but does not make it cost more CPU. So the
// lab reads, around every attack and every baseline, the CPU time of each
// process that takes part:
//
//   - each instance, once per process (the demo's three instances are one
//     process, and so is its embedded Redis): on this machine, its
//     process's CPU-time clock (processClock, exact to the ns); elsewhere,
//     seckill_process_cpu_rusage_seconds_total from its /metrics
//     (getrusage, exact to the µs; process_cpu_seconds_total, in 10 ms
//     ticks, from an instance that has not got it). A scrape costs the
//     instance about a millisecond, most of it after the counter was read
//     (encoding and compressing the page), and that part fell into the
//     next attack's CPU: a reading of every instance per attack, and four
//     per sliced baseline. The clock costs the instance nothing;
//   - each Redis named by --cpu-redis: INFO CPU, used_cpu_sys + used_cpu_user;
//   - MySQL, when SECKILL_MYSQL_DSN names this machine: its process's
//     CPU-time clock, or utime + stime of the mariadbd (or mysqld) process
//     in /proc/<pid>/stat, in 10 ms ticks, where the clock cannot be read;
//   - the lab itself: getrusage(RUSAGE_SELF).
//
// The sum, divided by the answers, is the machine's CPU per answer. A
// source that could not be read makes the sum unavailable rather than
// smaller; a source that is not there at all (no MySQL in the demo) is
// listed as not measured, and the sum covers the rest.

// Kinds of CPU source, in the order the report lists them.
const (
	cpuInstance = "instances"
	cpuRedis    = "redis"
	cpuMySQL    = "mysql"
	cpuLab      = "lab"
)

var cpuKinds = []string{cpuInstance, cpuRedis, cpuMySQL, cpuLab}

// cpuSource is one process whose CPU time the lab reads.
type cpuSource struct {
	kind string
	name string
	// read returns the CPU seconds the process has used so far; nil when
	// the source is not measured at all, and skip says why.
	read func(ctx context.Context) (float64, error)
	skip string
	how  string // how read reads it, for the lab's opening lines
}

// cpuMeter reads every source at once, before and after an attack.
type cpuMeter struct {
	sources []cpuSource
}

// cpuReading is one reading of every source of a meter, in its order.
type cpuReading struct {
	seconds []float64
	errs    []error
}

// cpuUsage is the CPU the processes spent over one attack.
type cpuUsage struct {
	Parts []cpuPart `json:"parts"`
	// Seconds is the sum of the parts measured; nil when a part that is
	// there could not be read, since the sum would then be too small.
	Seconds *float64 `json:"seconds,omitempty"`
}

// cpuPart is one process's share of a cpuUsage.
type cpuPart struct {
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
func (m *cpuMeter) read(ctx context.Context) cpuReading {
	r := cpuReading{seconds: make([]float64, len(m.sources)), errs: make([]error, len(m.sources))}
	for i, s := range m.sources {
		if s.read == nil {
			continue
		}
		r.seconds[i], r.errs[i] = s.read(ctx)
	}
	return r
}

// usage is the CPU each source spent between two readings.
func (m *cpuMeter) usage(before, after cpuReading) *cpuUsage {
	u := &cpuUsage{}
	total, complete := 0.0, true
	for i, s := range m.sources {
		p := cpuPart{Kind: s.kind, Name: s.name, How: s.how}
		switch {
		case s.read == nil:
			p.Skipped = s.skip
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

// sumUsage adds b's CPU to a's, process by process, into a new usage; a
// nil a is none yet. Both come from the same meter, so their parts are the
// same processes in the same order. A part unavailable in either is
// unavailable in the sum, and so is the total.
func sumUsage(a, b *cpuUsage) *cpuUsage {
	if a == nil || b == nil {
		if a == nil {
			return b
		}
		return a
	}
	u := &cpuUsage{}
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

// perUnit is seconds spent per unit in milliseconds; nil when the seconds
// are unknown or there is nothing to divide by.
func perUnit(seconds *float64, n int) *float64 {
	if seconds == nil || n <= 0 {
		return nil
	}
	v := *seconds * 1e3 / float64(n)
	return &v
}

// ofKind is the CPU seconds of the parts of one kind; nil when one of them
// could not be read or none was measured.
func (u *cpuUsage) ofKind(kind string) *float64 {
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
func (u *cpuUsage) unavailable() string {
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
func (u *cpuUsage) servers() *float64 {
	if u == nil {
		return nil
	}
	sum, any := 0.0, false
	for _, p := range u.Parts {
		if p.Kind == cpuLab {
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

// cpuFigures are the CPU figures of a row or a baseline.
type cpuFigures struct {
	CPU            *cpuUsage `json:"cpu,omitempty"`
	CPUPerAnswerMS *float64  `json:"cpu_per_answer_ms,omitempty"`
	// ServersPerAnswerMS leaves the lab's own CPU out. The lab does more
	// per answer of an attack (it reads every body, plots and tallies
	// it) than per answer of a baseline, so this is the fairer ratio of
	// what the service spends; the targets are stated on the whole.
	ServersPerAnswerMS *float64 `json:"servers_cpu_per_answer_ms,omitempty"`
	// The CPU per answer over the http-ceiling's and the
	// redis-round-trip's at the same buyers in flight, in the same round.
	CPUxHTTP      cpuRatio `json:"cpu_x_http_ceiling"`
	CPUxRedis     cpuRatio `json:"cpu_x_redis_round_trip"`
	ServersxHTTP  cpuRatio `json:"servers_cpu_x_http_ceiling"`
	ServersxRedis cpuRatio `json:"servers_cpu_x_redis_round_trip"`
}

// cpuRatio is a CPU per answer over a baseline's, round by round: the
// median over the rounds (the lower middle one for an even count) and
// every round's, in order (null where a round could not be read).
type cpuRatio struct {
	Median *float64   `json:"median,omitempty"`
	Runs   []*float64 `json:"runs,omitempty"`
}

// hostProcs is how the lab reads the processes of this machine.
type hostProcs struct {
	dir      string // /proc, or a test's
	hostname string // this machine's, as an instance's info names it
	pidNS    string // the lab's pid namespace, as an instance's info names its own
	// clock reads a process's CPU time by pid; nil where it cannot, and
	// the lab reads /metrics and /proc/<pid>/stat instead.
	clock func(pid int) (float64, error)
}

// localProcs is this machine's.
func localProcs() hostProcs {
	host, err := os.Hostname()
	if err != nil {
		host = "" // no instance is then known to be here
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		ns = ""
	}
	return hostProcs{dir: "/proc", hostname: host, pidNS: ns, clock: processClock}
}

// newCPUMeter lists the processes to read: each instance process behind
// the targets, every Redis of o.cpuRedis, the local MySQL of o.mysqlDSN,
// and the lab.
func newCPUMeter(ctx context.Context, f *fleet, o options, procs hostProcs) *cpuMeter {
	m := &cpuMeter{}
	m.sources = append(m.sources, instanceSources(ctx, f, procs)...)
	if len(o.cpuRedis) == 0 {
		m.sources = append(m.sources, cpuSource{kind: cpuRedis, name: "redis",
			skip: "not measured: no --cpu-redis (an embedded Redis, as the demo's, counts in its instance's process)"})
	}
	for _, addr := range o.cpuRedis {
		m.sources = append(m.sources, cpuSource{kind: cpuRedis, name: "redis " + addr, how: "INFO CPU", read: func(ctx context.Context) (float64, error) {
			// A Redis that does not answer must not hold the lab up for
			// a whole request timeout twice per attack.
			return redisCPU(ctx, addr, o.redisPassword, min(o.timeout, 2*time.Second))
		}})
	}
	m.sources = append(m.sources, mysqlSource(o.mysqlDSN, procs))
	m.sources = append(m.sources, cpuSource{kind: cpuLab, name: "lab", read: func(context.Context) (float64, error) { return labCPU() }})
	return m
}

// instanceSources is one source per process behind the targets: targets
// whose info names the same process are read once, through the first, by
// its CPU-time clock when it runs on this machine (localClock), else from
// its /metrics.
func instanceSources(ctx context.Context, f *fleet, procs hostProcs) []cpuSource {
	var out []cpuSource
	index := map[string]int{}
	for i, in := range f.infos {
		key := in.Process
		if key == "" {
			key = "target " + f.targets[i] // an instance that does not say: its own process
		} else if in.PIDNamespace != "" {
			key += " in " + in.PIDNamespace // one host/pid in two namespaces: two processes
		}
		name := in.Instance
		if name == "" {
			name = f.targets[i]
		}
		if k, ok := index[key]; ok {
			out[k].name += ", " + name
			continue
		}
		index[key] = len(out)
		target := f.targets[i]
		read, why := localClock(ctx, f, target, in, procs)
		if read != nil {
			out = append(out, cpuSource{kind: cpuInstance, name: "instance " + name, read: read, how: "its process's CPU-time clock (" + in.Process + ")"})
			continue
		}
		out = append(out, cpuSource{kind: cpuInstance, name: "instance " + name, how: target + "/metrics (" + why + ")", read: func(ctx context.Context) (float64, error) {
			return f.processCPU(ctx, target)
		}})
	}
	return out
}

// localClock is a reading of the instance process behind target by its
// CPU-time clock, when its info's process (host/pid) is on this machine;
// else why it is read from /metrics instead. A pid names a process only
// in its own pid namespace: an instance in a container that shares this
// machine's host name names a pid of the container's. An instance that
// names its namespace is read by the clock only in the lab's; one that
// does not (an older seckill) may name a pid of another. So the clock is
// also trusted only once it fell between two readings of the instance's own
// /metrics, taken before and after it: getrusage's sum, which /metrics
// exports, never runs ahead of the process's clock, and the second
// scrape's work (milliseconds of it) comes after the clock was read.
// Another process's clock falls there only by a fluke. An instance that
// exports only process_cpu_seconds_total, in 10 ms ticks, fails the check
// too, and is read from /metrics. And since a pid is reused once its
// process ends, each reading also checks that the pid's process started
// when the one checked here did (see clockOf).
func localClock(ctx context.Context, f *fleet, target string, in api.Info, procs hostProcs) (func(context.Context) (float64, error), string) {
	host, pidText, ok := strings.Cut(in.Process, "/")
	pid, err := strconv.Atoi(pidText)
	switch {
	case procs.clock == nil:
		return nil, "no CPU-time clock of another process here"
	case !ok || err != nil || pid <= 0 || host == "":
		return nil, "its info names no process"
	case host != procs.hostname:
		return nil, "it runs on " + host
	case in.PIDNamespace != "" && procs.pidNS != "" && in.PIDNamespace != procs.pidNS:
		return nil, "its pid is in another pid namespace, " + in.PIDNamespace
	}
	read, err := clockOf(procs, pid)
	if err != nil {
		return nil, err.Error()
	}
	first, err := f.processCPU(ctx, target)
	if err != nil {
		return nil, err.Error()
	}
	clock, err := read(ctx)
	if err != nil {
		return nil, err.Error()
	}
	second, err := f.processCPU(ctx, target)
	if err != nil {
		return nil, err.Error()
	}
	if clock < first || clock > second {
		return nil, fmt.Sprintf("the CPU-time clock of pid %d did not fall between two of its own readings (another pid namespace, or CPU counted in ticks)", pid)
	}
	return read, ""
}

// clockOf reads process pid by its CPU-time clock, and fails once the pid
// names a process that started at another time than the one here now: a
// process that ended (an instance restarted, MySQL restarted) must make
// the reading unavailable, not read whatever process got its pid next.
func clockOf(procs hostProcs, pid int) (func(context.Context) (float64, error), error) {
	started, err := startOf(procs.dir, pid)
	if err != nil {
		return nil, err
	}
	return func(context.Context) (float64, error) {
		v, err := procs.clock(pid)
		// After the clock: a pid reused in between shows here.
		if now, serr := startOf(procs.dir, pid); serr != nil || now != started {
			return 0, fmt.Errorf("pid %d is no longer the process the lab began with (it ended or restarted)", pid)
		}
		if err != nil {
			return 0, fmt.Errorf("pid %d: %w", pid, err)
		}
		return v, nil
	}, nil
}

// processCPU reads the CPU seconds of the process behind target from its
// /metrics.
func (f *fleet) processCPU(ctx context.Context, target string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s/metrics: %w", target, err)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if cerr := resp.Body.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("%s/metrics: %w", target, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s/metrics answered %s", target, resp.Status)
	}
	// getrusage's sum, exact to the µs, where the instance exports it;
	// else the process collector's, in 10 ms clock ticks.
	if v, ok := gauge(string(b), "seckill_process_cpu_rusage_seconds_total"); ok {
		return v, nil
	}
	v, ok := gauge(string(b), "process_cpu_seconds_total")
	if !ok {
		return 0, fmt.Errorf("%s/metrics has no process_cpu_seconds_total", target)
	}
	return v, nil
}

// redisCPU asks the Redis at addr for INFO CPU, on a connection of its
// own, and returns used_cpu_sys + used_cpu_user. The lab speaks the two
// commands it needs in RESP itself: go-redis stays out of the lab.
func redisCPU(ctx context.Context, addr, password string, timeout time.Duration) (float64, error) {
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return 0, err
	}
	rd := bufio.NewReader(conn)
	if password != "" {
		if _, err := conn.Write(respCommand("AUTH", password)); err != nil {
			return 0, err
		}
		if _, err := readRESP(rd); err != nil {
			return 0, fmt.Errorf("AUTH: %w", err)
		}
	}
	if _, err := conn.Write(respCommand("INFO", "cpu")); err != nil {
		return 0, err
	}
	info, err := readRESP(rd)
	if err != nil {
		return 0, fmt.Errorf("INFO cpu: %w", err)
	}
	return parseRedisCPU(info)
}

// respCommand encodes a command as a RESP array of bulk strings.
func respCommand(args ...string) []byte {
	b := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b
}

// readRESP reads one reply that is a simple string, an error or a bulk
// string, the replies of AUTH and INFO.
func readRESP(rd *bufio.Reader) (string, error) {
	line, err := rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("bad bulk length %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}

// parseRedisCPU adds used_cpu_sys and used_cpu_user of an INFO answer.
func parseRedisCPU(info string) (float64, error) {
	var sys, user float64
	var haveSys, haveUser bool
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		var dst *float64
		switch k {
		case "used_cpu_sys":
			dst, haveSys = &sys, true
		case "used_cpu_user":
			dst, haveUser = &user, true
		default:
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu: %s is %q", k, v)
		}
		*dst = f
	}
	if !haveSys || !haveUser {
		return 0, errors.New("INFO cpu lacks used_cpu_sys or used_cpu_user")
	}
	return sys + user, nil
}

// mysqlSource is the local MySQL server's process, found by name in
// procs.dir, when dsn names this machine, read by its CPU-time clock or,
// where that cannot be read, from its stat; a source that is skipped, with
// the reason, otherwise.
func mysqlSource(dsn string, procs hostProcs) cpuSource {
	procDir := procs.dir
	s := cpuSource{kind: cpuMySQL, name: "mysql"}
	if dsn == "" {
		s.skip = "not measured: no SECKILL_MYSQL_DSN (the demo keeps its orders in its own process)"
		return s
	}
	if local, where := localDSN(dsn); !local {
		s.skip = "not measured: " + where + " is not this machine"
		return s
	}
	pid, name, err := findMySQL(procDir)
	if err != nil {
		s.skip = "not measured: " + err.Error()
		return s
	}
	s.name = fmt.Sprintf("mysql (%s, pid %d)", name, pid)
	s.read = func(context.Context) (float64, error) { return procCPU(procDir, pid) }
	s.how = "its stat, in 10 ms ticks"
	if procs.clock != nil {
		if read, err := clockOf(procs, pid); err == nil {
			if _, err := read(context.Background()); err == nil {
				// Its stat counts 10 ms ticks: a burst's hundred sales
				// cost MySQL about 30 ms, blurred by a tick at each end.
				s.read, s.how = read, "its process's CPU-time clock"
			}
		}
	}
	return s
}

// localDSN reports whether a MySQL DSN reaches a server on this machine: a
// Unix socket, or TCP to a loopback address. where names the server.
func localDSN(dsn string) (bool, string) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return false, "an unreadable DSN"
	}
	if cfg.Net == "unix" {
		return true, cfg.Addr
	}
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		host = cfg.Addr
	}
	if host == "localhost" {
		return true, cfg.Addr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), cfg.Addr
}

// mysqlNames are the process names of a MySQL server.
var mysqlNames = []string{"mariadbd", "mysqld"}

// findMySQL finds the one MySQL server process in procDir. Several make
// it an error: the lab cannot tell which one serves the DSN.
func findMySQL(procDir string) (int, string, error) {
	entries, err := os.ReadDir(procDir)
	if err != nil {
		return 0, "", fmt.Errorf("cannot list %s: %w", procDir, err)
	}
	var pids []int
	var names []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(procDir, e.Name(), "comm"))
		if err != nil {
			continue // gone since the listing
		}
		if name := strings.TrimSpace(string(comm)); slices.Contains(mysqlNames, name) {
			pids, names = append(pids, pid), append(names, name)
		}
	}
	switch len(pids) {
	case 0:
		return 0, "", fmt.Errorf("no %s process found in %s", strings.Join(mysqlNames, " or "), procDir)
	case 1:
		return pids[0], names[0], nil
	}
	return 0, "", fmt.Errorf("%d MySQL server processes (pids %v), cannot tell which serves the DSN", len(pids), pids)
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux the lab runs on (Go cannot ask sysconf without cgo;
// Prometheus's procfs assumes the same).
const clockTicks = 100

// startOf is when process pid started, field 22 of its stat in procDir
// (clock ticks since boot): with the pid, it names one process, where the
// pid alone may name the next one to get it.
func startOf(procDir string, pid int) (string, error) {
	b, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "stat"))
	if err != nil {
		return "", fmt.Errorf("pid %d: %w", pid, err)
	}
	fields, err := statFields(string(b), 22)
	if err != nil {
		return "", fmt.Errorf("pid %d: %w", pid, err)
	}
	return fields[19], nil
}

// procCPU reads utime + stime of pid from procDir, in seconds.
func procCPU(procDir string, pid int) (float64, error) {
	b, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	return parseProcStat(string(b))
}

// parseProcStat reads utime and stime, fields 14 and 15, of a
// /proc/<pid>/stat line (see statFields).
func parseProcStat(stat string) (float64, error) {
	fields, err := statFields(stat, 15)
	if err != nil {
		return 0, err
	}
	utime, err1 := strconv.ParseUint(fields[11], 10, 64)
	stime, err2 := strconv.ParseUint(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("stat: %w", err)
	}
	return float64(utime+stime) / clockTicks, nil
}

// statFields splits a /proc/<pid>/stat line into its fields from field 3
// on (fields[0] is field 3, the state), and fails unless it reaches field
// last. The command name, field 2, is in parentheses and may hold spaces
// and parentheses itself, so the fields are counted from the last ')'.
func statFields(stat string, last int) ([]string, error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return nil, errors.New("stat: no command name")
	}
	fields := strings.Fields(stat[end+1:])
	if len(fields) < last-2 {
		return nil, fmt.Errorf("stat: %d fields after the command name, want at least %d", len(fields), last-2)
	}
	return fields, nil
}
