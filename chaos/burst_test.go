package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// outcome is what the client knows about one request.
type outcome string

const (
	outOK      outcome = "ok"       // 201 with an order number
	outRefused outcome = "refused"  // a problem+json answer
	outUnknown outcome = "unknown"  // sent, but no answer within the deadline or the connection broke
	outNotSent outcome = "not-sent" // the dial failed: the request never reached a server
)

// call is one request of a burst, as the client saw it.
type call struct {
	ID       int
	User     string
	Instance string
	Op       string // "buy" or "read"
	Start    time.Duration
	End      time.Duration // since the burst started
	Status   int
	Problem  string // slug of the problem type
	OrderNo  string
	Stock    int // for reads
	Outcome  outcome
	Err      string
	Bad      string // why the answer breaks the HTTP contract; empty when it does not
}

func (c call) latency() time.Duration { return c.End - c.Start }

// burstOptions shape one burst of buys of product 1.
type burstOptions struct {
	targets  []*instance   // round robin
	requests int           // total buys
	workers  int           // concurrent clients
	pace     time.Duration // buy i starts no earlier than i*pace after the start
	deadline time.Duration // per request, on the client
	prefix   string        // user ids are prefix-<i>, unique per request
	readers  int           // extra clients reading the stock (for porcupine) until the buys end
	start    time.Time     // shared time origin of bursts fired together; zero means now
	// heldFrom, when above 0, holds buy heldFrom and those after it until
	// the test lets them go (openTo): a fault applied then has no buy in
	// flight, and the buys let go are sure to meet it.
	heldFrom int
}

// burst is a running burst.
type burst struct {
	o         burstOptions
	start     time.Time
	mu        sync.Mutex
	calls     []call
	completed atomic.Int64
	done      chan struct{}
	gateMu    sync.Mutex
	gate      *sync.Cond
	limit     int // buys from this index on wait; -1: none
}

// fire starts a burst and returns at once; wait collects it.
func (r *rig) fire(o burstOptions) *burst {
	b := &burst{o: o, start: o.start, done: make(chan struct{}), limit: -1}
	b.gate = sync.NewCond(&b.gateMu)
	if o.heldFrom > 0 {
		b.limit = o.heldFrom
	}
	if b.start.IsZero() {
		b.start = time.Now()
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	buysDone := make(chan struct{})
	for w := 0; w < o.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= o.requests {
					return
				}
				b.gateMu.Lock()
				for b.limit >= 0 && i >= b.limit {
					b.gate.Wait()
				}
				b.gateMu.Unlock()
				if wait := time.Until(b.start.Add(time.Duration(i) * o.pace)); wait > 0 {
					time.Sleep(wait)
				}
				c := r.buy(b, o.targets[i%len(o.targets)], i)
				b.add(c)
			}
		}()
	}
	var rg sync.WaitGroup
	for k := 0; k < o.readers; k++ {
		rg.Add(1)
		go func() {
			defer rg.Done()
			for i := 0; ; i++ {
				select {
				case <-buysDone:
					return
				default:
				}
				b.add(r.read(b, o.targets[(k+i)%len(o.targets)], -1-k))
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	go func() {
		wg.Wait()
		close(buysDone)
		rg.Wait()
		close(b.done)
	}()
	return b
}

func (b *burst) add(c call) {
	b.mu.Lock()
	b.calls = append(b.calls, c)
	b.mu.Unlock()
	if c.Op == "buy" {
		b.completed.Add(1)
	}
}

// count returns how many of the calls ended so far satisfy pred.
func (b *burst) count(pred func(call) bool) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, c := range b.calls {
		if pred(c) {
			n++
		}
	}
	return n
}

// openTo lets the buys before index n go (n < 0: all of them); those held
// whose time has come start at once.
func (b *burst) openTo(n int) {
	b.gateMu.Lock()
	b.limit = n
	b.gate.Broadcast()
	b.gateMu.Unlock()
}

// now is the time since the burst started.
func (b *burst) now() time.Duration { return time.Since(b.start) }

// waitCompleted waits until n buys have ended (or limit passes).
func (b *burst) waitCompleted(n int, limit time.Duration) bool {
	return testkit.Poll(limit, func() bool { return b.completed.Load() >= int64(n) })
}

// wait returns every call once the burst is over. Every request carries its
// own deadline, so the burst ends within requests/workers deadlines.
func (b *burst) wait(limit time.Duration) ([]call, error) {
	select {
	case <-b.done:
	case <-time.After(limit):
		return nil, fmt.Errorf("burst still running after %v", limit)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := append([]call(nil), b.calls...)
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out, nil
}

func (r *rig) buy(b *burst, in *instance, i int) call {
	user := fmt.Sprintf("%s-%d", b.o.prefix, i)
	body := fmt.Sprintf(`{"user_id":%q,"quantity":1}`, user)
	c := call{ID: i, User: user, Instance: in.name, Op: "buy"}
	r.exchange(b, &c, in, http.MethodPost, "/api/v1/products/1/buy", body)
	return c
}

func (r *rig) read(b *burst, in *instance, id int) call {
	c := call{ID: id, Instance: in.name, Op: "read"}
	r.exchange(b, &c, in, http.MethodGet, "/api/v1/products/1", "")
	return c
}

// exchange sends one request under the burst's deadline and classifies the
// answer into c.
func (r *rig) exchange(b *burst, c *call, in *instance, method, path, body string) {
	ctx, cancel := context.WithTimeout(context.Background(), b.o.deadline)
	defer cancel()
	c.Start = b.now()
	defer func() { c.End = b.now() }()
	req, err := http.NewRequestWithContext(ctx, method, in.url+path, strings.NewReader(body))
	if err != nil {
		c.Outcome, c.Err = outNotSent, err.Error()
		return
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.client.Do(req)
	if err != nil {
		c.Err = err.Error()
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			c.Outcome = outNotSent
		} else {
			c.Outcome = outUnknown
		}
		return
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		// The status line came but the body did not: for a 201 the order
		// exists, yet the client cannot tell which; treat it as unknown.
		c.Outcome, c.Err, c.Status = outUnknown, "reading body: "+err.Error(), resp.StatusCode
		return
	}
	c.Status = resp.StatusCode
	classify(c, resp.Header.Get("Content-Type"), raw)
}

// classify checks one answer against the API contract: a 201 (or a read's
// 200) carries JSON, anything else is problem+json with a /problems/ type
// and the same status.
func classify(c *call, contentType string, raw []byte) {
	mt, _, _ := mime.ParseMediaType(contentType)
	switch {
	case c.Op == "buy" && c.Status == http.StatusCreated:
		var o api.Order
		if err := json.Unmarshal(raw, &o); err != nil || o.OrderNo == "" {
			c.Bad = fmt.Sprintf("201 without an order_no: %.200s", raw)
		}
		c.Outcome, c.OrderNo = outOK, o.OrderNo
	case c.Op == "read" && c.Status == http.StatusOK:
		var p api.Product
		if err := json.Unmarshal(raw, &p); err != nil || !hasField(raw, "stock") {
			c.Bad = fmt.Sprintf("200 without stock: %.200s", raw)
			c.Outcome = outUnknown
			return
		}
		c.Outcome, c.Stock = outOK, p.Stock
	default:
		c.Outcome = outRefused
		var p api.Problem
		if mt != "application/problem+json" {
			c.Bad = fmt.Sprintf("%d with Content-Type %q, not problem+json: %.200s", c.Status, contentType, raw)
			return
		}
		if err := json.Unmarshal(raw, &p); err != nil || !strings.HasPrefix(p.Type, api.ProblemTypePrefix) || p.Status != c.Status {
			c.Bad = fmt.Sprintf("%d with a malformed problem: %.200s", c.Status, raw)
			return
		}
		c.Problem = strings.TrimPrefix(p.Type, api.ProblemTypePrefix)
	}
}

// hasField reports whether the JSON object raw has the field name, which
// decoding into a struct cannot tell from a zero value: a read whose answer
// lacks "stock" observed nothing.
func hasField(raw []byte, name string) bool {
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return false
	}
	_, ok := fields[name]
	return ok
}

// p99 returns the 99th percentile of the latencies of calls whose interval
// overlaps [from, to]; calls without an answer count with their full time.
func p99(calls []call, from, to time.Duration) time.Duration {
	var ls []time.Duration
	for _, c := range calls {
		if c.Op == "buy" && c.End >= from && c.Start <= to {
			ls = append(ls, c.latency())
		}
	}
	if len(ls) == 0 {
		return 0
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i] < ls[j] })
	return ls[(len(ls)*99+99)/100-1]
}
