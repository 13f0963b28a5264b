package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestParseProcStatCountsFieldsFromTheLastParenthesis(t *testing.T) {
	// A command name with a space and a parenthesis of its own; utime 150,
	// stime 50, rss 2560 pages.
	stat := "4242 (seck ill) (x)) S 1 4242 4242 0 -1 4194560 900 0 0 0 150 50 0 0 20 0 12 0 555 104857600 2560 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0"
	got, err := parseProcStat(stat)
	if err != nil {
		t.Fatal(err)
	}
	if got.cpuTicks != 200 || got.rssPages != 2560 {
		t.Fatalf("parseProcStat = %+v, want 200 ticks and 2560 pages", got)
	}
	for _, bad := range []string{"no name here", "1 (a) S 1 2 3"} {
		if _, err := parseProcStat(bad); err == nil {
			t.Errorf("parseProcStat(%q) took it", bad)
		}
	}
}

func TestParseInfoReadsCallsAndCPU(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:0.750000\r\nused_cpu_sys_children:9.0\r\n\r\n# Commandstats\r\n" +
		"cmdstat_xreadgroup:calls=43119,usec=1,usec_per_call=0.1,rejected_calls=0,failed_calls=0\r\ncmdstat_client|setinfo:calls=2,usec=1\r\n"
	got, err := parseInfo(info)
	if err != nil {
		t.Fatal(err)
	}
	if got.cpu != 2.0 {
		t.Errorf("cpu = %v, want 2 (sys + user, not children)", got.cpu)
	}
	if got.calls["xreadgroup"] != 43119 || got.calls["client|setinfo"] != 2 || len(got.calls) != 2 {
		t.Errorf("calls = %v", got.calls)
	}
	if _, err := parseInfo("cmdstat_get:usec=3\r\n"); err == nil {
		t.Error("a commandstats line without calls= was taken")
	}
}

func TestCommandDeltaListsTheMostFrequentFirstWithoutTheSweepsOwn(t *testing.T) {
	before := map[string]int64{"hlen": 100, "xreadgroup": 10, "info": 5, "get": 7}
	after := map[string]int64{"hlen": 150, "xreadgroup": 110, "info": 7, "get": 7, "xpending": 50, "ping": 1}
	got := commandDelta(before, after)
	want := []commandCount{{"xreadgroup", 100}, {"hlen", 50}, {"xpending", 50}}
	if len(got) != len(want) {
		t.Fatalf("commandDelta = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("commandDelta = %v, want %v", got, want)
		}
	}
}

func TestIdleOverTurnsSamplesIntoRates(t *testing.T) {
	pb, pa := procSample{cpuTicks: 1000}, procSample{cpuTicks: 1050, rssPages: 25600}
	rb := &redisSample{calls: map[string]int64{"hlen": 0, "info": 1}, cpu: 1.0}
	ra := &redisSample{calls: map[string]int64{"hlen": 300, "xpending": 100, "info": 2}, cpu: 1.2}
	got := idleOver(10*time.Second, pb, pa, 4096, rb, ra, 4)
	// 50 ticks of 10 ms over 10 s: 50 ms/s; 25,600 pages of 4 KiB: 100 MB.
	if got.CPUMsPerS != 50 || got.RSSMB != 100 {
		t.Errorf("CPU %v ms/s, RSS %v MB; want 50 and 100", got.CPUMsPerS, got.RSSMB)
	}
	if got.RedisCmdsPerS == nil || *got.RedisCmdsPerS != 40 {
		t.Errorf("Redis commands/s = %v, want 40 (400 over 10 s, INFO left out)", got.RedisCmdsPerS)
	}
	if got.RedisCmdsPerInstance == nil || *got.RedisCmdsPerInstance != 10 {
		t.Errorf("Redis commands/s per instance = %v, want 10 (40 over 4 instances)", got.RedisCmdsPerInstance)
	}
	if got.RedisCPUMsPerS == nil || *got.RedisCPUMsPerS < 19.99 || *got.RedisCPUMsPerS > 20.01 {
		t.Errorf("Redis CPU = %v ms/s, want 20", got.RedisCPUMsPerS)
	}
	noRedis := idleOver(10*time.Second, pb, pa, 4096, nil, nil, 1)
	if noRedis.RedisCmdsPerS != nil || noRedis.Top != nil {
		t.Errorf("without a Redis the sample says %+v", noRedis)
	}
}

func TestParseSizesWantsPositiveAscendingCounts(t *testing.T) {
	got, err := parseSizes("1000, 10000,100000")
	if err != nil || len(got) != 3 || got[2] != 100000 {
		t.Fatalf("parseSizes = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "10,x", "100,10", "5,5"} {
		if _, err := parseSizes(bad); err == nil {
			t.Errorf("parseSizes(%q) took it", bad)
		}
	}
}

func TestFreshDatabaseRefusesADatabaseNotNamedCatsweep(t *testing.T) {
	for _, dsn := range []string{"root:@tcp(127.0.0.1:1)/test", "root:@tcp(127.0.0.1:1)/", "root:@tcp(127.0.0.1:1)/catsweep`x"} {
		err := freshDatabase(context.Background(), dsn)
		if err == nil || !strings.Contains(err.Error(), "must start with catsweep") {
			t.Errorf("freshDatabase(%q) = %v, want a refusal before any connection", dsn, err)
		}
	}
}

func TestTableRowSaysNotReadyAndTheTopCommands(t *testing.T) {
	cmds, cpu := 10213.4, 207.0
	p := point{Items: 1000, Instance: "catsweep-1", Phase: phaseIdle, FillSeconds: 0.42, ReadySeconds: 60.2, Idle: idle{CPUMsPerS: 619, RSSMB: 54.4, RedisCmdsPerS: &cmds, RedisCPUMsPerS: &cpu,
		Top: []commandCount{{"xreadgroup", 43119}, {"hlen", 27489}, {"xpending", 20346}, {"get", 1}}}}
	want := "| 1000 | catsweep-1 | idle | 0.4 s | not ready after 60 s | 619 | 54 | 10213 | n/a | 207 | XREADGROUP 43119, HLEN 27489, XPENDING 20346 |"
	if got := p.row(); got != want {
		t.Errorf("row =\n%s\nwant\n%s", got, want)
	}
	demo := point{Items: 10, Phase: phaseIdle, Ready: true, ReadySeconds: 1.234, Idle: idle{CPUMsPerS: 3}}
	if got := demo.row(); !strings.Contains(got, "| 1.23 s |") || !strings.Contains(got, "n/a (embedded)") {
		t.Errorf("demo row = %s", got)
	}
	if ps := panels([]sizeRun{{Items: 10, Points: []point{demo}}}); len(ps) != 2 {
		t.Errorf("a sweep without Redis drew %d panels, want 2 (CPU, RSS)", len(ps))
	}
}

func TestAnInstanceThatExitedAtStartIsReportedNotCharted(t *testing.T) {
	log := "time=… level=WARN msg=\"order writer: pass failed\"\nseckill: load stock into redis: redis: connection pool timeout\ntime=… level=ERROR msg=late\n"
	msg := exitLine(log, "serve.log")
	if msg != "load stock into redis: redis: connection pool timeout" {
		t.Fatalf("exitLine = %q", msg)
	}
	if got := exitLine("no error here\n", "serve.log"); !strings.Contains(got, "serve.log") {
		t.Errorf("exitLine without an error line = %q, want a pointer to the log", got)
	}
	p := point{Items: 100000, ReadySeconds: 4.2, Exited: msg}
	if got := p.row(); !strings.Contains(got, "exited after 4 s: load stock into redis") || !strings.Contains(got, "no window") {
		t.Errorf("row = %s", got)
	}
	if ps := panels([]sizeRun{{Items: 100000, Points: []point{p}}}); ps != nil {
		t.Errorf("a sweep with no window drew %d panels", len(ps))
	}
	ok := point{Items: 1000, Phase: phaseIdle, Ready: true, Idle: idle{CPUMsPerS: 5}}
	if ps := panels([]sizeRun{{Items: 1000, Points: []point{ok}}, {Items: 100000, Points: []point{p}}}); len(ps) != 2 || len(ps[0].Lines[0].Points) != 1 {
		t.Errorf("the chart should hold the measured size alone: %+v", ps)
	}
}

func TestSweepOwnsTheVariablesThatPointTheInstanceElsewhere(t *testing.T) {
	for kv, want := range map[string]bool{
		"SECKILL_MYSQL_DSN=root@/test": true, "SECKILL_REDIS_ADDR=x:1": true, "SECKILL_REDIS_SENTINELS=a": true,
		"SECKILL_DEMO_DB=x.db": true, "SECKILL_ADDR=:1": true, "SECKILL_ADMIN_TOKEN_FILE=f": true,
		"SECKILL_RECONCILE_INTERVAL=0": false, "SECKILL_STAGE=db-atomic": false, "PATH=/bin": false,
	} {
		if got := sweepOwns(kv); got != want {
			t.Errorf("sweepOwns(%q) = %v, want %v", kv, got, want)
		}
	}
}
