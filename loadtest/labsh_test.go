package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/seckill-lab/seckill/internal/testkit"
)

// fakeSeckillEnv, when set to a folder, turns the test binary into a stand-in
// for both programs lab.sh runs: `seckill` (probe, demo) and `go` (run).
// Each records its arguments, admin token, SECKILL_LOCK_WAIT and
// SECKILL_MYSQL_DSN in that
// folder, so a test can see what lab.sh started and with what.
const fakeSeckillEnv = "LAB_TEST_FAKE_SECKILL"

// fakeSeckill is main for the stand-in. probe succeeds while a fake demo is
// up; demo marks itself up until SIGINT or SIGTERM; run exits 3, so a
// test can check that lab.sh passes the lab's status on.
func fakeSeckill(dir string) int {
	args := os.Args[1:]
	record := func(name string) {
		line := fmt.Sprintf("%s\ntoken=%s\nlock-wait=%s\nmysql=%s\n", strings.Join(args, " "), os.Getenv("SECKILL_ADMIN_TOKEN"), os.Getenv("SECKILL_LOCK_WAIT"), os.Getenv("SECKILL_MYSQL_DSN"))
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			_, err = f.WriteString(line)
			err = errors.Join(err, f.Close())
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "fake seckill:", err)
			os.Exit(99)
		}
	}
	up := filepath.Join(dir, "up")
	switch args[0] {
	case "probe":
		if _, err := os.Stat(up); err != nil {
			return 1
		}
		return 0
	case "demo":
		record("demo")
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		if err := os.WriteFile(up, nil, 0o644); err != nil {
			return 98
		}
		<-ctx.Done()
		if err := os.Remove(up); err != nil {
			return 97
		}
		record("demo-stopped")
		return 0
	case "run":
		record("lab")
		return 3
	}
	return 2
}

// TestLabScript runs lab.sh with the stand-in as both seckill and go and
// checks whom it targets and what it starts: never a demo when --targets
// is given; a demo on LAB_PORTS with a fresh token when nothing answers
// there, stopped afterwards, with the SECKILL_* settings lab.sh was given
// (how "What a FAIL looks like" in loadtest/README.md breaks a stage); and an
// already running demo used as it is, the token left for the lab to find
// in the demo's token file.
func TestLabScript(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ports := testkit.FreePorts(t, 3)
	portList := fmt.Sprintf("%d,%d,%d", ports[0], ports[1], ports[2])
	instances := fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", ports[0], ports[1], ports[2])
	targets := fmt.Sprintf("http://127.0.0.1:%d,http://127.0.0.1:%d,http://127.0.0.1:%d", ports[0], ports[1], ports[2])

	tests := []struct {
		name       string
		args       []string
		token      string // SECKILL_ADMIN_TOKEN given to lab.sh
		running    bool   // a demo already answers
		wantDemo   bool
		wantLab    string // the lab's arguments
		wantToken  string // the lab's SECKILL_ADMIN_TOKEN; "*" for any non-empty
		demoFlagIn string
		lockWait   string // SECKILL_LOCK_WAIT given to lab.sh, which the demo must see
		mysql      string // SECKILL_MYSQL_DSN given to lab.sh
		wantMySQL  string // the lab's SECKILL_MYSQL_DSN
	}{
		{name: "targets given", args: []string{"--stages", "db-atomic", "--targets", "http://10.0.0.9:9000"},
			wantLab: "run ./loadtest --stages db-atomic --targets http://10.0.0.9:9000"},
		{name: "targets given with =", args: []string{"--targets=http://10.0.0.9:9000"}, running: true, token: "tok-12345",
			wantLab: "run ./loadtest --targets=http://10.0.0.9:9000", wantToken: "tok-12345"},
		{name: "starts a demo on other ports", args: []string{"--stages", "redlock"}, wantDemo: true,
			wantLab: "run ./loadtest --targets " + targets + " --stages redlock", wantToken: "*",
			demoFlagIn: "demo -addr 127.0.0.1:0 -instances " + instances},
		{name: "starts a demo with the user's token", token: "mine-12345", wantDemo: true,
			wantLab: "run ./loadtest --targets " + targets, wantToken: "mine-12345"},
		{name: "starts a demo with the user's settings", args: []string{"--stages", "redis-lock,redlock"}, lockWait: "0s", wantDemo: true,
			wantLab: "run ./loadtest --targets " + targets + " --stages redis-lock,redlock", wantToken: "*"},
		{name: "starts a demo although a MySQL DSN is set", mysql: "root:@tcp(127.0.0.1:3306)/other", wantDemo: true,
			wantLab: "run ./loadtest --targets " + targets, wantToken: "*", wantMySQL: ""},
		{name: "uses running instances with the MySQL DSN", running: true, mysql: "root:@tcp(127.0.0.1:3306)/lab",
			wantLab: "run ./loadtest --targets " + targets, wantMySQL: "root:@tcp(127.0.0.1:3306)/lab"},
		{name: "uses a running demo, token from its file", running: true,
			wantLab: "run ./loadtest --targets " + targets, wantToken: ""},
		{name: "uses a running demo with the user's token", running: true, token: "mine-12345",
			wantLab: "run ./loadtest --targets " + targets, wantToken: "mine-12345"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.running {
				if err := os.WriteFile(filepath.Join(dir, "up"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(sh, append([]string{"lab.sh"}, tt.args...)...)
			var env []string
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "SECKILL_") && !strings.HasPrefix(kv, "LAB_") {
					env = append(env, kv)
				}
			}
			cmd.Env = append(env, "BIN="+self, "GO="+self, "LAB_PORTS="+portList, fakeSeckillEnv+"="+dir)
			if tt.token != "" {
				cmd.Env = append(cmd.Env, "SECKILL_ADMIN_TOKEN="+tt.token)
			}
			if tt.lockWait != "" {
				cmd.Env = append(cmd.Env, "SECKILL_LOCK_WAIT="+tt.lockWait)
			}
			if tt.mysql != "" {
				cmd.Env = append(cmd.Env, "SECKILL_MYSQL_DSN="+tt.mysql)
			}
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 3 {
				t.Fatalf("lab.sh: %v, want exit status 3 (the lab's)\n%s", err, out)
			}
			lab := readLines(t, filepath.Join(dir, "lab"))
			if len(lab) != 4 || lab[0] != tt.wantLab {
				t.Fatalf("the lab ran as %q, want %q\n%s", lab, tt.wantLab, out)
			}
			gotToken := strings.TrimPrefix(lab[1], "token=")
			if tt.wantToken == "*" && gotToken == "" || tt.wantToken != "*" && gotToken != tt.wantToken {
				t.Errorf("the lab's SECKILL_ADMIN_TOKEN = %q, want %q", gotToken, tt.wantToken)
			}
			if got := strings.TrimPrefix(lab[3], "mysql="); got != tt.wantMySQL {
				t.Errorf("the lab's SECKILL_MYSQL_DSN = %q, want %q (a demo keeps its orders in SQLite)", got, tt.wantMySQL)
			}
			demo := readLines(t, filepath.Join(dir, "demo"))
			if !tt.wantDemo {
				if len(demo) > 0 {
					t.Errorf("lab.sh started a demo: %q", demo)
				}
				return
			}
			if len(demo) != 4 || !strings.HasPrefix(demo[0], "demo -addr 127.0.0.1:0 -instances 127.0.0.1:") {
				t.Fatalf("the demo ran as %q", demo)
			}
			if want := "lock-wait=" + tt.lockWait; demo[2] != want {
				t.Errorf("the demo ran with %s, want %s (lab.sh's SECKILL_* settings reach the demo)", demo[2], want)
			}
			if tt.demoFlagIn != "" && demo[0] != tt.demoFlagIn {
				t.Errorf("the demo ran as %q, want %q", demo[0], tt.demoFlagIn)
			}
			if demo[1] != lab[1] {
				t.Errorf("the demo has %s, the lab %s: they must share one token", demo[1], lab[1])
			}
			if stopped := readLines(t, filepath.Join(dir, "demo-stopped")); len(stopped) == 0 {
				t.Error("the demo lab.sh started was not stopped")
			}
			// The lab failed (the stand-in exits 3): the demo's log is kept.
			_, kept, found := strings.Cut(string(out), "lab: failed (exit 3); the logs are kept in ")
			kept, _, _ = strings.Cut(kept, "\n")
			if !found || !filepath.IsAbs(kept) {
				t.Fatalf("lab.sh did not say where the failed run's logs are:\n%s", out)
			}
			t.Cleanup(func() { os.RemoveAll(kept) })
			if _, err := os.Stat(filepath.Join(kept, "demo.log")); err != nil {
				t.Errorf("the failed run's demo log is not kept: %v", err)
			}
		})
	}
}

// readLines returns the lines of path, or none when it does not exist.
func readLines(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(strings.Split(string(raw), "\n"), func(s string) bool { return s == "" })
}
