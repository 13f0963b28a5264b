package cpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seckill-lab/seckill/internal/api"
)

func f64(v float64) *float64 { return &v }

// near compares CPU figures computed from floats.
func near(got *float64, want float64) bool { return got != nil && math.Abs(*got-want) < 1e-6 }

// TestParseProcStat: utime and stime are fields 14 and 15, in clock ticks,
// counted from the command name's last ')', which may hold spaces.
func TestParseProcStat(t *testing.T) {
	stat := "3846 (my (odd) d) S 1 3846 3846 0 -1 4194560 24541 0 12 0 250 125 0 0 20 0 42 0 1283 1860124672 24969 18446744073709551615\n"
	if got, err := parseProcStat(stat); err != nil || got != 3.75 {
		t.Fatalf("got %v, %v; want (250+125)/100 = 3.75 s", got, err)
	}
	for _, bad := range []string{"3846 mariadbd S 1", "3846 (mariadbd) S 1 2 3", "3846 (m) S 1 3846 3846 0 -1 4194560 24541 0 12 0 x 125 0"} {
		if got, err := parseProcStat(bad); err == nil {
			t.Errorf("%q: got %v, want an error", bad, got)
		}
	}
}

// fakeProc writes a /proc with one comm per pid.
func fakeProc(t *testing.T, comms map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for pid, comm := range comms {
		if err := os.MkdirAll(filepath.Join(dir, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, pid, "comm"), []byte(comm+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestMySQLSource: MySQL is read when the DSN is local and one mariadbd
// or mysqld runs, from its /proc/<pid>/stat; otherwise it is skipped with
// the reason, not read as 0.
func TestMySQLSource(t *testing.T) {
	proc := fakeProc(t, map[string]string{"1": "systemd", "42": "mariadbd", "self": "x", "77": "redis-server"})
	stat := "42 (mariadbd) S 1 42 42 0 -1 4194560 1 0 0 0 300 100 0 0 20 0 42 0 1 1 1 1\n"
	if err := os.WriteFile(filepath.Join(proc, "42", "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	s := MySQLSource("root:@tcp(127.0.0.1:3306)/lab", Procs{Dir: proc})
	if s.Read == nil || s.Name != "mysql (mariadbd, pid 42)" {
		t.Fatalf("local MariaDB: %+v, want it read", s)
	}
	if got, err := s.Read(context.Background()); err != nil || got != 4 {
		t.Fatalf("read %v, %v; want 4 s", got, err)
	}
	// Its CPU-time clock, exact to the ns, where it can be read; its
	// stat's ticks where not.
	clock := func(pid int) (float64, error) {
		if pid != 42 {
			return 0, fmt.Errorf("asked for pid %d", pid)
		}
		return 4.123456789, nil
	}
	if got, err := MySQLSource("root:@tcp(127.0.0.1:3306)/lab", Procs{Dir: proc, Clock: clock}).Read(context.Background()); err != nil || got != 4.123456789 {
		t.Errorf("by the clock: read %v, %v; want 4.123456789 s", got, err)
	}
	broken := func(int) (float64, error) { return 0, errors.New("EPERM") }
	if got, err := MySQLSource("root:@tcp(127.0.0.1:3306)/lab", Procs{Dir: proc, Clock: broken}).Read(context.Background()); err != nil || got != 4 {
		t.Errorf("a clock that cannot be read: read %v, %v; want the stat's 4 s", got, err)
	}
	skipped := []struct{ dsn, proc, why string }{
		{"", proc, "no SECKILL_MYSQL_DSN"},
		{"root:@tcp(db.example.com:3306)/lab", proc, "db.example.com:3306 is not this machine"},
		{"root:@tcp(localhost:3306)/lab", fakeProc(t, map[string]string{"1": "init"}), "no mariadbd or mysqld process"},
		{"root:@unix(/run/mysqld/mysqld.sock)/lab", fakeProc(t, map[string]string{"5": "mysqld", "6": "mariadbd"}), "2 MySQL server processes"},
	}
	for _, tt := range skipped {
		s := MySQLSource(tt.dsn, Procs{Dir: tt.proc})
		if s.Read != nil || !strings.Contains(s.Skip, tt.why) {
			t.Errorf("%q: %+v, want it skipped because %s", tt.dsn, s, tt.why)
		}
	}
}

// TestSumUsage: CPU usages add process by process; a process unavailable
// in either is unavailable in the sum, and the total with it.
func TestSumUsage(t *testing.T) {
	a := &Usage{Parts: []Part{{Kind: Instance, Name: "i", Seconds: f64(1)}, {Kind: Lab, Name: "lab", Seconds: f64(0.5)}, {Kind: "mysql", Name: "m", Skipped: "elsewhere"}}, Seconds: f64(1.5)}
	b := &Usage{Parts: []Part{{Kind: Instance, Name: "i", Seconds: f64(2)}, {Kind: Lab, Name: "lab", Seconds: f64(0.25)}, {Kind: "mysql", Name: "m", Skipped: "elsewhere"}}, Seconds: f64(2.25)}
	s := Sum(Sum(nil, a), b)
	if !near(s.Seconds, 3.75) || !near(s.OfKind(Instance), 3) || !near(s.OfKind(Lab), 0.75) || s.Parts[2].Skipped != "elsewhere" {
		t.Errorf("sum %+v, want 3 s of the instance and 0.75 s of the lab, mysql skipped", s)
	}
	if !near(a.Seconds, 1.5) || !near(a.Parts[0].Seconds, 1) {
		t.Errorf("the sum changed its first term: %+v", a)
	}
	c := &Usage{Parts: []Part{{Kind: Instance, Name: "i", Unavailable: "404"}, {Kind: Lab, Name: "lab", Seconds: f64(1)}, {Kind: "mysql", Name: "m", Skipped: "elsewhere"}}}
	s = Sum(a, c)
	if s.Seconds != nil || s.Parts[0].Unavailable != "404" || s.OfKind(Instance) != nil {
		t.Errorf("sum with an unreadable instance %+v, want that instance and the total unavailable", s)
	}
	if s = Sum(c, a); s.Seconds != nil || s.Parts[0].Unavailable != "404" {
		t.Errorf("sum after an unreadable instance %+v, want it still unavailable", s)
	}
}

// TestInstanceSourcesReadEachProcessOnce: targets whose info names one
// process (the demo's) are one source; one that names none is its own;
// one host/pid in two pid namespaces (containers on the host's network,
// each seckill pid 1) is two processes.
func TestInstanceSourcesReadEachProcessOnce(t *testing.T) {
	targets := []string{"http://a", "http://b", "http://c", "http://d", "http://e", "http://f"}
	infos := []api.Info{
		{Instance: "demo-1", Process: "h/1"}, {Instance: "demo-2", Process: "h/1"}, {Instance: "serve-1", Process: "h/2"}, {Instance: "old"},
		{Instance: "box-1", Process: "h/9", PIDNamespace: "pid:[11]"}, {Instance: "box-2", Process: "h/9", PIDNamespace: "pid:[12]"},
	}
	var names []string
	for _, s := range InstanceSources(context.Background(), infos, targets, nil, Procs{}) {
		names = append(names, s.Name)
	}
	if got := strings.Join(names, "|"); got != "instance demo-1, demo-2|instance serve-1|instance old|instance box-1|instance box-2" {
		t.Fatalf("sources %q", got)
	}
}
