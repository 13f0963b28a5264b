package story

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/seckill-lab/seckill/internal/api"
)

// fakeFleet answers the story's calls: each burst "sells" what sold[stage]
// says, and the audit shows queued orders until it has been read queued
// times.
type fakeFleet struct {
	mu     sync.Mutex
	stages []string
	sold   map[string]int
	lost   map[string]bool // stages whose audit is not conserved without overselling
	queued int
	stage  string // of the last burst
	resets int
}

func (f *fakeFleet) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer good-token" && r.URL.Path != "/api/v1/fleet" {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(api.Problem{Type: "/problems/unauthorized", Title: "Admin token missing or wrong", Status: 401})
		return
	}
	audit := func() api.Audit {
		sold := f.sold[f.stage]
		a := api.Audit{ProductID: 1, InitialStock: 100, Sold: sold, Oversold: max(0, sold-100), Stock: max(0, 100-sold),
			Conserved: sold <= 100 && !f.lost[f.stage]}
		if f.queued > 0 {
			a.PendingOrders, a.Pending = f.queued, f.queued
			a.Sold -= f.queued
			f.queued--
		}
		return a
	}
	switch r.URL.Path {
	case "/api/v1/fleet":
		_ = json.NewEncoder(w).Encode(api.Fleet{BurstMax: 2000, Peers: []api.PeerStatus{{Stages: f.stages}, {Stages: f.stages[1:]}}})
	case "/api/v1/admin/products/1/reset":
		f.resets++
		_, _ = w.Write([]byte(`{}`))
	case "/api/v1/admin/burst":
		var req api.BurstRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.stage = req.Stage
		a := audit()
		_ = json.NewEncoder(w).Encode(api.BurstResult{Request: req, ElapsedMS: 500, Audit: &a, Counts: api.BurstCounts{Created: a.Sold}})
	case "/api/v1/products/1/audit":
		_ = json.NewEncoder(w).Encode(audit())
	default:
		http.NotFound(w, r)
	}
}

func TestRunTellsEachStageAndWaitsForQueuedOrders(t *testing.T) {
	f := &fakeFleet{stages: []string{"unlocked", "local-mutex", "db-atomic", "redis-stream"},
		sold: map[string]int{"unlocked": 130, "local-mutex": 100, "db-atomic": 100, "redis-stream": 100}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	f.queued = 0
	var progress strings.Builder
	rows, err := Run(context.Background(), Options{URL: srv.URL, Token: "good-token", ProductID: 1, Stock: 100, Buyers: 300, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	// The second instance lacks unlocked: a stage not every instance runs
	// is left out.
	var got []string
	for _, r := range rows {
		got = append(got, r.Stage)
	}
	if strings.Join(got, ",") != "local-mutex,db-atomic,redis-stream" {
		t.Fatalf("stages told: %v", got)
	}
	if f.resets != 3 {
		t.Errorf("%d resets, want one per stage", f.resets)
	}
	if !strings.Contains(rows[0].Verdict, "no oversell this time") || !rows[0].Unsafe {
		t.Errorf("an unsafe stage that happened not to oversell: %+v", rows[0])
	}
	if !rows[1].Exact() || rows[1].PerSec != 600 {
		t.Errorf("db-atomic row: %+v", rows[1])
	}
	if !strings.Contains(progress.String(), "[3/3] redis-stream") {
		t.Errorf("progress lacks the last burst's line:\n%s", progress.String())
	}

	// Queued orders are waited for: the audit is read until none is
	// pending, and the row counts them as sold.
	f.mu.Lock()
	f.queued = 3
	f.mu.Unlock()
	rows, err = Run(context.Background(), Options{URL: srv.URL, Token: "good-token", ProductID: 1, Stock: 100, Buyers: 300, Stages: []string{"redis-stream"}})
	if err != nil {
		t.Fatal(err)
	}
	if rows[0].Sold != 100 || rows[0].Audit.PendingOrders != 0 {
		t.Errorf("redis-stream row read before its queue drained: %+v", rows[0].Audit)
	}
}

func TestRunFailsWhenASafeStageOversells(t *testing.T) {
	// The fake's second instance lacks its first stage: "-" is offered by
	// one instance only, so it is not the fleet's.
	f := &fakeFleet{stages: []string{"-", "unlocked", "redis-lock", "db-atomic", "redis-atomic"},
		sold: map[string]int{"unlocked": 150, "redis-lock": 101, "db-atomic": 100, "redis-atomic": 100},
		lost: map[string]bool{"redis-atomic": true}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	rows, err := Run(context.Background(), Options{URL: srv.URL, Token: "good-token", ProductID: 1, Stock: 100, Buyers: 300})
	if !errors.Is(err, ErrSafeStageOversold) || !strings.Contains(err.Error(), "redis-lock, redis-atomic") || strings.Contains(err.Error(), "unlocked") {
		t.Fatalf("a safe stage oversold by one, another lost a unit: %v", err)
	}
	if len(rows) != 4 || !strings.HasPrefix(rows[1].Verdict, "OVERSOLD: 1 ") || !strings.HasPrefix(rows[3].Verdict, "LOST UPDATES") || !rows[2].Exact() {
		t.Errorf("rows: %+v", rows)
	}

	// Stages given by hand: each must be the fleet's; repeats run once,
	// in the order given; nothing is reset before the check.
	resets := f.resets
	if _, err := Run(context.Background(), Options{URL: srv.URL, Token: "good-token", ProductID: 1, Stock: 100, Buyers: 300, Stages: []string{"db-atomic", "bogus"}}); err == nil || !strings.Contains(err.Error(), `"bogus"`) || f.resets != resets {
		t.Errorf("an unknown stage: %v, after %d resets; want an error naming it before any reset", err, f.resets-resets)
	}
	rows, err = Run(context.Background(), Options{URL: srv.URL, Token: "good-token", ProductID: 1, Stock: 100, Buyers: 300, Stages: []string{"db-atomic", "unlocked", "db-atomic"}})
	if err != nil || len(rows) != 2 || rows[0].Stage != "db-atomic" || rows[1].Stage != "unlocked" {
		t.Errorf("stages db-atomic, unlocked, db-atomic: %v %+v", err, rows)
	}
}

func TestRunSaysWhatAWrongTokenIs(t *testing.T) {
	f := &fakeFleet{stages: []string{"db-atomic"}, sold: map[string]int{}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	_, err := Run(context.Background(), Options{URL: srv.URL, Token: "wrong", ProductID: 1, Stock: 100, Buyers: 10})
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "Admin token") {
		t.Fatalf("wrong token: %v", err)
	}
	_, err = Run(context.Background(), Options{URL: srv.URL, Token: "good-token", ProductID: 1, Stock: 100, Buyers: 5000})
	if err == nil || !strings.Contains(err.Error(), "SECKILL_BURST_MAX") {
		t.Fatalf("more buyers than the burst limit: %v", err)
	}
}

// TestVerdictTellsServerErrorsFromBuyersWithoutAnAnswer: a 5xx is the
// service's bug, a buyer left without an answer may be the client's own
// timeout; the verdict names them apart.
func TestVerdictTellsServerErrorsFromBuyersWithoutAnAnswer(t *testing.T) {
	r := Row{Stage: "redlock", Stock: 50, Sold: 19, Conserved: true, Counts: api.BurstCounts{LockTimeout: 5, ServerErrors: 2, Failed: 3}}
	want := "safe, but 31 of 50 units left unsold (5 lock timeouts, 2 server errors, 3 without an answer)"
	if got := verdict(r); got != want {
		t.Fatalf("verdict %q, want %q", got, want)
	}
	r.Counts.ServerErrors = 0
	if got := verdict(r); strings.Contains(got, "server errors") {
		t.Fatalf("verdict %q names server errors there were none of", got)
	}
}
