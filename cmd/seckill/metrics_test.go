package main

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/inventory/redisstage"
	"github.com/seckill-lab/seckill/internal/testkit"
)

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/metrics: %v %d", err, resp.StatusCode)
	}
	return string(b)
}

// sample returns the value of the first series of name whose labels contain
// every fragment, or -1.
func sample(text, name string, fragments ...string) float64 {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\{([^}]*)\} (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		ok := true
		for _, f := range fragments {
			ok = ok && strings.Contains(m[1], f)
		}
		if ok {
			v, err := strconv.ParseFloat(m[2], 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// TestMetricsMoveWithBuys stays out of t.Parallel: it wants both late
// buyers refused from this instance's memory of the sell-out, which it
// trusts only under a live epoch (the reset's announcement and the
// epoch's lease can each drop it), and beside the other demo tests under
// -race, in three runs of three, one of the two went to the stage.
func TestMetricsMoveWithBuys(t *testing.T) {
	// The reconcile and payment-timeout jobs take a lock of their own on
	// the same locker every SECKILL_RECONCILE_INTERVAL: off here, so that
	// a slow run cannot count one of theirs among the buyers' locks.
	d := startDemo(t, map[string]string{"SECKILL_RECONCILE_INTERVAL": "0s"})
	base := d.instances[0]
	post := func(path, body string, hdr map[string]string) int {
		req, _ := http.NewRequest("POST", base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	admin := map[string]string{"Authorization": "Bearer demo-test-token"}
	if code := post("/api/v1/admin/products/2/reset", `{"stock":3}`, admin); code != 200 {
		t.Fatalf("reset: %d", code)
	}
	for i := 0; i < 5; i++ {
		post("/api/v1/products/2/buy", fmt.Sprintf(`{"user_id":"m%d"}`, i), nil)
	}
	text := scrape(t, base)
	checks := []struct {
		name  string
		frags []string
		want  float64
	}{
		{"seckill_buy_outcomes_total", []string{`stage="redis-lock"`, `outcome="created"`}, 3},
		{"seckill_buy_outcomes_total", []string{`stage="redis-lock"`, `outcome="sold-out"`}, 2},
		// The two buyers who came after the last unit heard "sold out"
		// without taking the lock.
		{"seckill_lock_acquire_seconds_count", []string{`backend="redis"`, `result="obtained"`}, 3},
		{"seckill_http_request_duration_seconds_count", []string{`route="/api/v1/products/:id/buy"`, `status="201"`}, 3},
		// The sale of the last unit told this instance's memory, so both
		// were answered from it; the stage itself refused nobody.
		{"seckill_crowd_refusals_total", []string{`kind="product"`, `reason="sold_out_stage"`}, -1},
		{"seckill_crowd_refusals_total", []string{`kind="product"`, `reason="sold_out_remembered"`}, 2},
		{"seckill_crowd_refusals_total", []string{`kind="product"`, `reason="bounced"`}, -1},
	}
	for _, c := range checks {
		if got := sample(text, c.name, c.frags...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.frags, got, c.want)
		}
	}
	// redis-sharded counts the buys that left their home bucket: one
	// unit, in bucket 0 of 4, bought by a buyer homed elsewhere.
	if code := post("/api/v1/admin/products/2/reset", `{"stock":1}`, admin); code != 200 {
		t.Fatalf("reset: %d", code)
	}
	if sample(text, "seckill_sharded_fallbacks_total", `kind="product"`) != 0 {
		t.Errorf("fallbacks before any redis-sharded buy: %v", sample(text, "seckill_sharded_fallbacks_total", `kind="product"`))
	}
	homes := redisstage.NewRedisSharded(nil, nil, "product", 4, nil)
	away := ""
	for i := 0; away == ""; i++ {
		if u := fmt.Sprintf("f%d", i); homes.Home(u) != 0 {
			away = u
		}
	}
	sharded := map[string]string{"Authorization": admin["Authorization"], "X-Seckill-Stage": "redis-sharded"}
	if code := post("/api/v1/products/2/buy", fmt.Sprintf(`{"user_id":%q}`, away), sharded); code != 201 {
		t.Fatalf("a redis-sharded buy from another bucket: %d", code)
	}
	if got := sample(scrape(t, base), "seckill_sharded_fallbacks_total", `kind="product"`); got != 1 {
		t.Errorf("seckill_sharded_fallbacks_total{kind=\"product\"} = %v, want 1", got)
	}
	// The sweeper (every second) gathers the last units: of two, one in
	// each of buckets 0 and 1, it moves one. Every instance runs one, and
	// whichever comes first moves the unit (the others find nothing to
	// move and count nothing), so the counts are summed over the
	// instances: on instance 1 alone, CI beside two hogs waited 30 s for
	// a sweep another instance had made. An earlier reset may have been
	// swept too, so count from here.
	moved := func() (float64, float64) {
		var sweeps, units float64
		for _, in := range d.instances {
			text := scrape(t, in)
			s, u := sample(text, "seckill_sharded_sweeps_total", `kind="product"`), sample(text, "seckill_sharded_units_moved_total", `kind="product"`)
			if s < 0 || u < 0 {
				return -1, -1
			}
			sweeps, units = sweeps+s, units+u
		}
		return sweeps, units
	}
	sweeps0, units0 := moved()
	if code := post("/api/v1/admin/products/2/reset", `{"stock":2}`, admin); code != 200 || sweeps0 < 0 || units0 < 0 {
		t.Fatalf("reset: %d; sweeps %v, units moved %v before it", code, sweeps0, units0)
	}
	testkit.Eventually(t, "the sweeper's counts", 30*time.Second, func() bool {
		sweeps, units := moved()
		return sweeps == sweeps0+1 && units == units0+1
	})
	// Each instance has its own registry, as separate processes would.
	if other := sample(scrape(t, d.instances[1]), "seckill_buy_outcomes_total", `outcome="created"`); other != -1 {
		t.Errorf("instance 2 counted buys it did not serve: %v", other)
	}
	for token, want := range map[string]int{"": 401, "wrong-token-1": 403, "demo-test-token": 200} {
		req, _ := http.NewRequest("GET", base+"/debug/pprof/", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("pprof with token %q: %d, want %d", token, resp.StatusCode, want)
		}
	}
}
