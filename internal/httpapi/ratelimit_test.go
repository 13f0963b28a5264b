package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/httpapi"
)

// fakeRateLimits records what PUT /api/v1/admin/rate-limit set.
type fakeRateLimits struct {
	interval time.Duration
	burst    int
	by       []string
	draw     time.Duration
	sets     int
}

func (f *fakeRateLimits) RateLimit() api.RateLimit {
	return api.RateLimit{On: f.interval > 0, IntervalMS: float64(f.interval.Microseconds()) / 1000, Burst: f.burst, By: f.by, TrustedProxies: []string{"127.0.0.1/32"},
		OpeningDrawMS: float64(f.draw.Microseconds()) / 1000}
}

func (f *fakeRateLimits) SetOpeningDraw(d time.Duration) api.RateLimit {
	f.draw = d
	return f.RateLimit()
}

func (f *fakeRateLimits) SetRateLimit(interval time.Duration, burst int, by []string) (api.RateLimit, error) {
	f.interval, f.burst, f.by = interval, burst, by
	f.sets++
	return f.RateLimit(), nil
}

// TestRateLimitRoute: GET /api/v1/admin/rate-limit shows the instance's
// limit and PUT changes it; a field left out keeps its value, interval_ms
// 0 turns the limit off, a bad value is 400 invalid-request and changes
// nothing, both need the admin token, and an instance without Redis
// answers 404 no-redis.
func TestRateLimitRoute(t *testing.T) {
	const admin = "rate-admin-token"
	rl := &fakeRateLimits{burst: 5, by: []string{"account"}}
	h := httpapi.NewServer(httpapi.Deps{Instance: "rate-1", AdminToken: admin, RateLimits: rl})
	call := func(method, body, token string) (int, api.RateLimit, string) {
		return callRateLimit(t, h, method, body, token)
	}

	if code, _, slug := call("GET", "", ""); code != 401 || slug != "unauthorized" {
		t.Fatalf("GET without the token: %d %s", code, slug)
	}
	if code, _, slug := call("PUT", `{"interval_ms":100}`, "wrong"); code != 403 || slug != "forbidden" || rl.sets != 0 {
		t.Fatalf("PUT with a wrong token: %d %s, %d sets", code, slug, rl.sets)
	}
	code, got, _ := call("GET", "", admin)
	if code != 200 || got.On || got.Instance != "rate-1" || got.Burst != 5 || !slices.Equal(got.By, []string{"account"}) || len(got.TrustedProxies) != 1 {
		t.Fatalf("GET: %d %+v", code, got)
	}
	code, got, _ = call("PUT", `{"interval_ms":50,"by":["address"]}`, admin)
	if code != 200 || !got.On || got.IntervalMS != 50 || got.Burst != 5 || !slices.Equal(got.By, []string{"address"}) || rl.interval != 50*time.Millisecond {
		t.Fatalf("PUT on (burst left out): %d %+v, set %v", code, got, rl.interval)
	}
	code, got, _ = call("PUT", `{"burst":1}`, admin)
	if code != 200 || got.IntervalMS != 50 || got.Burst != 1 || !slices.Equal(got.By, []string{"address"}) {
		t.Fatalf("PUT burst alone: %d %+v", code, got)
	}
	// The opening draw is set beside the limit, and kept when left out.
	code, got, _ = call("PUT", `{"opening_draw_ms":1000}`, admin)
	if code != 200 || got.OpeningDrawMS != 1000 || rl.draw != time.Second || got.IntervalMS != 50 || got.Burst != 1 {
		t.Fatalf("PUT opening_draw_ms: %d %+v", code, got)
	}
	code, got, _ = call("PUT", `{"burst":2}`, admin)
	if code != 200 || got.OpeningDrawMS != 1000 || got.Burst != 2 {
		t.Fatalf("PUT burst with the draw left out: %d %+v", code, got)
	}
	for _, bad := range []string{`{"interval_ms":-1}`, `{"interval_ms":3600001}`, `{"interval_ms":0.0001}`, `{"burst":0}`, `{"burst":1000001}`,
		`{"by":[]}`, `{"by":["ip"]}`, `{"by":["account","account"]}`, `{"opening_draw_ms":-1}`, `{"opening_draw_ms":10001}`} {
		sets := rl.sets
		if code, _, slug := call("PUT", bad, admin); code != 400 || slug != "invalid-request" || rl.sets != sets {
			t.Errorf("PUT %s: %d %s, %d sets; want 400 invalid-request and nothing set", bad, code, slug, rl.sets-sets)
		}
	}
	if code, _, slug := call("PUT", `{"interval_ms":"fast"}`, admin); code != 400 || slug != "invalid-request" {
		t.Errorf("PUT with a string interval: %d %s", code, slug)
	}
	code, got, _ = call("PUT", `{"interval_ms":0,"opening_draw_ms":0}`, admin)
	if code != 200 || got.On || rl.interval != 0 || got.Burst != 2 || rl.draw != 0 {
		t.Fatalf("PUT off: %d %+v", code, got)
	}
	// A draw may hold a buyer twice its span: not past the deadline.
	h = httpapi.NewServer(httpapi.Deps{Instance: "rate-1", AdminToken: admin, RateLimits: rl, RequestTimeout: 3 * time.Second})
	if code, _, slug := call("PUT", `{"opening_draw_ms":1500}`, admin); code != 400 || slug != "invalid-request" || rl.draw != 0 {
		t.Errorf("PUT a draw of half the request deadline: %d %s, draw %v; want 400 and nothing set", code, slug, rl.draw)
	}

	h = httpapi.NewServer(httpapi.Deps{Instance: "rate-2", AdminToken: admin})
	for _, m := range []string{"GET", "PUT"} {
		if code, _, slug := call(m, `{"interval_ms":100}`, admin); code != 404 || slug != "no-redis" {
			t.Errorf("%s without Redis: %d %s, want 404 no-redis", m, code, slug)
		}
	}
}

// callRateLimit sends method /api/v1/admin/rate-limit with body (and the
// admin token, unless ""), and returns the status with the answer, or the
// problem's slug.
func callRateLimit(t *testing.T, h http.Handler, method, body, token string) (int, api.RateLimit, string) {
	t.Helper()
	req := httptest.NewRequest(method, "/api/v1/admin/rate-limit", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var out api.RateLimit
	var slug string
	if rec.Code == 200 {
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s: %v: %s", method, err, rec.Body)
		}
	} else {
		slug = problemType(t, rec)
	}
	return rec.Code, out, slug
}

// TestOpeningDrawBounds: a draw the route accepts must fit in the request
// deadline and show in GET as it is.
//   - A buyer who comes a hair (up to 100 ms) before the opening is held
//     too, and may be let in at the opening + 2D: held 2D + 100 ms. With a
//     3 s deadline, 1,480 ms would hold such a buyer 3.06 s, past it: 400.
//   - Under a microsecond, GET would show 0 (none) for a draw that is on
//     (and turns keyed buys' folding off), and the next PUT that leaves
//     the draw out would set 0 from it: 400, as for interval_ms.
func TestOpeningDrawBounds(t *testing.T) {
	const admin = "rate-admin-token"
	rl := &fakeRateLimits{burst: 1, by: []string{"account"}}
	h := httpapi.NewServer(httpapi.Deps{Instance: "rate-1", AdminToken: admin, RateLimits: rl, RequestTimeout: 3 * time.Second})
	call := func(method, body string) (int, api.RateLimit, string) {
		return callRateLimit(t, h, method, body, admin)
	}
	for _, bad := range []string{`{"opening_draw_ms":1480}`, `{"opening_draw_ms":0.0001}`} {
		if code, got, slug := call("PUT", bad); code != 400 || slug != "invalid-request" || rl.draw != 0 {
			t.Errorf("PUT %s: %d %s (GET would show %v ms, set %v); want 400 invalid-request and nothing set", bad, code, slug, got.OpeningDrawMS, rl.draw)
		}
	}
	if code, got, _ := call("PUT", `{"opening_draw_ms":1400}`); code != 200 || got.OpeningDrawMS != 1400 || rl.draw != 1400*time.Millisecond {
		t.Fatalf("PUT 1400 ms with a 3 s deadline: %d %+v; want it set (held at most 2.9 s)", code, got)
	}
}
