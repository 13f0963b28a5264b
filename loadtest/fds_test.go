package main

import (
	"context"
	"io"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/testkit"
	"github.com/seckill-lab/seckill/loadtest/baseline"
	"github.com/seckill-lab/seckill/loadtest/cpu"
	"github.com/seckill-lab/seckill/loadtest/fleet"
	"github.com/seckill-lab/seckill/loadtest/results"
	"github.com/seckill-lab/seckill/loadtest/scenario"
)

// openFiles counts this process's open file descriptors.
func openFiles(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("counting open files: %v", err)
	}
	return len(entries)
}

// settlesAt waits until the open files are back to at most limit: the
// server side of a connection the client closed goes a moment later.
func settlesAt(t *testing.T, what string, limit int) {
	t.Helper()
	if !testkit.Poll(10*time.Second, func() bool { return openFiles(t) <= limit }) {
		t.Fatalf("%s left %d files open, want at most %d: its connections stay open after it ended", what, openFiles(t), limit)
	}
}

// TestAttacksCloseTheirConnections: an attack opens one connection per
// buyer in flight, and must close them when it is over. vegeta's own
// transport keeps them for good, so a sweep (every stage at up to 1,024 in
// flight) kept thousands open, and a sweep run three times over failed with
// "too many open files". On the old code the ceiling left 64 client and 64
// server sockets open here (the baselines now send in slices over
// connections they keep, and close them at their end), and the stage attack 64 more.
func TestAttacksCloseTheirConnections(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("counts open files through /proc/self/fd")
	}
	const slack = 8 // the test's own client and server bookkeeping
	url := startFakeShop(t, (*fakeShop).sell)
	f, err := fleet.Survey(context.Background(), []string{url}, "fake-token", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	before := openFiles(t)
	o := options{targets: []string{url}, soldOutStage: "redis-atomic", adminToken: "fake-token", Config: scenario.Config{Buyers: 600, Timeout: 5 * time.Second, MaxDuration: 30 * time.Second, Product: 1}}
	for _, b := range baseline.Measure(context.Background(), o.baseline(), f, nil, newCPUMeter(context.Background(), f, o, cpu.Procs{Dir: t.TempDir()}), 64, "t", io.Discard)[:4] {
		if b.Name == results.BaselineRedis { // the fake shop has no Redis to ping
			if b.OK != 0 || b.Note != "not 200: 404 ×600" {
				t.Fatalf("%s: %+v, want 600 × 404", b.Name, b)
			}
		} else if b.OK != 600 {
			t.Fatalf("%s: %+v, want 600 ok", b.Name, b)
		}
	}
	settlesAt(t, "the baselines", before+slack)

	before = openFiles(t)
	if r, err := runAgainst(t, url, "--stages", "db-atomic", "--workers", "64"); err != nil || r.Verdict != results.Pass {
		t.Fatalf("attack: %v, %s %q", err, r.Verdict, r.Note)
	}
	settlesAt(t, "a stage's attack", before+slack)
}
