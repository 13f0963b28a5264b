package burst_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/burst"
)

// shop is a tiny stand-in for the fleet: instances that share one stock,
// sell it correctly, and remember each Idempotency-Key and user.
type shop struct {
	mu     sync.Mutex
	stock  int
	init   int
	users  map[string]bool
	keys   map[string]bool
	stages map[string]string // instance -> stage
}

func newShop(stock int) *shop {
	return &shop{stock: stock, init: stock, users: map[string]bool{}, keys: map[string]bool{}, stages: map[string]string{}}
}

func (s *shop) instance(t *testing.T, name string) *httptest.Server {
	s.stages[name] = "unlocked"
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/products/1/buy", func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			UserID string `json:"user_id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			t.Errorf("bad body: %v", err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		key := r.Header.Get("Idempotency-Key")
		if key == "" || s.keys[key] || s.users[b.UserID] {
			t.Errorf("key %q or user %q missing or reused", key, b.UserID)
		}
		s.keys[key], s.users[b.UserID] = true, true
		w.Header().Set("X-Seckill-Instance", name)
		stage := s.stages[name]
		if m := r.Header.Get("X-Seckill-Stage"); m != "" {
			if r.Header.Get("Authorization") != "Bearer secret-token" {
				t.Errorf("X-Seckill-Stage sent without the admin token")
			}
			stage = m
		}
		w.Header().Set("X-Seckill-Stage", stage)
		if s.stock == 0 {
			w.WriteHeader(http.StatusConflict)
			fmt.Fprint(w, `{"type":"/problems/sold-out"}`)
			return
		}
		s.stock--
		if stage == "redis-stream" {
			w.WriteHeader(http.StatusAccepted) // accepted, written later
		} else {
			w.WriteHeader(http.StatusCreated)
		}
		fmt.Fprint(w, `{}`)
	})
	mux.HandleFunc("GET /api/v1/products/1/audit", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		sold := s.init - s.stock
		fmt.Fprintf(w, `{"initial_stock":%d,"stock":%d,"sold":%d,"orders":%d,"oversold":0,"conserved":true}`, s.init, s.stock, sold, sold)
	})
	mux.HandleFunc("GET /api/v1/info", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		fmt.Fprintf(w, `{"instance":%q,"stage":%q,"stages":["unlocked","db-atomic"]}`, name, s.stages[name])
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, `{}`) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, `{}`) })
	mux.HandleFunc("PUT /api/v1/admin/stage", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer secret-token" {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"title":"Admin token required"}`)
			return
		}
		var b struct {
			Stage string `json:"stage"`
		}
		_ = json.NewDecoder(r.Body).Decode(&b)
		s.mu.Lock()
		s.stages[name] = b.Stage
		s.mu.Unlock()
		fmt.Fprintf(w, `{"instance":%q,"stage":%q}`, name, b.Stage)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func fleetOf(t *testing.T, s *shop, token string) *burst.Fleet {
	var peers []string
	for i := range 3 {
		peers = append(peers, s.instance(t, fmt.Sprintf("i%d", i+1)).URL)
	}
	return burst.New(burst.Options{Peers: peers, AdminToken: token, Max: 100})
}

func TestBurstCountsOutcomesAndAudits(t *testing.T) {
	s := newShop(10)
	f := fleetOf(t, s, "secret-token")
	res, err := f.Burst(context.Background(), api.BurstRequest{Kind: "product", ItemID: 1, N: 30, Stage: "db-atomic"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Counts.Created != 10 || res.Counts.SoldOut != 20 {
		t.Errorf("counts = %+v, want 10 created and 20 sold out", res.Counts)
	}
	if len(res.ByInstance) != 3 || res.ByInstance["i1"] != 10 {
		t.Errorf("by instance = %v, want 10 on each of 3", res.ByInstance)
	}
	if res.Stages["db-atomic"] != 30 {
		t.Errorf("stages = %v, want every request under db-atomic", res.Stages)
	}
	if len(res.Latency.Samples) != 30 || res.Latency.P50 > res.Latency.P99 || res.Latency.P99 > res.Latency.Max {
		t.Errorf("latency = %+v", res.Latency)
	}
	if res.Audit == nil || res.Audit.Stock != 0 || res.Audit.Sold != 10 {
		t.Errorf("audit = %+v (%s)", res.Audit, res.AuditError)
	}
}

// TestBurstCountsAcceptedApart: redis-stream's 202s are sales accepted,
// counted apart from the 201s of the stages that write before answering.
func TestBurstCountsAcceptedApart(t *testing.T) {
	f := fleetOf(t, newShop(10), "secret-token")
	res, err := f.Burst(context.Background(), api.BurstRequest{Kind: "product", ItemID: 1, N: 30, Stage: "redis-stream"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Counts.Accepted != 10 || res.Counts.Created != 0 || res.Counts.SoldOut != 20 || res.Counts.Other4xx != 0 {
		t.Errorf("counts = %+v, want 10 accepted, 0 created, 20 sold out", res.Counts)
	}
}

func TestBurstRejectsBadRequests(t *testing.T) {
	f := burst.New(burst.Options{Peers: []string{"http://127.0.0.1:1"}, Max: 5})
	for _, r := range []api.BurstRequest{
		{Kind: "product", ItemID: 1, N: 6},
		{Kind: "product", ItemID: 1, N: 0},
		{Kind: "product", ItemID: 0, N: 1},
		{Kind: "ticket", ItemID: 1, N: 1},
	} {
		if _, err := f.Burst(context.Background(), r); !errors.Is(err, burst.ErrInvalid) {
			t.Errorf("Burst(%+v) = %v, want ErrInvalid", r, err)
		}
	}
}

func TestBurstCountsUnreachablePeersAsFailed(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close() // nothing listens there any more
	f := burst.New(burst.Options{Peers: []string{srv.URL}, Max: 5, AuditBudget: 200 * time.Millisecond})
	res, err := f.Burst(context.Background(), api.BurstRequest{ItemID: 1, N: 3})
	if err != nil {
		t.Fatal(err)
	}
	if res.Counts.Failed != 3 || res.AuditError == "" {
		t.Errorf("counts = %+v, audit error %q; want 3 failed and an audit error", res.Counts, res.AuditError)
	}
}

func TestSetStageAndStatus(t *testing.T) {
	s := newShop(1)
	f := fleetOf(t, s, "secret-token")
	out, ok := f.SetStage(context.Background(), "db-atomic")
	if !ok {
		t.Fatalf("SetStage = %+v, want every peer to accept", out)
	}
	for _, st := range f.Status(context.Background()) {
		if !st.Healthy || !st.Ready || st.Stage != "db-atomic" || st.Instance == "" {
			t.Errorf("status = %+v, want healthy, ready, db-atomic", st)
		}
	}

	bad := fleetOf(t, newShop(1), "wrong-token")
	out, ok = bad.SetStage(context.Background(), "db-atomic")
	if ok || !strings.Contains(out[0].Error, "401") {
		t.Errorf("SetStage with a wrong token = %+v, %v; want a 401 per peer", out, ok)
	}
}

// TestBurstAuditedWhenTheCallerLeaves: a burst whose caller has gone (its
// context ended) still reads the audit, so what the buys that went out did
// can be recorded.
func TestBurstAuditedWhenTheCallerLeaves(t *testing.T) {
	f := fleetOf(t, newShop(10), "secret-token")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := f.Burst(ctx, api.BurstRequest{Kind: "product", ItemID: 1, N: 5})
	if err != nil {
		t.Fatal(err)
	}
	if res.Counts.Failed != 5 {
		t.Errorf("counts %+v: want the 5 buys unsent (failed)", res.Counts)
	}
	if res.Audit == nil || res.Audit.InitialStock != 10 {
		t.Errorf("audit %+v (%s): want it read all the same", res.Audit, res.AuditError)
	}
}

// TestBurstBuyerTimeCountsTheWaitForASlot fires 4 buyers, one in flight at
// a time, at a peer that holds every answer 100 ms: all 4 arrive at the
// burst's start, so the last is answered no sooner than 400 ms after it,
// however quick its own request. Buyer time must say so; response time,
// from each send, is the 100 ms the peer held it and more.
func TestBurstBuyerTimeCountsTheWaitForASlot(t *testing.T) {
	const hold = 100 * time.Millisecond
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/products/1/buy", func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(hold) // the injected delay under test
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{}`)
	})
	mux.HandleFunc("GET /api/v1/products/1/audit", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"initial_stock":4,"stock":0,"sold":4,"orders":4,"oversold":0,"conserved":true}`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	f := burst.New(burst.Options{Peers: []string{srv.URL}, Max: 5, Concurrency: 1})
	res, err := f.Burst(context.Background(), api.BurstRequest{Kind: "product", ItemID: 1, N: 4})
	if err != nil || res.Counts.Created != 4 {
		t.Fatalf("burst: %v, %+v", err, res.Counts)
	}
	b, l := res.BuyerLatency, res.Latency
	if len(b.Samples) != 4 || b.Max < 4*float64(hold/time.Millisecond) {
		t.Errorf("buyer time %+v: want 4 samples, the last at least 400 ms", b)
	}
	if l.Max < float64(hold/time.Millisecond) || b.P50 < l.P50 || b.Max < l.Max {
		t.Errorf("buyer time %+v, response time %+v: a buyer's clock starts no later than its request's", b, l)
	}
}

// TestBurstAuditAsksAgainAfterAFailedAnswer: every peer fails its first
// audit answers (503, as a busy instance does just after a burst); the
// burst asks again until one answers, and carries the verdict, not an
// audit error.
func TestBurstAuditAsksAgainAfterAFailedAnswer(t *testing.T) {
	var mu sync.Mutex
	asked := 0
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/products/1/buy", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{}`)
	})
	mux.HandleFunc("GET /api/v1/products/1/audit", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		asked++
		n := asked
		mu.Unlock()
		if n <= 4 { // both peers, twice
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, `{"initial_stock":2,"stock":0,"sold":2,"orders":2,"oversold":0,"conserved":true}`)
	})
	a, b := httptest.NewServer(mux), httptest.NewServer(mux)
	defer a.Close()
	defer b.Close()
	f := burst.New(burst.Options{Peers: []string{a.URL, b.URL}, Max: 5})
	res, err := f.Burst(context.Background(), api.BurstRequest{Kind: "product", ItemID: 1, N: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.Audit == nil || res.Audit.Sold != 2 {
		t.Fatalf("audit %+v (error %q): want the fifth answer's, sold 2", res.Audit, res.AuditError)
	}
	if asked != 5 {
		t.Errorf("audit asked %d times, want 5 (4 failures, then the answer)", asked)
	}
}

// TestBurstAuditGivesUpAtItsBudget: peers that never answer the audit
// cost the burst an audit error naming why, once AuditBudget is spent, and
// the counts are still returned.
func TestBurstAuditGivesUpAtItsBudget(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/products/1/buy", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{}`)
	})
	mux.HandleFunc("GET /api/v1/products/1/audit", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	f := burst.New(burst.Options{Peers: []string{srv.URL}, Max: 5, AuditBudget: 300 * time.Millisecond})
	res, err := f.Burst(context.Background(), api.BurstRequest{Kind: "product", ItemID: 1, N: 3})
	if err != nil {
		t.Fatal(err)
	}
	if res.Audit != nil || !strings.Contains(res.AuditError, "503") || !strings.Contains(res.AuditError, "within 300ms") {
		t.Errorf("audit %+v, error %q: want no audit and an error naming the 503 and the budget", res.Audit, res.AuditError)
	}
	if res.Counts.Created != 3 {
		t.Errorf("counts %+v: want the 3 buys counted", res.Counts)
	}
}
