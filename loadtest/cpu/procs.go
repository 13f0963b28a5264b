package cpu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/seckill-lab/seckill/internal/api"
)

// Procs is how the lab reads the processes of this machine.
type Procs struct {
	Dir      string // /proc, or a test's
	Hostname string // this machine's, as an instance's info names it
	PIDNS    string // the lab's pid namespace, as an instance's info names its own
	// Clock reads a process's CPU time by pid; nil where it cannot, and
	// the lab reads /metrics and /proc/<pid>/stat instead.
	Clock func(pid int) (float64, error)
}

// LocalProcs is this machine's.
func LocalProcs() Procs {
	host, err := os.Hostname()
	if err != nil {
		host = "" // no instance is then known to be here
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		ns = ""
	}
	return Procs{Dir: "/proc", Hostname: host, PIDNS: ns, Clock: processClock}
}

// MetricsCPU reads the CPU seconds of the process behind target from its
// /metrics.
type MetricsCPU func(ctx context.Context, target string) (float64, error)

// InstanceSources is one source per process behind the targets, infos[i]
// being what targets[i] says of itself: targets whose info names the same
// process are read once, through the first, by its CPU-time clock when it
// runs on this machine (localClock), else from its /metrics.
func InstanceSources(ctx context.Context, infos []api.Info, targets []string, metrics MetricsCPU, procs Procs) []Source {
	var out []Source
	index := map[string]int{}
	for i, in := range infos {
		key := in.Process
		if key == "" {
			key = "target " + targets[i] // an instance that does not say: its own process
		} else if in.PIDNamespace != "" {
			key += " in " + in.PIDNamespace // one host/pid in two namespaces: two processes
		}
		name := in.Instance
		if name == "" {
			name = targets[i]
		}
		if k, ok := index[key]; ok {
			out[k].Name += ", " + name
			continue
		}
		index[key] = len(out)
		target := targets[i]
		read, why := localClock(ctx, metrics, target, in, procs)
		if read != nil {
			out = append(out, Source{Kind: Instance, Name: "instance " + name, Read: read, How: "its process's CPU-time clock (" + in.Process + ")"})
			continue
		}
		out = append(out, Source{Kind: Instance, Name: "instance " + name, How: target + "/metrics (" + why + ")", Read: func(ctx context.Context) (float64, error) {
			return metrics(ctx, target)
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
func localClock(ctx context.Context, metrics MetricsCPU, target string, in api.Info, procs Procs) (func(context.Context) (float64, error), string) {
	host, pidText, ok := strings.Cut(in.Process, "/")
	pid, err := strconv.Atoi(pidText)
	switch {
	case procs.Clock == nil:
		return nil, "no CPU-time clock of another process here"
	case !ok || err != nil || pid <= 0 || host == "":
		return nil, "its info names no process"
	case host != procs.Hostname:
		return nil, "it runs on " + host
	case in.PIDNamespace != "" && procs.PIDNS != "" && in.PIDNamespace != procs.PIDNS:
		return nil, "its pid is in another pid namespace, " + in.PIDNamespace
	}
	read, err := clockOf(procs, pid)
	if err != nil {
		return nil, err.Error()
	}
	first, err := metrics(ctx, target)
	if err != nil {
		return nil, err.Error()
	}
	clock, err := read(ctx)
	if err != nil {
		return nil, err.Error()
	}
	second, err := metrics(ctx, target)
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
func clockOf(procs Procs, pid int) (func(context.Context) (float64, error), error) {
	started, err := startOf(procs.Dir, pid)
	if err != nil {
		return nil, err
	}
	return func(context.Context) (float64, error) {
		v, err := procs.Clock(pid)
		// After the clock: a pid reused in between shows here.
		if now, serr := startOf(procs.Dir, pid); serr != nil || now != started {
			return 0, fmt.Errorf("pid %d is no longer the process the lab began with (it ended or restarted)", pid)
		}
		if err != nil {
			return 0, fmt.Errorf("pid %d: %w", pid, err)
		}
		return v, nil
	}, nil
}

// MySQLSource is the local MySQL server's process, found by name in
// procs.Dir, when dsn names this machine, read by its CPU-time clock or,
// where that cannot be read, from its stat; a source that is skipped, with
// the reason, otherwise.
func MySQLSource(dsn string, procs Procs) Source {
	procDir := procs.Dir
	s := Source{Kind: MySQL, Name: "mysql"}
	if dsn == "" {
		s.Skip = "not measured: no SECKILL_MYSQL_DSN (the demo keeps its orders in its own process)"
		return s
	}
	if local, where := localDSN(dsn); !local {
		s.Skip = "not measured: " + where + " is not this machine"
		return s
	}
	pid, name, err := findMySQL(procDir)
	if err != nil {
		s.Skip = "not measured: " + err.Error()
		return s
	}
	s.Name = fmt.Sprintf("mysql (%s, pid %d)", name, pid)
	s.Read = func(context.Context) (float64, error) { return procCPU(procDir, pid) }
	s.How = "its stat, in 10 ms ticks"
	if procs.Clock != nil {
		if read, err := clockOf(procs, pid); err == nil {
			if _, err := read(context.Background()); err == nil {
				// Its stat counts 10 ms ticks: a burst's hundred sales
				// cost MySQL about 30 ms, blurred by a tick at each end.
				s.Read, s.How = read, "its process's CPU-time clock"
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
