package scenario

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/seckill-lab/seckill/internal/api"
)

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
		{"already purchased", problem(409, "/problems/already-purchased"), answer{outcome: outConflict, problem: "/problems/already-purchased", instance: "demo-2"}},
		{"lock timeout", problem(429, "/problems/lock-timeout"), answer{outcome: outTooMany, problem: "/problems/lock-timeout", instance: "demo-2"}},
		{"bad request", problem(400, "/problems/bad-request"), answer{outcome: outOther4xx, problem: "/problems/bad-request", instance: "demo-2"}},
		{"lock lost", problem(503, "/problems/lock-lost"), answer{outcome: outServerError, problem: "/problems/lock-lost", instance: "demo-2"}},
		{"overloaded", withHeader(problem(503, "/problems/overloaded"), "Retry-After", "1"),
			answer{outcome: outOverloaded, problem: "/problems/overloaded", instance: "demo-2"}},
		{"internal", problem(500, "/problems/internal"), answer{outcome: outServerError, problem: "/problems/internal", instance: "demo-2"}},
		{"bad gateway without a body", &vegeta.Result{Code: 502}, answer{outcome: outServerError}},
		{"client timeout", &vegeta.Result{Error: "Post \"http://x\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"}, answer{outcome: outTimeout}},
		{"refused", &vegeta.Result{Error: "dial tcp 127.0.0.1:1: connect: connection refused"}, answer{outcome: outNetError}},
	}
	for _, tt := range tests {
		if got := classify(tt.r); got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func withHeader(r *vegeta.Result, k, v string) *vegeta.Result {
	r.Headers.Set(k, v)
	return r
}

// TestTargeter checks the routing rules: one buyer per request and plain
// round-robin without retries; in the retry storm, each buyer's copies share
// one key and body but go to different targets, and first copies rotate.
func TestTargeter(t *testing.T) {
	targets := []string{"http://a", "http://b", "http://c"}
	for _, sc := range All() {
		t.Run(sc.Name, func(t *testing.T) {
			p := Plan{Scenario: sc, Stage: "db-atomic", Targets: targets, Token: "tok", ItemID: 7, Tag: "t"}
			tr := p.targeter()
			firsts := map[string]int{}
			for buyer := range 30 {
				var bodies [][]byte
				hosts := map[string]bool{}
				for send := range sc.Copies {
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
						t.Fatalf("request %d of buyer %d: key %q user %q, want %q", send, buyer, key, body.UserID, want)
					}
					if tgt.Header.Get("X-Seckill-Stage") != "db-atomic" || tgt.Header.Get("Authorization") != "Bearer tok" {
						t.Fatalf("headers %v", tgt.Header)
					}
					host := strings.SplitN(tgt.URL, "/api/", 2)[0]
					if send == 0 {
						firsts[host]++
					}
					hosts[host] = true
					bodies = append(bodies, tgt.Body)
				}
				if len(hosts) != sc.Copies {
					t.Errorf("buyer %d: %d copies went to %d targets", buyer, sc.Copies, len(hosts))
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
	p := BurstPacer{Hits: 3}
	for sent := uint64(0); sent < 3; sent++ {
		if wait, stop := p.Pace(time.Second, sent); wait != 0 || stop {
			t.Fatalf("Pace(%d) = %v, %v; want 0, false", sent, wait, stop)
		}
	}
	if _, stop := p.Pace(time.Second, 3); !stop {
		t.Fatal("Pace did not stop after the last hit")
	}
}

// TestProgressLines checks both ways the progress is written: redrawn in
// place with \r on a terminal, and as whole lines without a single \r
// anywhere else, so a redirected log reads line by line.
func TestProgressLines(t *testing.T) {
	for _, tty := range []bool{false, true} {
		t.Run(fmt.Sprintf("terminal=%v", tty), func(t *testing.T) {
			var b bytes.Buffer
			n := 0 // the snapshot runs on the ticker's goroutine or in stop, never both
			p := newProgress(&b, tty, "buy db-atomic", func() string { n++; return fmt.Sprintf("%d requests", n) })
			p.stop()
			// Two more states after the goroutine has ended, as a long
			// attack would draw them.
			p.draw()
			p.draw()
			out := b.String()
			if tty {
				if strings.Count(out, "\r") != 3 || !strings.HasPrefix(out, "\r") || strings.Count(out, "\n") != 1 {
					t.Errorf("terminal output %q: want three redraws with \\r and one newline", out)
				}
				return
			}
			if strings.Contains(out, "\r") {
				t.Errorf("redirected output contains \\r: %q", out)
			}
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != 3 || !strings.HasSuffix(out, "\n") {
				t.Fatalf("redirected output %q: want 3 whole lines", out)
			}
			for i, l := range lines {
				if !strings.HasPrefix(l, "buy db-atomic ") || !strings.Contains(l, fmt.Sprintf("%d requests", n-2+i)) {
					t.Errorf("line %d = %q, want the prefix and state %d", i, l, n-2+i)
				}
			}
		})
	}
}

// TestPostSaleOverloadedCountsOnlyRequestsSentAfterTheLastSale: a 503 to a
// request sent before the last 201 or 202 was answered may have met a full
// queue while units remained; one sent after it was told "come back" about
// a sold-out item. Results arrive in any order.
func TestPostSaleOverloadedCountsOnlyRequestsSentAfterTheLastSale(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	res := func(sentMS, latencyMS int) *vegeta.Result {
		return &vegeta.Result{Timestamp: at(sentMS), Latency: time.Duration(latencyMS) * time.Millisecond}
	}
	tl := newTally(0)
	tl.add(res(30, 5), answer{outcome: outOverloaded}) // sent after the last sale (answered at 25)
	tl.add(res(0, 10), answer{outcome: outCreated})
	tl.add(res(5, 3), answer{outcome: outOverloaded})   // during the sale
	tl.add(res(20, 5), answer{outcome: outCreated})     // the last sale, answered at 25
	tl.add(res(24, 10), answer{outcome: outOverloaded}) // sent before it, answered after: not counted
	tl.add(res(40, 1), answer{outcome: outOverloaded})
	tl.add(res(41, 1), answer{outcome: outSoldOut})
	if got := tl.postSaleOverloaded(); got != 2 {
		t.Fatalf("503s sent after the last sale: %d, want 2", got)
	}
	none := newTally(0)
	none.add(res(0, 1), answer{outcome: outOverloaded})
	if got := none.postSaleOverloaded(); got != 0 {
		t.Fatalf("no sale at all: %d, want 0", got)
	}
}

// TestRefusedWithStockCountsSoldOutsBeforeTheLastOrder: a sold-out answer
// received before the created_at of some order means a unit remained for a
// later buyer; one received after the last order was created does not.
// The order times come from the 201 bodies, results in any order.
func TestRefusedWithStockCountsSoldOutsBeforeTheLastOrder(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sale := func(createdMS int) *vegeta.Result {
		body := fmt.Sprintf(`{"user_id":"u","order_no":"O1","created_at":%q}`, at(createdMS).UTC().Format(time.RFC3339Nano))
		return &vegeta.Result{Code: 201, Body: []byte(body), Timestamp: at(createdMS - 1), Latency: 3 * time.Millisecond}
	}
	soldOut := func(answeredMS int) *vegeta.Result {
		return &vegeta.Result{Code: 409, Body: []byte(`{"type":"/problems/sold-out"}`), Timestamp: at(answeredMS - 1), Latency: time.Millisecond}
	}
	tl := newTally(0)
	for _, r := range []*vegeta.Result{soldOut(12), sale(10), soldOut(25), sale(30), soldOut(31), soldOut(5), sale(20)} {
		tl.add(r, classify(r))
	}
	if got := tl.refusedWithStock(); got != 3 {
		t.Fatalf("sold-out answers before the last order (created at 30 ms): %d, want 3 (at 5, 12 and 25 ms)", got)
	}
	none := newTally(0)
	none.add(soldOut(1), classify(soldOut(1)))
	if got := none.refusedWithStock(); got != 0 {
		t.Fatalf("no order at all: %d, want 0", got)
	}

	// Net of units in flight: a reservation held units from 11 to 13 ms
	// and gave them back, so the refusal at 12 ms is explained; the ones
	// at 5 and 25 ms were not inside any give-back, nor is 31 ms (after
	// the last order). One at 13 ms, in the give-back's own ms, counts as
	// inside.
	given := []api.GiveBack{{ReservedAt: at(11), At: at(13), Units: 1}, {ReservedAt: at(40), At: at(50), Units: 2}}
	if got := tl.refusedWithStockNet(given); got != 2 {
		t.Fatalf("net of units given back: %d, want 2 (at 5 and 25 ms)", got)
	}
	if got := tl.refusedWithStockNet(nil); got != 3 {
		t.Fatalf("with no give-back the net count is the raw one: %d, want 3", got)
	}
	edge := newTally(0)
	for _, r := range []*vegeta.Result{soldOut(13), soldOut(14), sale(30)} {
		edge.add(r, classify(r))
	}
	if got := edge.refusedWithStockNet(given); got != 1 {
		t.Fatalf("a refusal in the give-back's ms is inside, one a ms later is not: %d, want 1", got)
	}
}
