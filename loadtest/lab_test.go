package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/testkit"
	"github.com/seckill-lab/seckill/loadtest/fleet"
	"github.com/seckill-lab/seckill/loadtest/report"
	"github.com/seckill-lab/seckill/loadtest/results"
	"github.com/seckill-lab/seckill/loadtest/scenario"
	"github.com/seckill-lab/seckill/loadtest/verdict"
)

// TestLabShort is the lab's own end-to-end check, and the short lab run of
// `make test`: it starts `seckill demo` with three instances, runs every
// scenario under every stage the demo has with small numbers, and asserts
// the verdicts the workshop promises: unlocked and local-mutex (three
// instances) oversell, every other stage is safe and conserves stock.
func TestLabShort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds seckill and runs the lab against its instances; left out of -short")
	}
	demo := startDemo(t)

	t.Run("three instances", func(t *testing.T) {
		rep, err := runShort(t, demo, demo.instances)
		if err != nil {
			t.Fatalf("the lab failed: %v", err)
		}
		available := demo.stages(t)
		for _, sc := range scenario.AttackNames() {
			for _, stage := range allStages {
				r, ok := findRow(rep, sc, stage)
				if !ok {
					t.Errorf("%s/%s: no row", sc, stage)
					continue
				}
				if !slices.Contains(available, stage) {
					if r.Verdict != results.Skipped {
						t.Errorf("%s/%s: the demo lacks the stage, want skipped, got %s", sc, stage, r.Verdict)
					}
					continue
				}
				if r.Verdict != results.Pass {
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
				if r.HDR == "" {
					t.Errorf("%s/%s: no HDR histogram named", sc, stage)
				} else {
					assertHDR(t, filepath.Join(rep.dir, r.HDR), r.Requests)
				}
			}
		}
		assertFile(t, filepath.Join(rep.dir, "report.md"), "![Sold vs stock, and answered/s, per stage](summary.svg)")
		assertFile(t, filepath.Join(rep.dir, "summary.svg"), "<svg")
		assertFile(t, filepath.Join(filepath.Dir(rep.dir), "latest", "results.json"), `"rows"`)
	})

	t.Run("one instance makes local-mutex safe", func(t *testing.T) {
		rep, err := runShort(t, demo, demo.instances[:1], "--stages", "local-mutex", "--scenarios", "buy")
		if err != nil {
			t.Fatalf("the lab failed: %v", err)
		}
		r, _ := findRow(rep, "buy", "local-mutex")
		if r.ExpectOversell || r.Verdict != results.Pass || r.Oversold != 0 || !r.Conserved || r.Instances != 1 {
			t.Errorf("got %+v, want a safe pass on one instance", r)
		}
	})

	t.Run("constant shape", func(t *testing.T) {
		rep, err := runShort(t, demo, demo.instances, "--shape", "constant", "--rate", "60", "--duration", "1s", "--stages", "db-atomic", "--scenarios", "buy,grab")
		if err != nil && !errors.Is(err, errVerdict) {
			t.Fatalf("the lab failed: %v", err)
		}
		for _, r := range rep.Rows {
			// A lab that a busy machine held back fails fell-behind, and
			// says so: the stage is judged on nothing else.
			fellBehind := slices.Equal(r.Broken, []string{verdict.RuleFellBehind})
			if fellBehind {
				t.Logf("%s: %s", r.Scenario, r.Note)
			}
			if r.Shape != "constant" || (r.Verdict != results.Pass && !fellBehind) || r.Requests == 0 || r.Requests > 61 || r.Planned != 0 ||
				r.Send == nil || r.Send.Schedule != results.ScheduleRate || r.Send.TargetPerS != 60 || r.BuyerTime == nil || r.BuyerHDR == "" {
				t.Errorf("%s: got %+v, want a constant attack of at most 60 requests at 60 a second, with buyer time, that passes", r.Scenario, r)
			}
		}
	})

	t.Run("expect-oversell fails a safe stage", func(t *testing.T) {
		rep, err := runShort(t, demo, demo.instances, "--stages", "db-atomic", "--scenarios", "buy", "--expect-oversell", "db-atomic")
		if !errors.Is(err, errVerdict) {
			t.Fatalf("run returned %v, want errVerdict", err)
		}
		if r, _ := findRow(rep, "buy", "db-atomic"); r.Verdict != results.Fail || r.Oversold != 0 {
			t.Errorf("got %+v, want a failed verdict with nothing oversold", r)
		}
	})
}

// shortArgs are the small numbers of the CI run: enough buyers over three
// instances that local-mutex oversells every time even in the retry storm,
// and a cap that bounds a slow lock stage. It runs the attack scenarios
// only: the T-0 and paced verdicts stay out of CI (make lab runs them).
var shortArgs = []string{"--scenarios", strings.Join(scenario.AttackNames(), ","), "--stock", "40", "--buyers", "200", "--workers", "16", "--max-duration", "2s", "--timeout", "5s"}

type shortReport struct {
	report.Report
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
	if jerr := json.Unmarshal(raw, &rep.Report); jerr != nil {
		t.Fatalf("results.json: %v", jerr)
	}
	return rep, err
}

func findRow(rep shortReport, scenario, stage string) (results.Row, bool) {
	for _, r := range rep.Rows {
		if r.Scenario == scenario && r.Stage == stage {
			return r, true
		}
	}
	return results.Row{}, false
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

// assertHDR checks that path is a latency distribution in the format of
// `vegeta report -type=hdrplot`: its header, then percentiles rising to 1
// with the request count at the top.
func assertHDR(t *testing.T, path string, requests int) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Error(err)
		return
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if got := strings.Fields(lines[0]); !slices.Equal(got, []string{"Value(ms)", "Percentile", "TotalCount", "1/(1-Percentile)"}) {
		t.Errorf("%s: header %q", path, lines[0])
		return
	}
	last := strings.Fields(lines[len(lines)-1])
	if len(lines) < 10 || len(last) != 4 || last[1] != "1.000000" || last[2] != strconv.Itoa(requests) {
		t.Errorf("%s: %d lines ending %q, want percentiles up to 1.000000 at %d requests", path, len(lines), last, requests)
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
	f, err := fleet.Survey(t.Context(), d.instances[:1], d.token, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return f.Infos[0].Stages
}

// startDemo builds cmd/seckill, starts `seckill demo` on free loopback
// ports with its own database and admin token, and waits until every
// instance answers /healthz. It is stopped with SIGINT when the test ends.
func startDemo(t *testing.T) *demo {
	t.Helper()
	bin := testkit.BuildSeckill(t)
	dir := t.TempDir()
	ports := testkit.FreePorts(t, 4)
	d := &demo{token: "lab-test-" + randomHex(8)}
	var addrs []string
	for _, p := range ports[1:] {
		addrs = append(addrs, fmt.Sprintf("127.0.0.1:%d", p))
		d.instances = append(d.instances, fmt.Sprintf("http://127.0.0.1:%d", p))
	}
	testkit.StartProcess(t, bin, []string{
		"SECKILL_ADMIN_TOKEN=" + d.token,
		"SECKILL_DEMO_DB=" + filepath.Join(dir, "demo.db"),
		"SECKILL_LOG_LEVEL=warn",
		// One waiting-room key for the three instances, as lab.sh gives
		// the fleets it starts: a ticket joined on one polls on another.
		"SECKILL_ROOM_KEYS=lab:" + randomHex(16),
	}, d.instances, "demo", "-addr", fmt.Sprintf("127.0.0.1:%d", ports[0]), "-instances", strings.Join(addrs, ","))
	return d
}

func TestMain(m *testing.M) {
	if dir := os.Getenv(fakeSeckillEnv); dir != "" {
		os.Exit(fakeSeckill(dir))
	}
	// The scenarios against fake shops wait (for T-0 leads, opening
	// draws, buyers told to come back) far more than they compute, and
	// each has its own shop and report directory: go test's default runs
	// those waits two by two on a 2-core machine.
	testkit.ParallelAtLeast(8)
	testkit.Main(m)
}
