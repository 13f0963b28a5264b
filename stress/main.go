// Command stress runs, many times over, the tests that inject a fault or
// race goroutines (the list is suites.go), under -race and beside CPU hogs,
// with the local MySQL and Redis and without them, and reports each test's
// runs, time and failures (and, at most once a minute while a package
// runs, how many runs have ended). A test that passes alone on a quiet machine and fails
// beside a hog forces no order yet: this is where it shows. `make stress`
// runs it; the settings are environment variables:
//
//	STRESS_COUNT      runs of each test (-count), default 10
//	STRESS_HOGS       CPU hogs (busy processes) beside the tests, default 2
//	STRESS_ENV        local, bare or both (default): local runs with
//	                  SECKILL_TEST_MYSQL_DSN and SECKILL_TEST_REDIS_ADDR
//	                  as set; bare without any SECKILL_TEST_* or CI
//	                  variable, so the tests start containers where Docker
//	                  runs, or use the embedded Redis (and skip MySQL)
//	STRESS_NO_DOCKER  1: the bare runs see no Docker
//	                  (DOCKER_HOST=unix:///nonexistent.sock)
//	STRESS_RUN        a regexp: only the listed tests whose names match
//	STRESS_PKGS       packages, comma- or space-separated: only these
//
// The table goes to stdout and test-artifacts/stress/table.md, the output
// of failing runs to test-artifacts/stress/<env>-<pkg>.log. It exits 1
// when any run failed or a listed test is missing. `stress -list` prints
// each package and its -run regexp and exits.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == hogArg {
		if err := runHog(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "stress:", err)
			os.Exit(2)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Environ(), os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "stress:", err)
		os.Exit(1)
	}
}

// artifacts is where the table and the logs go.
const artifacts = "test-artifacts/stress"

// errFailed says that the table shows a failure (or a missing test).
var errFailed = errors.New("some tests failed; see the table")

// options are the settings, from the environment.
type options struct {
	count    int
	hogs     int
	envs     []string // "local", "bare"
	noDocker bool
	suites   []suite // after STRESS_RUN and STRESS_PKGS
}

func parseOptions(getenv func(string) string) (options, error) {
	o := options{count: 10, hogs: 2, envs: []string{"local", "bare"}}
	for _, n := range []struct {
		name string
		to   *int
		min  int
	}{{"STRESS_COUNT", &o.count, 1}, {"STRESS_HOGS", &o.hogs, 0}} {
		if v := getenv(n.name); v != "" {
			i, err := strconv.Atoi(v)
			if err != nil || i < n.min {
				return o, fmt.Errorf("%s=%q: want a whole number, at least %d", n.name, v, n.min)
			}
			*n.to = i
		}
	}
	switch v := getenv("STRESS_ENV"); v {
	case "", "both":
	case "local", "bare":
		o.envs = []string{v}
	default:
		return o, fmt.Errorf("STRESS_ENV=%q: want local, bare or both", v)
	}
	switch v := getenv("STRESS_NO_DOCKER"); v {
	case "", "0":
	case "1":
		o.noDocker = true
	default:
		return o, fmt.Errorf("STRESS_NO_DOCKER=%q: want 1 or nothing", v)
	}
	o.suites = suites
	if v := getenv("STRESS_PKGS"); v != "" {
		want := map[string]bool{}
		for _, p := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
			want["./"+path.Clean(strings.TrimPrefix(p, "./"))] = true
		}
		var kept []suite
		for _, s := range o.suites {
			if want[s.pkg] {
				kept = append(kept, s)
				delete(want, s.pkg)
			}
		}
		for p := range want {
			return o, fmt.Errorf("STRESS_PKGS: %s has no tests in the list (stress -list shows it)", p)
		}
		o.suites = kept
	}
	if v := getenv("STRESS_RUN"); v != "" {
		re, err := regexp.Compile(v)
		if err != nil {
			return o, fmt.Errorf("STRESS_RUN: %w", err)
		}
		var kept []suite
		for _, s := range o.suites {
			if s.tests == nil {
				s.run = v // the package's tests whose names match
				kept = append(kept, s)
				continue
			}
			var tests []string
			for _, t := range s.tests {
				if re.MatchString(t) {
					tests = append(tests, t)
				}
			}
			if tests != nil {
				s.tests = tests
				kept = append(kept, s)
			}
		}
		o.suites = kept
	}
	if len(o.suites) == 0 {
		return o, errors.New("STRESS_RUN and STRESS_PKGS leave no test to run")
	}
	return o, nil
}

// run is the whole program: it runs every suite in every environment and
// reports. It returns errFailed when a test failed.
func run(ctx context.Context, args, environ []string, stdout io.Writer) error {
	getenv := func(name string) string { return lookup(environ, name) }
	opts, err := parseOptions(getenv)
	if err != nil {
		return err
	}
	switch {
	case len(args) == 1 && args[0] == "-list":
		for _, s := range opts.suites {
			fmt.Fprintf(stdout, "%s: %s\n", s.pkg, s.runRegexp())
		}
		return nil
	case len(args) > 0:
		return fmt.Errorf("unknown arguments %q: the settings are STRESS_* variables (see `go doc ./stress`)", args)
	}
	envs := map[string][]string{}
	for _, name := range opts.envs {
		if envs[name], err = environment(name, environ, opts.noDocker); err != nil {
			return err
		}
	}
	goTool := getenv("GO")
	if goTool == "" {
		goTool = "go"
	}
	if err := clearArtifacts(); err != nil {
		return err
	}

	// The run ends before its go test timeouts add up, builds aside.
	limit := 10 * time.Minute
	for _, s := range opts.suites {
		limit += time.Duration(len(opts.envs)*opts.count) * s.budget
	}
	h, err := startHogs(opts.hogs, limit)
	if err != nil {
		return err
	}
	defer h.stop()
	fmt.Fprintf(stdout, "stress: %s in the %s environment, %s of each test under -race, beside %d CPU hog(s)\n",
		plural(len(opts.suites), "package"), strings.Join(opts.envs, " and "), plural(opts.count, "run"), opts.hogs)

	rep := report{count: opts.count, hogs: opts.hogs, noDocker: opts.noDocker}
	for _, env := range opts.envs {
		start := time.Now()
		for _, s := range opts.suites {
			if ctx.Err() != nil {
				break
			}
			rows, err := runSuite(ctx, goTool, env, envs[env], s, opts.count, stdout)
			if err != nil {
				return err
			}
			rep.rows = append(rep.rows, rows...)
		}
		rep.elapsed = append(rep.elapsed, envTime{env, time.Since(start)})
		fmt.Fprintf(stdout, "[%s] done in %s\n", env, round(time.Since(start)))
	}
	h.stop()

	rep.text(stdout)
	if err := os.WriteFile(filepath.Join(artifacts, "table.md"), []byte(rep.markdown()), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "table: %s\n", filepath.Join(artifacts, "table.md"))
	switch {
	case ctx.Err() != nil:
		return errors.New("interrupted")
	case rep.failed():
		return errFailed
	}
	return nil
}

// lookup is os.Getenv over environ: the last setting of name wins.
func lookup(environ []string, name string) string {
	for i := len(environ) - 1; i >= 0; i-- {
		if k, v, _ := strings.Cut(environ[i], "="); k == name {
			return v
		}
	}
	return ""
}

// environment is the environment of the go test runs of env. local keeps
// the caller's SECKILL_TEST_* addresses; bare removes them and CI, since
// testenv falls back to containers or the embedded Redis only when they
// are unset or empty, and never under CI=true.
func environment(env string, environ []string, noDocker bool) ([]string, error) {
	if env == "local" {
		for _, name := range []string{"SECKILL_TEST_MYSQL_DSN", "SECKILL_TEST_REDIS_ADDR"} {
			if lookup(environ, name) == "" {
				return nil, fmt.Errorf("STRESS_ENV=local needs %s (make stress sets it); STRESS_ENV=bare runs without it", name)
			}
		}
		return environ, nil
	}
	var out []string
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "SECKILL_TEST_") || k == "CI" || (noDocker && k == "DOCKER_HOST") {
			continue
		}
		out = append(out, kv)
	}
	if noDocker {
		out = append(out, "DOCKER_HOST=unix:///nonexistent.sock")
	}
	return out, nil
}

// clearArtifacts removes the table and logs of the previous run, so that
// none is taken for this run's.
func clearArtifacts() error {
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(artifacts, "*.log"))
	if err != nil {
		return err
	}
	for _, f := range append(old, filepath.Join(artifacts, "table.md")) {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// progressEvery is how often, at most, a running suite says how far it got.
const progressEvery = time.Minute

// stopGrace is how long a go test interrupted by a signal of ours has to
// stop (its tests' cleanups stop the processes they started) before its
// process group is killed.
const stopGrace = 30 * time.Second

// runSuite runs one suite with go test in env and returns its rows. It
// writes the output of failing runs to the suite's log. An error is one of
// this program's, not of a test.
func runSuite(ctx context.Context, goTool, env string, environ []string, s suite, count int, progress io.Writer) ([]row, error) {
	timeout := s.budget * time.Duration(count)
	cmd := exec.Command(goTool, "test", "-race", "-json", "-count="+strconv.Itoa(count),
		"-timeout="+timeout.String(), "-run", s.runRegexp(), s.pkg)
	cmd.Env = environ
	// Its own process group, so that an interrupt reaches the test binary
	// and whatever it started, and nothing is left behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	what := fmt.Sprintf("[%s] %s", env, s.pkg)
	tests := "every test"
	if s.tests != nil {
		tests = plural(len(s.tests), "test")
	}
	fmt.Fprintf(progress, "%s: started (%s, -count=%d, -timeout=%s)\n", what, tests, count, timeout)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	stopped := make(chan struct{})
	go func() {
		select {
		case <-stopped:
		case <-ctx.Done():
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
			select {
			case <-stopped:
			case <-time.After(stopGrace):
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
		}
	}()

	t := newTally()
	failedRuns := 0
	t.onFail = func(test string) {
		if test == topLevel(test) {
			failedRuns++
			fmt.Fprintf(progress, "%s: FAIL %s (run %d) after %s: %s\n", what, test, t.results[test].Runs, round(time.Since(start)), t.runMessage(test))
		}
	}
	// A suite at -count=20 runs for hours: say how far it got, at most
	// once a progressEvery, as runs end.
	ended, told := 0, start
	planned := ""
	if s.tests != nil {
		planned = fmt.Sprintf(" of %d", len(s.tests)*count)
	}
	t.onEnd = func(string) {
		ended++
		if time.Since(told) >= progressEvery {
			told = time.Now()
			fmt.Fprintf(progress, "%s: %d%s runs ended, %d failed, %s so far\n", what, ended, planned, failedRuns, round(time.Since(start)))
		}
	}
	lines := bufio.NewReaderSize(out, 1<<16)
	for {
		line, err := lines.ReadBytes('\n')
		if len(line) > 0 {
			var e event
			if json.Unmarshal(line, &e) != nil {
				e = event{Action: "output", Output: string(line)} // not from test2json
			}
			t.add(e)
		}
		if err != nil {
			break
		}
	}
	waitErr := cmd.Wait()
	close(stopped)
	// Whatever the tests started in the group and left running goes too.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	t.interrupted = ctx.Err() != nil
	t.finish(waitErr, stderr.String())
	t.expect(s.tests)

	var rows []row
	top, runs, failed, skipped := 0, 0, 0, 0
	for _, r := range t.Results() {
		rows = append(rows, row{env: env, pkg: s.pkg, result: r})
		if r.Test == topLevel(r.Test) {
			top++
			runs += r.Runs
			failed += r.Failed
			skipped += r.Skipped
		}
	}
	if log := t.FailureLog(); log != "" {
		name := filepath.Join(artifacts, env+"-"+strings.ReplaceAll(strings.TrimPrefix(s.pkg, "./"), "/", "-")+".log")
		header := fmt.Sprintf("go test -race -json -count=%d -timeout=%s -run '%s' %s (%s environment)\n\n", count, timeout, s.runRegexp(), s.pkg, env)
		if err := os.WriteFile(name, []byte(header+log), 0o644); err != nil {
			return nil, err
		}
	}
	done := "done"
	if t.interrupted {
		done = "interrupted"
	}
	fmt.Fprintf(progress, "%s: %s in %s: %s, %s, %d failed, %d skipped\n",
		what, done, round(time.Since(start)), plural(top, "test"), plural(runs, "run"), failed, skipped)
	return rows, nil
}

func round(d time.Duration) time.Duration { return d.Round(time.Second) }

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
