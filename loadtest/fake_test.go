package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/loadtest/results"
	"github.com/seckill-lab/seckill/loadtest/verdict"
)

// fakeShop is a stand-in for seckill instances that shares one stock and
// answers buyers by a policy, so a test can break one rule at a time and
// check that the lab names it. It speaks the routes the lab uses: info,
// reset, audit, buy and grab.
type fakeShop struct {
	policy func(s *fakeShop, user string) fakeAnswer

	mu      sync.Mutex
	initial int
	stock   int
	sold    int
	orders  map[string]bool      // user -> has an order
	created map[string]time.Time // user -> its order's created_at
	opensAt time.Time            // the sale's opening, from the last reset (zero: open)
	seen    int                  // buy requests so far
	resets  int                  // stock resets so far: the lab resets before each attack
	buys    int                  // buy requests ever, which /metrics turns into CPU seconds
	// process is /api/v1/info's process (host/pid); scrapeCost the CPU
	// each /metrics costs after it read the counter, as a real page's
	// encoding does, and scrapes the /metrics answered.
	process    string
	pidNS      string // /api/v1/info's pid_namespace
	scrapeCost float64
	scrapes    int
	stages     []string
	hangs      chan struct{} // closed at cleanup: releases hanging requests
	hanging    sync.WaitGroup
	// limit is the rate limit GET and PUT /api/v1/admin/rate-limit read
	// and set; per address it counts each X-Forwarded-For's buys and
	// answers 429 past the burst (the interval never refills: the fake's
	// rows are shorter), unless limitLeaks. limitPuts counts the PUTs.
	limit      api.RateLimit
	lockFair   bool // /api/v1/info's lock_fair
	limitLeaks bool
	limitPuts  int
	perAddr    map[string]int
	// draws are the opening draws PUT set, in order, and openings the
	// resets' opens_at (the fake holds nobody: it records).
	draws    []float64
	openings []time.Time
	// routes, when set, adds routes of a test's own (a waiting room,
	// room_test.go) to the shop's.
	routes func(mux *http.ServeMux)
}

// fakeAnswer is what the policy decided for one request.
type fakeAnswer struct {
	status     int
	problem    string // problem+json type, or "" for a 201
	retryAfter bool
	hang       bool // block until the client gives up
	// wait, when set, holds the buyer until it is closed, and then sells
	// to it as a safe stage does: a buyer barged past.
	wait <-chan struct{}
}

// sell takes one unit for user if there is one, as a safe stage does.
func (s *fakeShop) sell(user string) fakeAnswer {
	if s.orders[user] {
		return fakeAnswer{status: 201}
	}
	if s.stock == 0 {
		return fakeAnswer{status: 409, problem: "/problems/sold-out"}
	}
	s.stock--
	s.sold++
	s.orders[user] = true
	s.created[user] = time.Now().UTC()
	return fakeAnswer{status: 201}
}

// sellInWindow sells as a safe stage does once the sale has opened, and
// answers 409 sale-not-open with Retry-After before.
func (s *fakeShop) sellInWindow(user string) fakeAnswer {
	if time.Now().Before(s.opensAt) {
		return fakeAnswer{status: 409, problem: "/problems/sale-not-open", retryAfter: true}
	}
	return s.sell(user)
}

// oversell takes a unit for every buyer, stock or not, as a racing stage
// does at its worst.
func (s *fakeShop) oversell(user string) fakeAnswer {
	if !s.orders[user] {
		s.orders[user] = true
		s.created[user] = time.Now().UTC()
		s.sold++
		s.stock = max(0, s.stock-1)
	}
	return fakeAnswer{status: 201}
}

// sellThen is a policy that sells as a safe stage does while the stock
// lasts, and answers every other buyer with refusal.
func sellThen(refusal fakeAnswer) func(s *fakeShop, user string) fakeAnswer {
	return func(s *fakeShop, user string) fakeAnswer {
		if a := s.sell(user); a.status == 201 {
			return a
		}
		return refusal
	}
}

// fakeCPUPerBuy is the CPU a fake shop's /metrics says each buy request
// cost: process_cpu_seconds_total grows by it per buy.
const fakeCPUPerBuy = 0.0005

// cpuLocked is the CPU the fake shop has used: its buys' and its pages'.
func (s *fakeShop) cpuLocked() float64 {
	return 0.25 + fakeCPUPerBuy*float64(s.buys) + s.scrapeCost*float64(s.scrapes)
}

// clock is the fake shop's process's CPU-time clock.
func (s *fakeShop) clock() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cpuLocked()
}

func startFakeShop(t *testing.T, policy func(s *fakeShop, user string) fakeAnswer) string {
	t.Helper()
	return startFakeShopMetrics(t, policy, true)
}

// startFakeShopMetrics is startFakeShop, with a /metrics route or without.
func startFakeShopMetrics(t *testing.T, policy func(s *fakeShop, user string) fakeAnswer, metrics bool) string {
	t.Helper()
	url, _ := startFakeShopAs(t, policy, metrics, nil)
	return url
}

// startFakeShopAs is startFakeShopMetrics with the shop changed by
// configure before it serves, and returned.
func startFakeShopAs(t *testing.T, policy func(s *fakeShop, user string) fakeAnswer, metrics bool, configure func(*fakeShop)) (string, *fakeShop) {
	t.Helper()
	s := &fakeShop{policy: policy, orders: map[string]bool{}, created: map[string]time.Time{}, hangs: make(chan struct{}),
		stages: append([]string(nil), allStages...), perAddr: map[string]int{},
		limit: api.RateLimit{Instance: "fake-1", Burst: 5, By: []string{"account"}, TrustedProxies: []string{"127.0.0.1/32", "::1/128"}}}
	if configure != nil {
		configure(s)
	}
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if err := json.NewEncoder(w).Encode(v); err != nil {
			t.Errorf("fake shop: writing an answer: %v", err)
		}
	}
	mux.HandleFunc("GET /api/v1/info", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, 200, api.Info{Instance: "fake-1", Stage: "db-atomic", Stages: s.stages, Admin: true, LockFair: s.lockFair, Process: s.process, PIDNamespace: s.pidNS})
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, 200, api.Health{Status: "ok", Instance: "fake-1"})
	})
	// item answers an item as the API does: its sale window on the shop's
	// clock, which is the reference clock here.
	item := func() api.Product {
		var opens *time.Time
		if !s.opensAt.IsZero() {
			o := s.opensAt
			opens = &o
		}
		return api.Product{ID: 1, InitialStock: s.initial, Stock: s.stock, OpensAt: opens, ServerTime: time.Now().UTC()}
	}
	mux.HandleFunc("GET /api/v1/products/1", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		it := item()
		s.mu.Unlock()
		reply(w, 200, it)
	})
	reset := func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Stock   int        `json:"stock"`
			OpensAt *time.Time `json:"opens_at"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			reply(w, 400, map[string]string{"type": "/problems/bad-request"})
			return
		}
		s.mu.Lock()
		s.initial, s.stock, s.sold, s.seen, s.orders, s.created = body.Stock, body.Stock, 0, 0, map[string]bool{}, map[string]time.Time{}
		s.opensAt = time.Time{}
		if body.OpensAt != nil {
			s.opensAt = body.OpensAt.UTC()
			s.openings = append(s.openings, s.opensAt)
		}
		s.resets++
		it := item()
		s.mu.Unlock()
		reply(w, 200, it)
	}
	if metrics {
		mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
			s.mu.Lock()
			cpu := s.cpuLocked()
			s.scrapes++ // the page's cost, after the counter
			s.mu.Unlock()
			fmt.Fprintf(w, "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %g\n", cpu)
		})
	}
	mux.HandleFunc("POST /api/v1/admin/products/1/reset", reset)
	mux.HandleFunc("POST /api/v1/admin/coupons/1/reset", reset)
	audit := func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		a := map[string]any{"initial_stock": s.initial, "stock": s.stock, "sold": s.sold, "orders": s.sold,
			"oversold": max(0, s.sold-s.initial), "conserved": s.initial-s.stock == s.sold}
		s.mu.Unlock()
		reply(w, 200, a)
	}
	mux.HandleFunc("GET /api/v1/products/1/audit", audit)
	mux.HandleFunc("GET /api/v1/coupons/1/audit", audit)
	buy := func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			UserID string `json:"user_id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.UserID == "" {
			reply(w, 400, map[string]string{"type": "/problems/bad-request"})
			return
		}
		s.mu.Lock()
		s.seen++
		s.buys++
		if addr := r.Header.Get("X-Forwarded-For"); s.limit.On && slices.Contains(s.limit.By, "address") && addr != "" {
			s.perAddr[addr]++
			if s.perAddr[addr] > s.limit.Burst && !s.limitLeaks {
				s.mu.Unlock()
				w.Header().Set("Retry-After", "10")
				reply(w, 429, map[string]any{"type": "/problems/rate-limited", "status": 429})
				return
			}
		}
		a := s.policy(s, body.UserID)
		s.mu.Unlock()
		if a.wait != nil {
			select {
			case <-a.wait:
			case <-r.Context().Done(): // the client gave up
				return
			}
			s.mu.Lock()
			a = s.sell(body.UserID)
			s.mu.Unlock()
		}
		w.Header().Set("X-Seckill-Instance", "fake-1")
		if a.hang {
			s.hanging.Add(1)
			defer s.hanging.Done()
			select {
			case <-r.Context().Done(): // the client gave up
			case <-s.hangs:
			}
			return
		}
		if a.retryAfter {
			w.Header().Set("Retry-After", "1")
		}
		if a.status == 201 {
			s.mu.Lock()
			created := s.created[body.UserID]
			s.mu.Unlock()
			reply(w, 201, map[string]any{"user_id": body.UserID, "quantity": 1, "created_at": created})
			return
		}
		reply(w, a.status, map[string]any{"type": a.problem, "status": a.status})
	}
	mux.HandleFunc("GET /api/v1/admin/rate-limit", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		l := s.limit
		s.mu.Unlock()
		reply(w, 200, l)
	})
	mux.HandleFunc("PUT /api/v1/admin/rate-limit", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			IntervalMS float64  `json:"interval_ms"`
			Burst      int      `json:"burst"`
			By         []string `json:"by"`
			DrawMS     float64  `json:"opening_draw_ms"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			reply(w, 400, map[string]string{"type": "/problems/invalid-request"})
			return
		}
		s.mu.Lock()
		s.limit.On, s.limit.IntervalMS, s.limit.Burst, s.limit.By = body.IntervalMS > 0, body.IntervalMS, body.Burst, body.By
		s.limit.OpeningDrawMS = body.DrawMS
		s.draws = append(s.draws, body.DrawMS)
		s.limitPuts++
		l := s.limit
		s.mu.Unlock()
		reply(w, 200, l)
	})
	mux.HandleFunc("POST /api/v1/products/1/buy", buy)
	mux.HandleFunc("POST /api/v1/coupons/1/grab", buy)
	if s.routes != nil {
		s.routes(mux)
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		close(s.hangs)
		s.hanging.Wait()
		srv.Close()
	})
	return srv.URL, s
}

// fakeArgs are small numbers: 200 buyers on stock 40 through 16 workers.
var fakeArgs = []string{"--scenarios", "buy", "--stock", "40", "--buyers", "200", "--workers", "16", "--max-duration", "30s"}

// runAgainst runs the lab against url with fakeArgs and args, and returns
// the one row it wrote.
func runAgainst(t *testing.T, url string, args ...string) (results.Row, error) {
	t.Helper()
	env := map[string]string{"SECKILL_ADMIN_TOKEN": "fake-token", "NO_COLOR": "1"}
	rep, err := runShortEnv(t, env, []string{url}, append(append([]string{}, fakeArgs...), args...)...)
	if len(rep.Rows) != 1 {
		t.Fatalf("got %d rows, want 1: %+v", len(rep.Rows), rep.Rows)
	}
	return rep.Rows[0], err
}

// TestVerdictAgainstBrokenTargets breaks one rule at a time in a fake
// target and checks that the verdict fails and names that rule, and that a
// sound target and an overselling-by-design stage pass.
func TestVerdictAgainstBrokenTargets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		stage  string
		policy func(s *fakeShop, user string) fakeAnswer
		// rule is the broken rule the note must name, "" for a pass.
		rule string
		// counts are strings the note must carry besides the rule.
		counts []string
		args   []string
	}{
		{
			name:   "sound",
			stage:  "db-atomic",
			policy: (*fakeShop).sell,
		},
		{
			// db-atomic at 400 in flight: the stock sells, the rest get 500.
			name:   "500 after the sell-out",
			stage:  "db-atomic",
			policy: sellThen(fakeAnswer{status: 500, problem: "/problems/internal"}),
			rule:   "server-errors",
			counts: []string{"160 of 200", "500 ×160"},
		},
		{
			name:   "503 without Retry-After",
			stage:  "redis-atomic",
			policy: sellThen(fakeAnswer{status: 503, problem: "/problems/unavailable"}),
			rule:   "server-errors",
			counts: []string{"503 ×160"},
		},
		{
			// A redlock that sells nothing: everyone is told to come back.
			name:  "sells nothing",
			stage: "redlock",
			policy: func(*fakeShop, string) fakeAnswer {
				return fakeAnswer{status: 503, problem: "/problems/overloaded", retryAfter: true}
			},
			rule:   "sold-nothing",
			counts: []string{"40 units", "503 ×200"},
		},
		{
			// A lock stage that times buyers out with stock on the shelf.
			name:  "turns buyers away with stock left",
			stage: "redis-lock",
			policy: func(s *fakeShop, user string) fakeAnswer {
				if s.seen%2 == 0 {
					return fakeAnswer{status: 429, problem: "/problems/lock-timeout", retryAfter: true}
				}
				if s.sold >= 30 {
					return fakeAnswer{status: 503, problem: "/problems/overloaded", retryAfter: true}
				}
				return s.sell(user)
			},
			rule:   "liveness",
			counts: []string{"10 units unsold", "170 buyers", "429 ×100", "503 ×70"},
		},
		{
			name:  "requests past the client timeout",
			stage: "db-atomic",
			policy: func(s *fakeShop, user string) fakeAnswer {
				a := s.sell(user)
				if a.status != 201 && s.seen%20 == 0 {
					return fakeAnswer{hang: true}
				}
				return a
			},
			// A short client timeout keeps this case quick. A busy machine
			// may push an honest answer past it too, so the counts say
			// "at least" and are checked on the row below.
			rule: "transport-errors",
			args: []string{"--timeout", "2s"},
		},
		{
			// unlocked is expected to oversell; errors beside it do not
			// change that verdict.
			name:  "oversold by design, with errors",
			stage: "unlocked",
			policy: func(s *fakeShop, user string) fakeAnswer {
				if s.seen%10 == 0 {
					return fakeAnswer{status: 500, problem: "/problems/internal"}
				}
				return s.oversell(user)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := startFakeShop(t, tt.policy)
			r, err := runAgainst(t, url, append([]string{"--stages", tt.stage}, tt.args...)...)
			if tt.rule == "" {
				if err != nil || r.Verdict != results.Pass {
					t.Fatalf("want a pass, got %v: %s %q", err, r.Verdict, r.Note)
				}
				return
			}
			if r.Verdict != results.Fail || err == nil {
				t.Fatalf("want a failed verdict naming %s, got %v: %s %q", tt.rule, err, r.Verdict, r.Note)
			}
			if !strings.Contains(r.Note, tt.rule+":") {
				t.Errorf("the note does not name the rule %s: %q", tt.rule, r.Note)
			}
			for _, c := range tt.counts {
				if !strings.Contains(r.Note, c) {
					t.Errorf("the note lacks %q: %q", c, r.Note)
				}
			}
			if tt.rule == "transport-errors" && (r.Timeouts < 8 || !strings.Contains(r.Note, fmt.Sprintf("%d timeouts", r.Timeouts))) {
				t.Errorf("want at least 8 timeouts counted in the note, got %d: %q", r.Timeouts, r.Note)
			}
			if fmt.Sprint(r.Broken) == "[]" || !strings.Contains(strings.Join(r.Broken, ","), tt.rule) {
				t.Errorf("broken rules %v do not list %s", r.Broken, tt.rule)
			}
		})
	}
}

// TestVerdictWhenTheLabCannotReset points the lab at a target that refuses
// its admin token: every stage fails naming lab-error and the answer,
// rather than the lab stopping at the first or judging stock it never set.
func TestVerdictWhenTheLabCannotReset(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/info", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(api.Info{Instance: "fake-1", Stages: allStages, Admin: true}); err != nil {
			t.Error(err)
		}
	})
	mux.HandleFunc("POST /api/v1/admin/products/1/reset", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"type":"/problems/forbidden","status":403}`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	env := map[string]string{"SECKILL_ADMIN_TOKEN": "stale-token", "NO_COLOR": "1"}
	rep, err := runShortEnv(t, env, []string{srv.URL}, append(append([]string{}, fakeArgs...), "--stages", "redis-lock,db-atomic")...)
	if !errors.Is(err, errVerdict) || len(rep.Rows) != 2 {
		t.Fatalf("got %v with %d rows, want errVerdict with 2 rows", err, len(rep.Rows))
	}
	for _, r := range rep.Rows {
		if r.Verdict != results.Fail || !slices.Equal(r.Broken, []string{verdict.RuleLabError}) || !strings.Contains(r.Note, "lab-error: reset products 1") || !strings.Contains(r.Note, "403") {
			t.Errorf("%s: %s %v %q, want a lab-error naming the 403", r.Stage, r.Verdict, r.Broken, r.Note)
		}
	}
}
