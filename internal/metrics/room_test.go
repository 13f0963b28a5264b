package metrics_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/seckill-lab/seckill/internal/metrics"
)

// TestRoomCounts: /metrics exports each count of the waiting rooms under
// its own name, as read at the scrape.
func TestRoomCounts(t *testing.T) {
	m := metrics.New("i1")
	joins := int64(0)
	m.CountRoom(func() (int64, int64, int64, int64, int64) { return joins, 2, 3, 4, 5 })
	joins = 7
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`seckill_room_joins_total{instance_name="i1"} 7`,
		`seckill_room_polls_total{instance_name="i1"} 2`,
		`seckill_room_passes_total{instance_name="i1"} 3`,
		`seckill_room_spends_total{instance_name="i1"} 4`,
		`seckill_room_expiries_total{instance_name="i1"} 5`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
}
