package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

func TestJudge(t *testing.T) {
	safe := row{Requests: 200, Buyers: 200, Created: 40, BuyersWithOrder: 40, Sold: 40, InitialStock: 40, FinalStock: 0, Conserved: true}
	tests := []struct {
		name    string
		edit    func(*row)
		verdict string
		note    string
	}{
		{"safe and sound", func(*row) {}, verdictPass, "safe: 40 sold of 40"},
		{"safe stage oversold", func(r *row) { r.Sold, r.Oversold, r.BuyersWithOrder, r.Conserved = 45, 5, 45, false }, verdictFail, "oversold by 5"},
		{"safe stage lost stock", func(r *row) { r.FinalStock, r.Conserved = 3, false }, verdictFail, "stock not conserved"},
		{"201 without an order", func(r *row) { r.BuyersWithOrder = 41 }, verdictFail, "41 buyers were answered 201"},
		{"timeouts excuse the 201 count", func(r *row) { r.BuyersWithOrder, r.Timeouts = 39, 1 }, verdictPass, "1 timeouts"},
		{"expected oversell seen", func(r *row) { r.ExpectOversell, r.Sold, r.Oversold, r.Conserved = true, 90, 50, false }, verdictPass, "oversold by 50 as expected"},
		{"expected oversell missing", func(r *row) { r.ExpectOversell = true }, verdictFail, "widens the race"},
		{"too few buyers to oversell", func(r *row) { r.ExpectOversell, r.Buyers = true, 40 }, verdictFail, "only 40 buyers were sent"},
		{"nothing sent", func(r *row) { r.Requests = 0 }, verdictFail, "no request was sent"},
		{"MySQL disagrees", func(r *row) { r.MySQL = &dbCount{Orders: 41, Sold: 41, InitialStock: 40} }, verdictFail, "MySQL disagrees"},
		{"MySQL agrees", func(r *row) { r.MySQL = &dbCount{Orders: 40, Sold: 40, InitialStock: 40} }, verdictPass, "MySQL agrees"},
		{"capped burst", func(r *row) { r.Planned = 600 }, verdictPass, "cap after 200 of 600"},
		{"sold nothing", func(r *row) { r.Created, r.BuyersWithOrder, r.Sold, r.FinalStock = 0, 0, 0, 40 }, verdictFail, "sold nothing although 40 units"},
		{"nothing to sell", func(r *row) { r.Created, r.BuyersWithOrder, r.Sold, r.InitialStock = 0, 0, 0, 0 }, verdictPass, "safe: 0 sold of 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := safe
			tt.edit(&r)
			judge(&r)
			if r.Verdict != tt.verdict || !strings.Contains(r.Note, tt.note) {
				t.Errorf("got %s %q, want %s containing %q", r.Verdict, r.Note, tt.verdict, tt.note)
			}
		})
	}
}

func TestExpectsOversell(t *testing.T) {
	tests := []struct {
		stage     string
		instances int
		workers   int
		crowd     int
		explicit  map[string]bool
		want      bool
	}{
		{"unlocked", 1, 16, 200, nil, true},
		{"unlocked", 3, 1, 200, nil, false}, // one buyer at a time cannot race
		{"unlocked", 3, 16, 40, nil, false}, // a crowd no larger than the stock cannot oversell
		{"local-mutex", 3, 16, 200, nil, true},
		{"local-mutex", 1, 16, 200, nil, false},
		{"redis-lock", 3, 16, 200, nil, false},
		{"db-atomic", 3, 16, 200, nil, false},
		{"db-atomic", 3, 16, 200, map[string]bool{"db-atomic": true}, true},
		{"unlocked", 3, 16, 200, map[string]bool{"db-atomic": true}, false},
	}
	for _, tt := range tests {
		if got := expectsOversell(tt.explicit, tt.stage, tt.instances, tt.workers, tt.crowd, 40); got != tt.want {
			t.Errorf("expectsOversell(%v, %s, %d instances, %d workers, crowd %d) = %v, want %v",
				tt.explicit, tt.stage, tt.instances, tt.workers, tt.crowd, got, tt.want)
		}
	}
}

func TestParseOptions(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	withToken := env(map[string]string{"SECKILL_ADMIN_TOKEN": "sekrit-token"})

	o, err := parseOptions(nil, withToken, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.targets) != 3 || len(o.stages) != 6 || len(o.scenarios) != 3 || o.expectOversell != nil ||
		o.buyers != 2000 || o.stock != 100 || o.shape != "burst" || o.reportDir != "loadtest/reports" {
		t.Errorf("defaults: %+v", o)
	}

	o, err = parseOptions([]string{"--targets", "127.0.0.1:9001/", "--stages", "db-atomic,unlocked,db-atomic", "--expect-oversell", "none"},
		env(map[string]string{"SECKILL_ADMIN_TOKEN": "x", "SECKILL_MYSQL_DSN": "dsn", "SECKILL_LAB_REPORTS": "/r"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.targets[0] != "http://127.0.0.1:9001" || strings.Join(o.stages, ",") != "db-atomic,unlocked" ||
		len(o.expectOversell) != 0 || o.expectOversell == nil || o.mysqlDSN != "dsn" || o.reportDir != "/r" {
		t.Errorf("parsed: %+v", o)
	}

	bad := []struct {
		args []string
		env  func(string) string
		want string
	}{
		{nil, env(nil), "no admin token"},
		{[]string{"--stages", "spinlock"}, withToken, `unknown stage "spinlock"`},
		{[]string{"--scenarios", "bake"}, withToken, `unknown scenario "bake"`},
		{[]string{"--shape", "wave"}, withToken, "burst or constant"},
		{[]string{"--targets", "ftp://x"}, withToken, "not an http(s) base URL"},
		{[]string{"--expect-oversell", "nope"}, withToken, `unknown stage "nope"`},
		{[]string{"--workers", "0"}, withToken, "--workers"},
		{[]string{"extra"}, withToken, "unexpected argument"},
	}
	for _, b := range bad {
		_, err := parseOptions(b.args, b.env, io.Discard)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("parseOptions(%q) = %v, want a usage error containing %q", b.args, err, b.want)
		}
	}
}

func TestClassify(t *testing.T) {
	problem := func(code uint16, typ string) *vegeta.Result {
		return &vegeta.Result{Code: code, Body: []byte(`{"type":"` + typ + `"}`), Headers: http.Header{"X-Seckill-Instance": {"demo-2"}}}
	}
	tests := []struct {
		name string
		r    *vegeta.Result
		want answer
	}{
		{"order", &vegeta.Result{Code: 201, Body: []byte(`{"user_id":"u-7"}`), Headers: http.Header{"Idempotent-Replayed": {"true"}}},
			answer{outcome: outCreated, user: "u-7", replayed: true}},
		{"sold out", problem(409, "/problems/sold-out"), answer{outcome: outSoldOut, problem: "/problems/sold-out", instance: "demo-2"}},
		{"already purchased", problem(409, "/problems/already-purchased"), answer{outcome: outOther4xx, problem: "/problems/already-purchased", instance: "demo-2"}},
		{"lock timeout", problem(429, "/problems/lock-timeout"), answer{outcome: outOther4xx, problem: "/problems/lock-timeout", instance: "demo-2"}},
		{"lock lost", problem(503, "/problems/lock-lost"), answer{outcome: outServerError, problem: "/problems/lock-lost", instance: "demo-2"}},
		{"client timeout", &vegeta.Result{Error: "Post \"http://x\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"}, answer{outcome: outTimeout}},
		{"refused", &vegeta.Result{Error: "dial tcp 127.0.0.1:1: connect: connection refused"}, answer{outcome: outNetError}},
	}
	for _, tt := range tests {
		if got := classify(tt.r); got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// TestTargeter checks the routing rules: one buyer per request and plain
// round-robin without retries; in the retry storm, each buyer's copies share
// one key and body but go to different targets, and first copies rotate.
func TestTargeter(t *testing.T) {
	targets := []string{"http://a", "http://b", "http://c"}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			p := attackPlan{scenario: sc, stage: "db-atomic", targets: targets, token: "tok", itemID: 7, tag: "t"}
			tr := p.targeter()
			firsts := map[string]int{}
			for buyer := range 30 {
				var bodies [][]byte
				hosts := map[string]bool{}
				for copy := range sc.copies {
					var tgt vegeta.Target
					if err := tr(&tgt); err != nil {
						t.Fatal(err)
					}
					key := tgt.Header.Get("Idempotency-Key")
					var body struct {
						UserID string `json:"user_id"`
					}
					if err := json.Unmarshal(tgt.Body, &body); err != nil {
						t.Fatal(err)
					}
					if want := p.userID(uint64(buyer)); key != want || body.UserID != want {
						t.Fatalf("request %d of buyer %d: key %q user %q, want %q", copy, buyer, key, body.UserID, want)
					}
					if tgt.Header.Get("X-Seckill-Mode") != "db-atomic" || tgt.Header.Get("Authorization") != "Bearer tok" {
						t.Fatalf("headers %v", tgt.Header)
					}
					host := strings.SplitN(tgt.URL, "/api/", 2)[0]
					if copy == 0 {
						firsts[host]++
					}
					hosts[host] = true
					bodies = append(bodies, tgt.Body)
				}
				if len(hosts) != sc.copies {
					t.Errorf("buyer %d: %d copies went to %d targets", buyer, sc.copies, len(hosts))
				}
				for _, b := range bodies[1:] {
					if !bytes.Equal(b, bodies[0]) {
						t.Errorf("buyer %d: copies differ: %s vs %s", buyer, b, bodies[0])
					}
				}
			}
			for _, h := range targets {
				if firsts[h] != 10 {
					t.Errorf("first copies per target: %v, want 10 each", firsts)
					break
				}
			}
		})
	}
}

func TestBurstPacerStopsAfterTheCrowd(t *testing.T) {
	p := burstPacer{hits: 3}
	for sent := uint64(0); sent < 3; sent++ {
		if wait, stop := p.Pace(time.Second, sent); wait != 0 || stop {
			t.Fatalf("Pace(%d) = %v, %v; want 0, false", sent, wait, stop)
		}
	}
	if _, stop := p.Pace(time.Second, 3); !stop {
		t.Fatal("Pace did not stop after the last hit")
	}
}

func TestRenderTextAligns(t *testing.T) {
	var b bytes.Buffer
	renderText(&b, []string{"stage", "n", "ok"}, [][]string{{"unlocked", "1200", "NO"}, {"redis-atomic", "skipped: not available on target"}})
	got := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	want := []string{
		"stage            n  ok",
		"────────────  ────  ──",
		"unlocked      1200  NO",
		"redis-atomic  skipped: not available on target",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
