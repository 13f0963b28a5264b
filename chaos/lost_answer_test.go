package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/testkit"
)

// TestStreamOrderReportsTransportErrors: a buy that the transport leaves
// without an answer (the connection dropped before any answer, a 202 or a
// problem whose body breaks off) is no answer, and the rig says so: the
// test fails, unless the test itself paused or killed the instance while
// the buy was out. It used to come back as status 0 (or as a 202 without
// its order) and be counted as an unknown outcome, or a sale, in silence.
func TestStreamOrderReportsTransportErrors(t *testing.T) {
	// The fake instance answers each buyer (by user id) one way: whole,
	// or with its body broken off (the connection closed short of the
	// Content-Length), or not at all.
	answer := func(status, contentType, body string, cut bool) string {
		n := len(body)
		if cut {
			body = body[:n/2]
		}
		return fmt.Sprintf("HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s", status, contentType, n, body)
	}
	order := `{"order_no":"O-123","user_id":"u","product_id":1,"quantity":1}`
	refusal := `{"type":"` + api.ProblemTypePrefix + `sold-out","title":"Sold out","status":409}`
	answers := map[string]string{
		"dropped":     "",
		"cut-order":   answer("202 Accepted", "application/json", order, true),
		"cut-refusal": answer("409 Conflict", "application/problem+json", refusal, true),
		"order":       answer("202 Accepted", "application/json", order, false),
		"refusal":     answer("409 Conflict", "application/problem+json", refusal, false),
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		name := req.Header.Get("X-Answer")
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer c.Close()
		_, _ = rw.WriteString(answers[name])
		_ = rw.Flush()
	}))
	t.Cleanup(srv.Close)

	var mu sync.Mutex
	var lost []streamBuy
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	r := &rig{t: t, client: &http.Client{Transport: &answerPicker{tr}}, onLost: func(b streamBuy) {
		mu.Lock()
		defer mu.Unlock()
		lost = append(lost, b)
	}}
	in := &instance{t: t, name: "fake", url: srv.URL}

	for _, c := range []struct {
		answer  string
		status  int    // what streamOrder returns
		problem string // of a refusal
		lost    bool   // reported as no answer
	}{
		{"dropped", 0, "", true},
		{"cut-order", 0, "", true},
		{"cut-refusal", 0, "", true},
		{"order", http.StatusAccepted, "", false},
		{"refusal", http.StatusConflict, "sold-out", false},
	} {
		t.Run(c.answer, func(t *testing.T) {
			mu.Lock()
			lost = nil
			mu.Unlock()
			b := r.streamOrder(time.Now(), in, c.answer)
			if b.status != c.status || b.problem != c.problem {
				t.Errorf("streamOrder returned %d %q (order %q, error %q); want %d %q", b.status, b.problem, b.orderNo, b.err, c.status, c.problem)
			}
			if b.sold() && b.orderNo == "" {
				t.Errorf("streamOrder counts a %d without an order number as sold", b.status)
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case c.lost && len(lost) != 1:
				t.Errorf("streamOrder reported %d buys without an answer, want this one (status %d, error %q)", len(lost), b.status, b.err)
			case c.lost && lost[0].err == "":
				t.Errorf("the buy without an answer was reported without the transport's error: %+v", lost[0])
			case !c.lost && len(lost) != 0:
				t.Errorf("streamOrder reported an answered buy as lost: %+v", lost)
			}
		})
	}

	// An instance the test paused or killed while the buy was out may
	// lose its answer: that is the fault, not the harness.
	in.disturb()
	mu.Lock()
	lost = nil
	mu.Unlock()
	if b := r.streamOrder(time.Now(), in, "dropped"); b.status != 0 || b.err == "" {
		t.Errorf("a dropped answer from a killed instance came back as %+v; want status 0 with the error", b)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lost) != 0 {
		t.Errorf("a dropped answer from an instance the test had killed was reported as a fault of the harness: %+v", lost)
	}
}

// answerPicker tells the fake instance which answer to give, by the
// buyer's user id (the request body), in a header.
type answerPicker struct{ next http.RoundTripper }

func (p *answerPicker) RoundTrip(req *http.Request) (*http.Response, error) {
	body, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	line, _ := bufio.NewReader(body).ReadString('}')
	user := strings.TrimSuffix(strings.TrimPrefix(line, `{"user_id":"`), `"}`)
	req = req.Clone(req.Context())
	req.Header.Set("X-Answer", user)
	return p.next.RoundTrip(req)
}

// awaitQueueDrained waits until product 1's queue of redis-stream orders
// on c is empty, following its length, not the clock: it fails only once
// the length has stood still for a minute (the bound the whole wait used
// to have), so a machine whose cores are all taken slows it down without
// failing it.
func awaitQueueDrained(ctx context.Context, t *testing.T, c *redis.Client) {
	t.Helper()
	var n int64
	var err error
	testkit.WaitProgress(t, "the queue to drain into MySQL", time.Minute, func() string {
		n, err = c.HLen(ctx, queuedKey).Result()
		return fmt.Sprintf("%d orders queued (%v)", n, err)
	}, func() bool { return err == nil && n == 0 })
}
