package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/loadtest/baseline"
	"github.com/seckill-lab/seckill/loadtest/cpu"
	"github.com/seckill-lab/seckill/loadtest/fleet"
	"github.com/seckill-lab/seckill/loadtest/results"
	"github.com/seckill-lab/seckill/loadtest/scenario"
)

func f64(v float64) *float64 { return &v }

// near compares CPU figures computed from floats.
func near(got *float64, want float64) bool { return got != nil && math.Abs(*got-want) < 1e-6 }

// TestInstanceCPULeavesItsOwnReadingOut: an instance on this machine is
// read by its process's CPU-time clock, so an attack's CPU is the
// attack's alone. Read from /metrics, it also held what the scrape
// before it cost after reading the counter (encoding and compressing the
// page: about a millisecond per instance here, and a reading of every
// instance begins every attack and every baseline's slice). The fake
// shop's pages cost 2 ms that way. Where the clock is not trusted, the
// lab reads /metrics, as before.
func TestInstanceCPULeavesItsOwnReadingOut(t *testing.T) {
	ctx := context.Background()
	url, shop := startFakeShopAs(t, (*fakeShop).sell, true, func(s *fakeShop) { s.process, s.pidNS, s.scrapeCost = "labhost/4242", "pid:[2]", 0.002 })
	f, err := fleet.Survey(ctx, []string{url}, "fake-token", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	own := func(pid int) (float64, error) {
		if pid != 4242 {
			return 0, fmt.Errorf("no process %d here", pid)
		}
		return shop.clock(), nil
	}
	o := options{targets: []string{url}, Config: scenario.Config{Timeout: 5 * time.Second}}
	show := func(s *float64) string {
		if s == nil {
			return "unavailable"
		}
		return fmt.Sprintf("%g", *s)
	}
	buys := func(t *testing.T, m *cpu.Meter) *float64 {
		t.Helper()
		before := m.Read(ctx)
		for i := range 3 {
			resp, err := http.Post(url+"/api/v1/products/1/buy", "application/json", strings.NewReader(fmt.Sprintf(`{"user_id":"u%d","quantity":1}`, i)))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		return m.Usage(before, m.Read(ctx)).OfKind(cpu.Instance)
	}
	// The fake process's stat: its start time, field 22, names it.
	started := func(t *testing.T, dir, start string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, "4242"), 0o755); err != nil {
			t.Fatal(err)
		}
		stat := "4242 (seckill) S 1 4242 4242 0 -1 4194560 1 0 0 0 300 100 0 0 20 0 9 0 " + start + " 1 1 1\n"
		if err := os.WriteFile(filepath.Join(dir, "4242", "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	started(t, dir, "777")
	m := newCPUMeter(ctx, f, o, cpu.Procs{Dir: dir, Hostname: "labhost", PIDNS: "pid:[2]", Clock: own})
	if how := m.Sources[0].How; !strings.Contains(how, "CPU-time clock (labhost/4242)") {
		t.Errorf("read from %q, want its process's clock", how)
	}
	if got := buys(t, m); !near(got, 3*fakeCPUPerBuy) {
		t.Errorf("by the clock: %s s, want %g: the three buys alone", show(got), 3*fakeCPUPerBuy)
	}
	// The instance restarts and its pid goes to another process: its CPU
	// is unavailable, not that process's.
	started(t, dir, "912")
	before := m.Read(ctx)
	if u := m.Usage(before, m.Read(ctx)); u.OfKind(cpu.Instance) != nil || !strings.Contains(u.Unavailable(), "no longer the process the lab began with") {
		t.Errorf("after a restart: %+v, %q; want the instance unavailable, and why", u, u.Unavailable())
	}

	for name, tt := range map[string]struct {
		procs cpu.Procs
		why   string
	}{
		"another host": {cpu.Procs{Hostname: "elsewhere", Clock: own}, "it runs on labhost"},
		"a clock ahead of the instance's own readings": {cpu.Procs{Hostname: "labhost", Clock: func(int) (float64, error) { return 1e6, nil }}, "did not fall between"},
		"a clock behind them":                          {cpu.Procs{Hostname: "labhost", Clock: func(int) (float64, error) { return 0.1, nil }}, "did not fall between"},
		"a clock that fails":                           {cpu.Procs{Hostname: "labhost", Clock: func(int) (float64, error) { return 0, errors.New("EPERM") }}, "EPERM"},
		"no clock":                                     {cpu.Procs{Hostname: "labhost"}, "no CPU-time clock"},
		"another pid namespace":                        {cpu.Procs{Hostname: "labhost", PIDNS: "pid:[1]", Clock: own}, "another pid namespace, pid:[2]"},
	} {
		t.Run(name, func(t *testing.T) {
			tt.procs.Dir = t.TempDir()
			started(t, tt.procs.Dir, "777")
			m := newCPUMeter(ctx, f, o, tt.procs)
			if how := m.Sources[0].How; !strings.HasPrefix(how, url+"/metrics (") || !strings.Contains(how, tt.why) {
				t.Errorf("read from %q, want its /metrics, because %s", how, tt.why)
			}
			if got := buys(t, m); !near(got, 3*fakeCPUPerBuy+shop.scrapeCost) {
				t.Errorf("%s s, want %g: the buys and the page before them, read from /metrics", show(got), 3*fakeCPUPerBuy+shop.scrapeCost)
			}
		})
	}
}

// TestCPUPerAnswerAgainstAFakeShop: the lab reads the shop's CPU around
// the attack (200 buys at 0.5 ms each) and its own, and divides by the
// answers and the units sold. A shop without /metrics still gets its
// verdict; its CPU is unavailable, said so, and shown as n/a, never 0.
func TestCPUPerAnswerAgainstAFakeShop(t *testing.T) {
	r, err := runAgainst(t, startFakeShop(t, (*fakeShop).sell), "--stages", "db-atomic")
	if err != nil || r.Verdict != results.Pass || r.CPU == nil {
		t.Fatalf("sound shop: %v, %s %q, CPU %+v", err, r.Verdict, r.Note, r.CPU)
	}
	lab := r.CPU.OfKind(cpu.Lab)
	if !near(r.CPU.OfKind(cpu.Instance), 200*fakeCPUPerBuy) || lab == nil || !near(r.CPU.Seconds, 200*fakeCPUPerBuy+*lab) {
		t.Fatalf("CPU %+v: want the shop's 0.1 s and the lab's", r.CPU)
	}
	if !near(r.CPUPerAnswerMS, *r.CPU.Seconds*1e3/200) || !near(r.CPUPerSaleMS, *r.CPU.Seconds*1e3/40) {
		t.Errorf("per answer %s µs, per sale %s µs; want the total over 200 answers and over 40 sales", orNA(r.CPUPerAnswerMS), orNA(r.CPUPerSaleMS))
	}
	for _, p := range r.CPU.Parts {
		if p.Kind == cpu.Redis && !strings.Contains(p.Skipped, "no --cpu-redis") || p.Kind == cpu.MySQL && !strings.Contains(p.Skipped, "no SECKILL_MYSQL_DSN") {
			t.Errorf("part %+v: want it skipped with the reason", p)
		}
	}

	env := map[string]string{"SECKILL_ADMIN_TOKEN": "fake-token", "NO_COLOR": "1"}
	rep, err := runShortEnv(t, env, []string{startFakeShopMetrics(t, (*fakeShop).sell, false)}, append(slices.Clone(fakeArgs), "--stages", "db-atomic")...)
	if err != nil || len(rep.Rows) != 1 {
		t.Fatalf("shop without metrics: %v, %d rows", err, len(rep.Rows))
	}
	r = rep.Rows[0]
	if r.Verdict != results.Pass || r.CPUPerAnswerMS != nil || r.CPUPerSaleMS != nil || r.CPU == nil || r.CPU.Seconds != nil {
		t.Fatalf("shop without metrics: %s, per answer %s, CPU %+v; want a pass with the CPU unavailable", r.Verdict, orNA(r.CPUPerAnswerMS), r.CPU)
	}
	if !strings.Contains(r.Note, "instance fake-1 CPU: unavailable (") || !strings.Contains(r.Note, "404") {
		t.Errorf("note %q does not say the instance's CPU is unavailable, and why", r.Note)
	}
}

// TestSoldOutBaselines: the sold-out baselines reset the product to 0 and
// buy it under --sold-out-stage, one buyer per request, with an
// Idempotency-Key or without, count the 409s, and read the CPU around
// them; a fleet without the stage gets a note, not a figure.
func TestSoldOutBaselines(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{} // "keyed"/"keyless" -> requests
	users := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			UserID string `json:"user_id"`
		}
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/products/7/buy" || r.Header.Get("X-Seckill-Stage") != "db-atomic" ||
			json.NewDecoder(r.Body).Decode(&body) != nil {
			http.Error(w, "unexpected", http.StatusTeapot)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		kind := "keyless"
		if k := r.Header.Get("Idempotency-Key"); k != "" {
			kind = "keyed"
			if k != body.UserID {
				http.Error(w, "key is not the user", http.StatusTeapot)
				return
			}
		}
		seen[kind]++
		users[body.UserID] = true
		w.WriteHeader(http.StatusConflict)
	}))
	defer srv.Close()
	o := options{targets: []string{srv.URL}, soldOutStage: "db-atomic", Config: scenario.Config{Buyers: 100, Timeout: 5 * time.Second, MaxDuration: 30 * time.Second, Product: 7}}
	for _, keyed := range []bool{true, false} {
		conns := scenario.NewAttackTransport(o.Timeout)
		b := baseline.SoldOutBuys(context.Background(), conns, o.baseline(), 8, "x", keyed, "t")
		conns.CloseIdleConnections()
		if b.OK != 100 || b.Note != "" {
			t.Errorf("keyed %v: %+v, want 100 × 409", keyed, b)
		}
	}
	if seen["keyed"] != 100 || seen["keyless"] != 100 || len(users) != 100 {
		t.Errorf("requests %v from %d buyers; want 100 keyed, 100 keyless, each buyer its own", seen, len(users))
	}

	url := startFakeShop(t, (*fakeShop).sell)
	f, err := fleet.Survey(context.Background(), []string{url}, "fake-token", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	o = options{targets: []string{url}, soldOutStage: "redis-atomic", adminToken: "fake-token", Config: scenario.Config{Buyers: 200, Timeout: 5 * time.Second, MaxDuration: 30 * time.Second, Product: 1}}
	got := map[string]results.Ceiling{}
	for _, c := range baseline.Measure(context.Background(), o.baseline(), f, nil, newCPUMeter(context.Background(), f, o, cpu.Procs{Dir: t.TempDir()}), 16, "t", io.Discard) {
		got[c.Name] = c
	}
	for _, name := range []string{results.BaselineSoldOutKeyed, results.BaselineSoldOutNoKey} {
		c := got[name]
		if c.OK != 200 || c.CPU == nil || !near(c.CPU.OfKind(cpu.Instance), 200*fakeCPUPerBuy) || !near(c.CPUPerAnswerMS, *c.CPU.Seconds*1e3/200) {
			t.Errorf("%s: %+v, want 200 sold-out answers and their CPU", name, c)
		}
	}
	f.Infos[0].Stages = []string{"db-atomic"}
	for _, c := range baseline.Measure(context.Background(), o.baseline(), f, nil, newCPUMeter(context.Background(), f, o, cpu.Procs{Dir: t.TempDir()}), 16, "t", io.Discard) {
		if (c.Name == results.BaselineSoldOutKeyed || c.Name == results.BaselineSoldOutNoKey) && (c.CPU != nil || c.Note != "not measured: redis-atomic is not available on "+url) {
			t.Errorf("%s without its stage: %+v", c.Name, c)
		}
	}
}

// TestBaselinesAreSlicedInTurn: the HTTP baselines are sent in
// results.BaselineSlices slices taken in turn (a slice of each, then the next
// slice of each), and each baseline's figures are the sums over its
// slices: every request answered, every sold-out buyer its own, the CPU
// of every slice counted.
func TestBaselinesAreSlicedInTurn(t *testing.T) {
	shop := startFakeShop(t, (*fakeShop).sell)
	target, err := neturl.Parse(shop)
	if err != nil {
		t.Fatal(err)
	}
	forward := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	var order []string // the baseline of each request, in the order they came
	keys := map[string]bool{}
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind := ""
		switch {
		case r.URL.Path == "/healthz":
			kind = results.BaselineHTTP
		case r.URL.Path == "/api/v1/admin/redis-ping":
			kind = results.BaselineRedis
		case r.URL.Path == "/api/v1/products/1/buy" && r.Header.Get("Idempotency-Key") != "":
			kind = results.BaselineSoldOutKeyed
		case r.URL.Path == "/api/v1/products/1/buy":
			kind = results.BaselineSoldOutNoKey
		}
		if kind != "" {
			mu.Lock()
			order = append(order, kind)
			if k := r.Header.Get("Idempotency-Key"); k != "" {
				keys[k] = true
			}
			mu.Unlock()
		}
		if kind == results.BaselineRedis {
			w.WriteHeader(http.StatusOK) // the fake shop has no Redis to ping
			return
		}
		forward.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	f, err := fleet.Survey(context.Background(), []string{proxy.URL}, "fake-token", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	const requests = 202 // not a multiple of the slices: the first slices take one more
	o := options{targets: []string{proxy.URL}, soldOutStage: "redis-atomic", adminToken: "fake-token", Config: scenario.Config{Buyers: requests, Timeout: 5 * time.Second, MaxDuration: 30 * time.Second, Product: 1}}
	got := baseline.Measure(context.Background(), o.baseline(), f, nil, newCPUMeter(context.Background(), f, o, cpu.Procs{Dir: t.TempDir()}), 4, "t", io.Discard)

	// Requests of one slice run together: fold the order into runs.
	var runs []string
	for _, k := range order {
		if len(runs) == 0 || runs[len(runs)-1] != k {
			runs = append(runs, k)
		}
	}
	turn := []string{results.BaselineHTTP, results.BaselineRedis, results.BaselineSoldOutKeyed, results.BaselineSoldOutNoKey}
	var want []string
	for range results.BaselineSlices {
		want = append(want, turn...)
	}
	if !slices.Equal(runs, want) {
		t.Errorf("the baselines ran as %v, want %d turns of %v", runs, results.BaselineSlices, turn)
	}
	if len(keys) != requests {
		t.Errorf("%d distinct Idempotency-Keys over the keyed slices, want %d: every buyer its own", len(keys), requests)
	}
	for _, c := range got[:4] {
		if c.Requests != requests || c.OK != requests || c.Note != "" || c.PerSecond <= 0 {
			t.Errorf("%s: %d of %d ok at %.0f/s, note %q; want all %d of its slices' requests answered", c.Name, c.OK, c.Requests, c.PerSecond, c.Note, requests)
		}
	}
	for _, c := range got[2:4] {
		if c.CPU == nil || !near(c.CPU.OfKind(cpu.Instance), requests*fakeCPUPerBuy) {
			t.Errorf("%s: instance CPU %v, want every slice's (%d buys × %v s)", c.Name, c.CPU, requests, fakeCPUPerBuy)
		}
	}
}

// orNA prints a CPU figure that may be missing.
func orNA(v *float64) string {
	if v == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.3f", *v)
}
