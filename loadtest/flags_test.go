package main

import (
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/loadtest/results"
	"github.com/seckill-lab/seckill/loadtest/scenario"
)

func TestParseOptions(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	withToken := env(map[string]string{"SECKILL_ADMIN_TOKEN": "sekrit-token"})

	o, err := parseOptions(nil, withToken, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.targets) != 3 || len(o.Stages) != len(allStages) || len(o.scenarios) != len(scenario.All())-1 || o.expectOversell != nil || o.confirmWait != time.Minute ||
		o.Buyers != 2000 || o.Stock != 100 || o.Shape != "burst" || o.reportDir != "loadtest/reports" || o.Workers != 256 ||
		o.T0Buyers != 500 || o.T0Lead != 3*time.Second || o.Pace != 5*time.Millisecond || o.PacedBuyers != 2000 {
		t.Errorf("defaults: %+v", o)
	}
	// By default the T-0 and paced scenarios run on the stages safe in a
	// fleet, the scalper rows on redis-atomic alone (the limit comes
	// before every stage alike), the attack scenarios on every stage;
	// --stages names them all.
	safe := []string{"redis-lock", "redlock", "db-atomic", "redis-atomic", "redis-stream", "redis-sharded"}
	for _, sc := range o.scenarios {
		want := allStages
		switch sc.Kind {
		case results.CrowdScalper, results.CrowdRoom:
			want = []string{"redis-atomic"}
		case results.CrowdT0, results.CrowdPaced, results.CrowdClosed:
			want = safe
		}
		if got := sc.StagesOf(o.Config); !slices.Equal(got, want) {
			t.Errorf("%s runs on %v by default, want %v", sc.Name, got, want)
		}
	}
	if !maps.Equal(o.FirstComeTargets, scenario.FirstComeTargets) {
		t.Errorf("default first-come targets %v, want %v", o.FirstComeTargets, scenario.FirstComeTargets)
	}
	if o.ScalperPeople != 400 || o.ScalperLimitInterval != 30*time.Second || o.ScalperLimitBurst != 1 || o.ScalperTarget != 1.5 || !o.ScalperTargetVerdict || o.ScalperDraw != 1500*time.Millisecond {
		t.Errorf("scalper defaults: %d people, limit %v burst %d, target %v (verdict %v), draw %v", o.ScalperPeople, o.ScalperLimitInterval, o.ScalperLimitBurst, o.ScalperTarget, o.ScalperTargetVerdict, o.ScalperDraw)
	}
	// many is opt-in: named, it runs on redis-atomic under --stages all,
	// on every stage with --many-all-stages, on those named otherwise.
	if slices.ContainsFunc(o.scenarios, func(sc scenario.Scenario) bool { return sc.Name == "many" }) {
		t.Error("the many scenario runs by default; it is opt-in")
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--scenarios", "many"}, []string{"redis-atomic"}},
		{[]string{"--scenarios", "many", "--many-all-stages"}, allStages},
		{[]string{"--scenarios", "many", "--stages", "unlocked,db-atomic"}, []string{"unlocked", "db-atomic"}},
	} {
		m, err := parseOptions(tc.args, withToken, io.Discard)
		if err != nil || len(m.scenarios) != 1 || !slices.Equal(m.scenarios[0].StagesOf(m.Config), tc.want) {
			t.Errorf("%v: %v (%v), want many on %v", tc.args, m.scenarios, err, tc.want)
		}
		if m.ManyProducts != 200 || m.ManyStock != 50 || m.ManyBuyers != 20000 || m.ManySeed != 1 {
			t.Errorf("%v: many defaults %d × %d, %d buyers, seed %d", tc.args, m.ManyProducts, m.ManyStock, m.ManyBuyers, m.ManySeed)
		}
	}
	// waiting-room runs on redis-atomic under --stages all, on every safe
	// stage with --room-all-stages (none that oversells by design), on
	// those named otherwise.
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--scenarios", "waiting-room"}, []string{"redis-atomic"}},
		{[]string{"--scenarios", "waiting-room", "--room-all-stages"}, safe},
		{[]string{"--scenarios", "waiting-room", "--stages", "unlocked,db-atomic"}, []string{"unlocked", "db-atomic"}},
	} {
		m, err := parseOptions(tc.args, withToken, io.Discard)
		if err != nil || len(m.scenarios) != 1 || !slices.Equal(m.scenarios[0].StagesOf(m.Config), tc.want) {
			t.Errorf("%v: %v (%v), want waiting-room on %v", tc.args, m.scenarios, err, tc.want)
		}
		if m.RoomPeople != 300 || m.RoomScalpers != 5 || m.RoomRate != 20 || m.RoomMaxInside != 10 || m.RoomShuffle != time.Second || m.RoomRateWindow != 5*time.Second {
			t.Errorf("%v: waiting-room defaults %d people (%d scalpers), %d/s, %d inside, shuffle %v, window %v", tc.args, m.RoomPeople, m.RoomScalpers, m.RoomRate, m.RoomMaxInside, m.RoomShuffle, m.RoomRateWindow)
		}
	}
	for _, bad := range [][]string{{"--room-people", "0"}, {"--room-scalpers", "301"}, {"--room-rate", "0"}, {"--room-lead", "0s"}} {
		if _, err := parseOptions(bad, withToken, io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", bad, err)
		}
	}
	for _, bad := range [][]string{{"--many-products", "0"}, {"--many-products", "1001"}, {"--many-stock", "-1"}, {"--many-buyers", "0"}} {
		if _, err := parseOptions(bad, withToken, io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", bad, err)
		}
	}
	named, err := parseOptions([]string{"--stages", "db-atomic,redis-lock", "--scenarios", "scalper"}, withToken, io.Discard)
	if got := named.scenarios[0].StagesOf(named.Config); err != nil || !slices.Equal(got, []string{"db-atomic", "redis-lock"}) {
		t.Errorf("--stages db-atomic,redis-lock: the scalper row runs on %v (%v), want both", got, err)
	}
	if o.ClosedUsers != 64 || o.ClosedThink != 100*time.Millisecond || o.ClosedDuration != 3*time.Second || o.ClosedIterations != 0 {
		t.Errorf("closed defaults: %d users, think %v, for %v, %d iterations", o.ClosedUsers, o.ClosedThink, o.ClosedDuration, o.ClosedIterations)
	}
	for _, bad := range [][]string{{"--closed-users", "0"}, {"--closed-think", "-1s"}, {"--closed-duration", "0s"}, {"--scalper-people", "9"}, {"--scalper-limit-interval", "0s"}, {"--scalper-limit-burst", "0"}, {"--scalper-target", "0"}} {
		if _, err := parseOptions(bad, withToken, io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", bad, err)
		}
	}
	// A fair lock's fleet holds redis-lock to a target; none drops one.
	o, err = parseOptions([]string{"--first-come-target", "redis-lock=0.95,db-atomic=none"}, withToken, io.Discard)
	if want := map[string]float64{"redis-lock": 0.95, "redis-atomic": 0.95, "redis-stream": 0.95}; err != nil || !maps.Equal(o.FirstComeTargets, want) {
		t.Errorf("--first-come-target redis-lock=0.95,db-atomic=none: %v (%v), want %v", o.FirstComeTargets, err, want)
	}
	if maps.Equal(o.FirstComeTargets, scenario.FirstComeTargets) || scenario.FirstComeTargets["db-atomic"] != 0.95 {
		t.Errorf("--first-come-target changed the defaults themselves: %v", scenario.FirstComeTargets)
	}
	for _, bad := range []string{"redis-lock", "nope=0.9", "redis-lock=1.5", "redis-lock=0", "redis-lock=high"} {
		if _, err := parseOptions([]string{"--first-come-target", bad}, withToken, io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("--first-come-target %s: got %v, want a usage error", bad, err)
		}
	}
	// Named stages run as named: a stage's own row can be asked for.
	if o, err := parseOptions([]string{"--stages", "unlocked,redis-lock", "--scenarios", "paced"}, withToken, io.Discard); err != nil ||
		!slices.Equal(o.scenarios[0].StagesOf(o.Config), []string{"unlocked", "redis-lock"}) {
		t.Errorf("paced with --stages unlocked,redis-lock runs on %v (%v)", o.scenarios[0].StagesOf(o.Config), err)
	}

	o, err = parseOptions([]string{"--targets", "127.0.0.1:9001/", "--stages", "db-atomic,unlocked,db-atomic", "--expect-oversell", "none"},
		env(map[string]string{"SECKILL_ADMIN_TOKEN": "x", "SECKILL_MYSQL_DSN": "dsn", "SECKILL_LAB_REPORTS": "/r"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.targets[0] != "http://127.0.0.1:9001" || strings.Join(o.Stages, ",") != "db-atomic,unlocked" ||
		len(o.expectOversell) != 0 || o.expectOversell == nil || o.mysqlDSN != "dsn" || o.reportDir != "/r" {
		t.Errorf("parsed: %+v", o)
	}

	o, err = parseOptions([]string{"--sweep", "1024, 16,64,16"}, withToken, io.Discard)
	if err != nil || !slices.Equal(o.sweep, []int{16, 64, 1024}) {
		t.Errorf("--sweep 1024,16,64,16: %v %v, want [16 64 1024]", o.sweep, err)
	}

	if o, err := parseOptions([]string{"--cpu-redis", "unix:/run/redis/redis.sock,127.0.0.1:6379"}, withToken, io.Discard); err != nil || len(o.cpuRedis) != 2 {
		t.Errorf("--cpu-redis with a Unix socket: %v, %q", err, o.cpuRedis)
	}
	o, err = parseOptions([]string{"--cpu-redis", "127.0.0.1:6379, 127.0.0.1:16381", "--sold-out-stage", "db-atomic", "--baseline-requests", "10000"},
		env(map[string]string{"SECKILL_ADMIN_TOKEN": "x", "SECKILL_REDIS_PASSWORD": "pw"}), io.Discard)
	if err != nil || !slices.Equal(o.cpuRedis, []string{"127.0.0.1:6379", "127.0.0.1:16381"}) || o.redisPassword != "pw" ||
		o.soldOutStage != "db-atomic" || o.baselineRequests != 10000 {
		t.Errorf("CPU options: %v, %+v", err, o)
	}
	if o, err := parseOptions(nil, withToken, io.Discard); err != nil || o.cpuRedis != nil || o.soldOutStage != "redis-atomic" || o.baselineRequests != 0 {
		t.Errorf("CPU defaults: %v, %q %q %d", err, o.cpuRedis, o.soldOutStage, o.baselineRequests)
	}

	bad := []struct {
		args []string
		env  func(string) string
		want string
	}{
		{[]string{"--cpu-redis", "localhost"}, withToken, `--cpu-redis: "localhost" is not host:port or unix:/path`},
		{[]string{"--cpu-redis", "unix:redis.sock"}, withToken, `--cpu-redis: "unix:redis.sock": a Unix socket needs an absolute path`},
		{[]string{"--sold-out-stage", "spinlock"}, withToken, `--sold-out-stage: unknown stage "spinlock"`},
		{[]string{"--baseline-requests", "-1"}, withToken, "--baseline-requests must not be negative"},
		{nil, env(map[string]string{"SECKILL_DEMO_DB": filepath.Join(t.TempDir(), "demo.db")}), "no admin token"},
		{[]string{"--stages", "spinlock"}, withToken, `unknown stage "spinlock"`},
		{[]string{"--scenarios", "bake"}, withToken, `unknown scenario "bake"`},
		{[]string{"--shape", "wave"}, withToken, "burst or constant"},
		{[]string{"--targets", "ftp://x"}, withToken, "not an http(s) base URL"},
		{[]string{"--expect-oversell", "nope"}, withToken, `unknown stage "nope"`},
		{[]string{"--workers", "0"}, withToken, "--workers"},
		{[]string{"extra"}, withToken, "unexpected argument"},
		{[]string{"--sweep", "16,lots"}, withToken, `--sweep: "lots" is not a positive number`},
		{[]string{"--sweep", "0"}, withToken, `--sweep: "0" is not a positive number`},
		{[]string{"--sweep", "16,64", "--shape", "constant"}, withToken, "--sweep needs --shape burst"},
	}
	for _, b := range bad {
		_, err := parseOptions(b.args, b.env, io.Discard)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("parseOptions(%q) = %v, want a usage error containing %q", b.args, err, b.want)
		}
	}
}

// TestAdminTokenFromDemoFile checks where the token comes from: the flag,
// else SECKILL_ADMIN_TOKEN, else the file the demo writes next to its
// database (.demo/admin-token by default), so the lab works against a
// demo started without a token of the user's choosing.
func TestAdminTokenFromDemoFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "admin-token"), []byte("from-the-demo-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(other, []byte("  from-another-file "), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	demoDB := filepath.Join(dir, "seckill.db")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string // the token, or the error's text
		err  bool
	}{
		{"demo file", nil, map[string]string{"SECKILL_DEMO_DB": demoDB}, "from-the-demo-file", false},
		{"environment first", nil, map[string]string{"SECKILL_DEMO_DB": demoDB, "SECKILL_ADMIN_TOKEN": "from-env"}, "from-env", false},
		{"flag first", []string{"--admin-token", "from-flag"}, map[string]string{"SECKILL_DEMO_DB": demoDB, "SECKILL_ADMIN_TOKEN": "from-env"}, "from-flag", false},
		{"named file", []string{"--admin-token-file", other}, nil, "from-another-file", false},
		{"no file", nil, map[string]string{"SECKILL_DEMO_DB": filepath.Join(t.TempDir(), "seckill.db")}, "no demo token file at", true},
		{"empty file", []string{"--admin-token-file", empty}, nil, "is empty", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseOptions(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			if tt.err {
				if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("got %v, want a usage error containing %q", err, tt.want)
				}
				return
			}
			if err != nil || o.adminToken != tt.want {
				t.Errorf("got token %q, %v; want %q", o.adminToken, err, tt.want)
			}
		})
	}
}
