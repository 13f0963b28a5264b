package httpapi_test

import (
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/httpapi"
)

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
