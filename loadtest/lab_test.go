package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLabShort is the lab's own end-to-end check, and the short lab run of
// `make test`: it starts `seckill demo` with three instances, runs every
// scenario under every stage the demo has with small numbers, and asserts
// the verdicts the workshop promises: unlocked and local-mutex (three
// instances) oversell, every other stage is safe and conserves stock.
func TestLabShort(t *testing.T) {
	demo := startDemo(t)

	t.Run("three instances", func(t *testing.T) {
		rep, err := runShort(t, demo, demo.instances)
		if err != nil {
			t.Fatalf("the lab failed: %v", err)
		}
		available := demo.stages(t)
		for _, sc := range scenarioNames() {
			for _, stage := range allStages {
				r, ok := findRow(rep, sc, stage)
				if !ok {
					t.Errorf("%s/%s: no row", sc, stage)
					continue
				}
				if !slices.Contains(available, stage) {
					if r.Verdict != verdictSkipped {
						t.Errorf("%s/%s: the demo lacks the stage, want skipped, got %s", sc, stage, r.Verdict)
					}
					continue
				}
				if r.Verdict != verdictPass {
					t.Errorf("%s/%s: verdict %s: %s", sc, stage, r.Verdict, r.Note)
				}
				if r.Instances != 3 {
					t.Errorf("%s/%s: %d instances answered, want 3", sc, stage, r.Instances)
				}
				switch stage {
				case "unlocked", "local-mutex":
					if !r.ExpectOversell || r.Oversold == 0 {
						t.Errorf("%s/%s: want overselling, got oversold=%d (expected=%v)", sc, stage, r.Oversold, r.ExpectOversell)
					}
				default:
					if r.ExpectOversell || r.Oversold != 0 || !r.Conserved {
						t.Errorf("%s/%s: want safe, got oversold=%d conserved=%v", sc, stage, r.Oversold, r.Conserved)
					}
					if r.Sold > r.InitialStock || r.Sold+r.FinalStock != r.InitialStock {
						t.Errorf("%s/%s: sold %d + left %d != initial %d", sc, stage, r.Sold, r.FinalStock, r.InitialStock)
					}
				}
				if r.Plot == "" {
					t.Errorf("%s/%s: no plot named", sc, stage)
				} else {
					assertFile(t, filepath.Join(rep.dir, r.Plot), "<html")
				}
			}
		}
		assertFile(t, filepath.Join(rep.dir, "report.md"), "# seckill lab")
		assertFile(t, filepath.Join(filepath.Dir(rep.dir), "latest", "results.json"), `"rows"`)
	})

	t.Run("one instance makes local-mutex safe", func(t *testing.T) {
		rep, err := runShort(t, demo, demo.instances[:1], "--stages", "local-mutex", "--scenarios", "buy")
		if err != nil {
			t.Fatalf("the lab failed: %v", err)
		}
		r, _ := findRow(rep, "buy", "local-mutex")
		if r.ExpectOversell || r.Verdict != verdictPass || r.Oversold != 0 || !r.Conserved || r.Instances != 1 {
			t.Errorf("got %+v, want a safe pass on one instance", r)
		}
	})

	t.Run("constant shape", func(t *testing.T) {
		rep, err := runShort(t, demo, demo.instances, "--shape", "constant", "--rate", "60", "--duration", "1s", "--stages", "db-atomic", "--scenarios", "buy,grab")
		if err != nil {
			t.Fatalf("the lab failed: %v", err)
		}
		for _, r := range rep.Rows {
			if r.Shape != "constant" || r.Verdict != verdictPass || r.Requests == 0 || r.Requests > 61 || r.Planned != 0 {
				t.Errorf("%s: got %+v, want a constant attack of at most 60 requests that passes", r.Scenario, r)
			}
		}
	})

	t.Run("expect-oversell fails a safe stage", func(t *testing.T) {
		rep, err := runShort(t, demo, demo.instances, "--stages", "db-atomic", "--scenarios", "buy", "--expect-oversell", "db-atomic")
		if !errors.Is(err, errVerdict) {
			t.Fatalf("run returned %v, want errVerdict", err)
		}
		if r, _ := findRow(rep, "buy", "db-atomic"); r.Verdict != verdictFail || r.Oversold != 0 {
			t.Errorf("got %+v, want a failed verdict with nothing oversold", r)
		}
	})
}

// shortArgs are the small numbers of the CI run: enough buyers over three
// instances that local-mutex oversells every time even in the retry storm,
// and a cap that bounds a slow lock stage.
var shortArgs = []string{"--stock", "40", "--buyers", "200", "--workers", "16", "--max-duration", "2s", "--timeout", "5s"}

type shortReport struct {
	report
	dir string
}

// runShort runs the lab on targets with shortArgs and args, and reads back
// the results.json it wrote.
func runShort(t *testing.T, d *demo, targets []string, args ...string) (shortReport, error) {
	t.Helper()
	return runShortEnv(t, map[string]string{"SECKILL_ADMIN_TOKEN": d.token, "NO_COLOR": "1"}, targets, args...)
}

// runShortEnv is runShort with the lab's whole environment given.
func runShortEnv(t *testing.T, env map[string]string, targets []string, args ...string) (shortReport, error) {
	t.Helper()
	reports := t.TempDir()
	all := append(append([]string{"--targets", strings.Join(targets, ","), "--report-dir", reports}, shortArgs...), args...)
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), all, func(k string) string { return env[k] }, &stdout, &stderr)
	t.Logf("lab output:\n%s", stdout.String())
	if err != nil && !errors.Is(err, errVerdict) {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	name, rerr := os.ReadFile(filepath.Join(reports, "latest.txt"))
	if rerr != nil {
		t.Fatalf("latest.txt: %v", rerr)
	}
	dir := filepath.Join(reports, strings.TrimSpace(string(name)))
	raw, rerr := os.ReadFile(filepath.Join(dir, "results.json"))
	if rerr != nil {
		t.Fatalf("results.json: %v", rerr)
	}
	rep := shortReport{dir: dir}
	if jerr := json.Unmarshal(raw, &rep.report); jerr != nil {
		t.Fatalf("results.json: %v", jerr)
	}
	return rep, err
}

func findRow(rep shortReport, scenario, stage string) (row, bool) {
	for _, r := range rep.Rows {
		if r.Scenario == scenario && r.Stage == stage {
			return r, true
		}
	}
	return row{}, false
}

func assertFile(t *testing.T, path, contains string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Error(err)
		return
	}
	if !bytes.Contains(b, []byte(contains)) {
		t.Errorf("%s does not contain %q", path, contains)
	}
}

// demo is a running `seckill demo`.
type demo struct {
	instances []string // base URLs
	token     string
}

// stages asks the first instance which stages it has.
func (d *demo) stages(t *testing.T) []string {
	t.Helper()
	f, err := survey(t.Context(), d.instances[:1], d.token, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return f.infos[0].Stages
}

// startDemo builds cmd/seckill, starts `seckill demo` on free loopback
// ports with its own database and admin token, and waits until every
// instance answers /healthz. It is stopped with SIGINT when the test ends.
func startDemo(t *testing.T) *demo {
	t.Helper()
	bin := buildSeckill(t)
	dir := t.TempDir()
	ports := freePorts(t, 4)
	d := &demo{token: "lab-test-" + randomHex(8)}
	var addrs []string
	for _, p := range ports[1:] {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", p))
		d.instances = append(d.instances, fmt.Sprintf("http://127.0.0.1:%d", p))
	}
	startProcess(t, bin, []string{
		"SECKILL_ADMIN_TOKEN=" + d.token,
		"SECKILL_DEMO_DB=" + filepath.Join(dir, "demo.db"),
		"SECKILL_LOG_LEVEL=warn",
	}, d.instances, "demo", "-addr", fmt.Sprintf("127.0.0.1:%d", ports[0]), "-instances", strings.Join(addrs, ","))
	return d
}

// built is the seckill binary the tests of this package share.
var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		if err := os.RemoveAll(built.dir); err != nil {
			fmt.Fprintln(os.Stderr, "removing the test build:", err)
		}
	}
	os.Exit(code)
}

// buildSeckill builds cmd/seckill once per test binary.
func buildSeckill(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "seckill-lab-test-"); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "seckill")
		out, err := exec.Command("go", "build", "-o", built.bin, "github.com/seckill-lab/seckill/cmd/seckill").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build ./cmd/seckill: %w\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// startProcess runs bin with args and exactly env, waits until every base
// URL in urls answers /healthz, and at cleanup stops it with SIGINT and
// waits for it, so the test also checks that it shuts down cleanly.
func startProcess(t *testing.T, bin string, env, urls []string, args ...string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "process.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Logf("interrupting seckill %s: %v", args[0], err)
		}
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("seckill %s exited with %v after SIGINT", args[0], err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("seckill %s did not stop within 15s of SIGINT; killing it", args[0])
			if err := cmd.Process.Kill(); err != nil {
				t.Logf("killing seckill %s: %v", args[0], err)
			}
			<-exited
		}
		if err := logFile.Close(); err != nil {
			t.Errorf("closing the log: %v", err)
		}
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("seckill %s log:\n%s", args[0], b)
			}
		}
	})

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for _, u := range urls {
		if err := waitHealthy(ctx, u+"/healthz", exited); err != nil {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("seckill %s at %s: %v\nlog:\n%s", args[0], u, err, b)
		}
	}
}

// waitHealthy polls url until it answers 200, the process exits, or ctx ends.
func waitHealthy(ctx context.Context, url string, exited <-chan error) error {
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			cerr := resp.Body.Close()
			if resp.StatusCode == http.StatusOK && cerr == nil {
				return nil
			}
		}
		select {
		case err := <-exited:
			return fmt.Errorf("the demo exited before it was healthy: %v", err)
		case <-ctx.Done():
			return fmt.Errorf("not healthy in time: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// freePorts asks the kernel for n free loopback ports. They are released
// before the demo binds them, so another process could take one in between;
// the demo then fails to start and says which port.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return ports
}
