package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
)

// TestConfirmWaitsOutADrainingQueue: two targets share one queue that a
// writer drains while the lab waits, so two audits read one after the
// other never agree on the pending count until it is zero. The lab must
// wait for the drain, not call the targets inconsistent; on the old code
// it stopped with "audits disagree" on the first poll.
func TestConfirmWaitsOutADrainingQueue(t *testing.T) {
	var mu sync.Mutex
	pending := 5 // each audit read sees one more order written
	var urls []string
	for range 2 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			switch {
			case r.URL.Path == "/api/v1/products/1/audit":
				a := api.Audit{ProductID: 1, InitialStock: 5, Stock: pending, Sold: 5 - pending, Pending: pending, PendingOrders: pending, Conserved: true}
				pending = max(0, pending-1)
				_ = json.NewEncoder(w).Encode(a)
			case strings.HasPrefix(r.URL.Path, "/api/v1/orders/"):
				now := time.Now()
				no := strings.TrimPrefix(r.URL.Path, "/api/v1/orders/")
				_ = json.NewEncoder(w).Encode(api.OrderStatus{OrderNo: no, Status: api.StatusConfirmed, CreatedAt: now.Add(-time.Millisecond), WrittenAt: &now})
			default:
				http.Error(w, "unexpected "+r.URL.Path, http.StatusTeapot)
			}
		}))
		defer srv.Close()
		urls = append(urls, srv.URL)
	}
	f := &fleet{client: &http.Client{Timeout: 5 * time.Second}, token: "t", targets: urls}
	c, err := f.confirm(context.Background(), scenarios[0], 1, []string{"o1", "o2", "o3", "o4", "o5"}, time.Minute)
	if err != nil {
		t.Fatalf("confirm while the queue drains: %v", err)
	}
	if c.confirmed != 5 || c.pending != 0 || c.missing != 0 {
		t.Fatalf("confirmation %+v, want all 5 confirmed", c)
	}
	mu.Lock()
	defer mu.Unlock()
	if pending != 0 {
		t.Fatalf("confirm returned with %d orders still pending", pending)
	}
}
