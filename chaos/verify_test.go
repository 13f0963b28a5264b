package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// window is when a fault was active, relative to the burst's start.
type window struct{ from, to time.Duration }

// expect says what a fault may do to the answers.
type expect struct {
	// mayLoseAnswer marks the calls that may end without an answer: those
	// sent to a process the test paused or killed. Network faults between
	// seckill and its backends must never cost the client its answer.
	mayLoseAnswer func(c call) bool
	// slugs are the problem types a buy may get under this fault.
	slugs []string
	// No expectation is a duration: how long answers took is measured
	// (figures, logs) but never asserted, since a busy 2-core machine
	// stretches every one of them. What is asserted is that each buy got an
	// answer before its own deadline (a context deadline on the request;
	// burstOptions.deadline), and which answer.
}

// figures are what one fault's run measured; RELIABILITY.md quotes them.
type figures struct {
	Test       string         `json:"test"`
	Fault      string         `json:"fault"`
	Stage      string         `json:"stage"`
	Form       string         `json:"form"` // short or full
	Requests   int            `json:"requests"`
	Successes  int            `json:"successes"`
	Refused    map[string]int `json:"refused"`
	Unknown    int            `json:"unknown"`
	NotSent    int            `json:"not_sent"`
	Oversold   int            `json:"oversold"`
	Lost       int            `json:"lost"`    // 201s without their order row
	Phantom    int            `json:"phantom"` // order rows without a 201 or an unknown request
	Conserved  bool           `json:"conserved"`
	FaultMs    int64          `json:"fault_ms"`
	P99FaultMs int64          `json:"p99_fault_ms"`
	MaxMs      int64          `json:"max_ms"`
	Violations []string       `json:"violations,omitempty"`
	Verdict    string         `json:"verdict"`
	Command    string         `json:"command"`
	Seconds    float64        `json:"seconds"`
}

// verify checks every promise after a fault and records the figures.
// initial is the stock the burst started from.
func (r *rig) verify(f *figures, calls []call, initial int, w window, e expect, live *instance) {
	t := r.t
	t.Helper()
	var violations []string
	fail := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		violations = append(violations, msg)
		t.Error(msg)
	}
	allowed := map[string]bool{}
	for _, s := range e.slugs {
		allowed[s] = true
	}
	ok := map[string]call{}      // user -> the 201
	unknown := map[string]bool{} // users whose outcome the client cannot know
	if f.Refused == nil {
		f.Refused = map[string]int{}
	}
	var shown int
	report := func(format string, args ...any) {
		if shown < 10 {
			fail(format, args...)
		} else {
			violations = append(violations, fmt.Sprintf(format, args...))
			t.Fail()
		}
		shown++
	}
	for _, c := range calls {
		if c.Op != "buy" {
			continue
		}
		f.Requests++
		if lat := c.latency(); lat.Milliseconds() > f.MaxMs {
			f.MaxMs = lat.Milliseconds()
		}
		if c.Bad != "" {
			report("buy %d on %s: %s", c.ID, c.Instance, c.Bad)
		}
		switch c.Outcome {
		case outOK:
			f.Successes++
			ok[c.User] = c
		case outRefused:
			f.Refused[c.Problem]++
			if c.Problem == "timeout" || c.Problem == "outcome-unknown" {
				// The API says the outcome of a timed-out request may be
				// unknown until audited: it may have committed.
				unknown[c.User] = true
			}
			if !allowed[c.Problem] {
				report("buy %d on %s: unexpected %d %s at %v", c.ID, c.Instance, c.Status, c.Problem, c.Start)
			}
		case outUnknown:
			f.Unknown++
			unknown[c.User] = true
			if e.mayLoseAnswer == nil || !e.mayLoseAnswer(c) {
				report("buy %d on %s: no answer (%s) after %v, started at %v", c.ID, c.Instance, c.Err, c.latency(), c.Start)
			}
		case outNotSent:
			f.NotSent++
			if e.mayLoseAnswer == nil || !e.mayLoseAnswer(c) {
				report("buy %d on %s: could not connect: %s", c.ID, c.Instance, c.Err)
			}
		}
	}
	f.FaultMs = (w.to - w.from).Milliseconds()
	f.P99FaultMs = p99(calls, w.from, w.to).Milliseconds()

	// Conservation is promised once reconcile has run after the fault, so
	// wait for a run that started after the last buy ended.
	if live != nil {
		after := time.Now()
		if !testkit.Poll(15*time.Second, func() bool { return r.reconciledSince(live, after) }) {
			fail("no reconcile run reported by %s within 15s after the burst", live.name)
		}
	}

	// The ledger, read in MySQL directly.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var initStock, stock int
	if err := r.db.QueryRowContext(ctx, "SELECT initial_stock, stock FROM products WHERE id = 1").Scan(&initStock, &stock); err != nil {
		t.Fatalf("read product 1: %v", err)
	}
	rows, err := r.db.QueryContext(ctx, "SELECT order_no, user_id, quantity FROM orders WHERE product_id = 1")
	if err != nil {
		t.Fatalf("read orders: %v", err)
	}
	defer rows.Close()
	sold := 0
	byNo := map[string]int{}
	for rows.Next() {
		var no, user string
		var q int
		if err := rows.Scan(&no, &user, &q); err != nil {
			t.Fatal(err)
		}
		sold += q
		byNo[no]++
		c, had201 := ok[user]
		switch {
		case had201 && c.OrderNo != no:
			f.Phantom++
			fail("order %s of %s does not match the 201's order %s", no, user, c.OrderNo)
		case !had201 && !unknown[user]:
			f.Phantom++
			fail("order %s of %s exists, but the client got no 201 and knew the outcome", no, user)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for user, c := range ok {
		switch n := byNo[c.OrderNo]; n {
		case 1:
		case 0:
			f.Lost++
			fail("201 for %s (order %s) has no order row", user, c.OrderNo)
		default:
			fail("201 for %s (order %s) has %d order rows", user, c.OrderNo, n)
		}
	}
	if initStock != initial {
		fail("initial stock is %d, the test set %d", initStock, initial)
	}
	f.Oversold = max(0, sold-initStock)
	f.Conserved = initStock-stock == sold
	if f.Oversold > 0 {
		fail("oversold %d units (initial %d, sold %d)", f.Oversold, initStock, sold)
	}
	if !f.Conserved {
		fail("stock not conserved: initial %d - stock %d != sold %d", initStock, stock, sold)
	}
	f.Violations = violations
	t.Logf("%s: %d buys, %d ok, refused %v, %d unknown, %d not sent, oversold %d, lost %d, phantom %d, p99 during fault %dms, max %dms",
		f.Test, f.Requests, f.Successes, f.Refused, f.Unknown, f.NotSent, f.Oversold, f.Lost, f.Phantom, f.P99FaultMs, f.MaxMs)
}

// reconciledSince reports whether the fleet's last reconcile run, as the
// audit of product 1 shows it, started after since and found it conserved.
func (r *rig) reconciledSince(in *instance, since time.Time) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.url+"/api/v1/products/1/audit", nil)
	if err != nil {
		return false
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var a api.Audit
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&a) != nil || a.Reconcile == nil {
		return false
	}
	return a.Reconcile.At.After(since) && a.Reconcile.Conserved && a.Reconcile.Oversold == 0
}

// record writes f to test-artifacts/chaos/<test>.json when the test ends,
// with its verdict; RELIABILITY.md is filled from these files.
func (r *rig) record(f *figures) {
	started := time.Now()
	r.t.Cleanup(func() {
		f.Seconds = time.Since(started).Round(100 * time.Millisecond).Seconds()
		f.Form = pick("short", "full")
		f.Verdict = "pass"
		if r.t.Failed() {
			f.Verdict = "FAIL"
		}
		if f.Command == "" {
			f.Command = fmt.Sprintf("SECKILL_CHAOS=full go test -count=1 -v -run '^%s$' ./chaos/", strings.SplitN(r.t.Name(), "/", 2)[0])
		}
		writeFigures(r.t.Name(), f)
	})
}

// artifacts is where figures go, relative to this package's directory.
const artifacts = "../test-artifacts/chaos"

func writeFigures(name string, v any) {
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		return // figures are a by-product; the assertions are the test
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return
	}
	file := strings.NewReplacer("/", "_", " ", "_").Replace(name) + ".json"
	_ = os.WriteFile(filepath.Join(artifacts, file), append(b, '\n'), 0o644)
}

// sortedKeys is for stable output.
func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
