package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
)

// TestResidentMemoryFromMetrics: the lab reads each target's resident
// memory from the process collector of its /metrics, and nothing when a
// target has no metrics.
func TestResidentMemoryFromMetrics(t *testing.T) {
	with := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 5.24288e+07\nprocess_virtual_memory_bytes 9e+09\n"))
	}))
	defer with.Close()
	without := httptest.NewServer(http.NotFoundHandler())
	defer without.Close()
	f := &Fleet{client: &http.Client{Timeout: 5 * time.Second}, Targets: []string{with.URL, with.URL}}
	if got := f.ResidentMiB(context.Background()); len(got) != 2 || got[0] != 50 || got[1] != 50 {
		t.Fatalf("resident memory %v, want [50 50] MiB", got)
	}
	f.Targets = append(f.Targets, without.URL)
	if got := f.ResidentMiB(context.Background()); got != nil {
		t.Fatalf("a target without metrics: got %v, want nothing", got)
	}
}

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
	f := &Fleet{client: &http.Client{Timeout: 5 * time.Second}, token: "t", Targets: urls}
	c, err := f.Confirm(context.Background(), Item{ID: 1}, []string{"o1", "o2", "o3", "o4", "o5"}, time.Minute)
	if err != nil {
		t.Fatalf("confirm while the queue drains: %v", err)
	}
	if c.Confirmed != 5 || c.Pending != 0 || c.Missing != 0 {
		t.Fatalf("confirmation %+v, want all 5 confirmed", c)
	}
	mu.Lock()
	defer mu.Unlock()
	if pending != 0 {
		t.Fatalf("confirm returned with %d orders still pending", pending)
	}
}

// TestProcessCPUFromMetrics: an instance's CPU is
// seckill_process_cpu_rusage_seconds_total of its /metrics, or
// process_cpu_seconds_total where it has not that; a target without
// either, or without metrics, is an error.
func TestProcessCPUFromMetrics(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			fmt.Fprint(w, "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.34\nprocess_resident_memory_bytes 1e+07\n")
		case "/rusage/metrics":
			fmt.Fprint(w, "process_cpu_seconds_total 12.34\n# TYPE seckill_process_cpu_rusage_seconds_total counter\nseckill_process_cpu_rusage_seconds_total 12.345678\n")
		case "/other/metrics":
			fmt.Fprint(w, "process_resident_memory_bytes 1e+07\n")
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	f := &Fleet{client: &http.Client{Timeout: 5 * time.Second}}
	if got, err := f.ProcessCPU(context.Background(), srv.URL); err != nil || got != 12.34 {
		t.Fatalf("got %v, %v; want 12.34 s", got, err)
	}
	if got, err := f.ProcessCPU(context.Background(), srv.URL+"/rusage"); err != nil || got != 12.345678 {
		t.Fatalf("with getrusage's counter: got %v, %v; want 12.345678 s, not the 10 ms ticks", got, err)
	}
	if _, err := f.ProcessCPU(context.Background(), srv.URL+"/other"); err == nil || !strings.Contains(err.Error(), "no process_cpu_seconds_total") {
		t.Errorf("metrics without the counter: %v", err)
	}
	if _, err := f.ProcessCPU(context.Background(), srv.URL+"/none"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("no metrics: %v", err)
	}
}
