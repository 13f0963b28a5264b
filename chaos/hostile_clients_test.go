package chaos

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// probe is one hostile request and the answer it must get.
type probe struct {
	name   string
	method string
	path   string
	header map[string]string
	body   string
	status int
	slug   string // problem type
}

// TestAdversarialHTTP sends a live instance what a hostile or broken client
// would: oversized headers and bodies, malformed Idempotency-Keys, admin
// calls without or with a wrong token, and clients that send their request
// one byte at a time. Each must get its documented answer (or be cut off by
// the server's timeouts), nothing may be sold, and the instance must stay
// healthy.
func TestAdversarialHTTP(t *testing.T) {
	r := newRig(t, rigOptions{})
	in := r.start("a", nil)
	const stock = 10
	r.reset(in, stock)
	f := &figures{Test: t.Name(), Fault: "adversarial HTTP: oversized headers and bodies, slow clients, bad Idempotency-Keys, admin without or with a wrong token", Stage: "redis-lock", Refused: map[string]int{}}
	r.record(f)

	big := `{"user_id":"adv-big","quantity":1,"pad":"` + strings.Repeat("x", 70<<10) + `"}`
	bearer := func(tok string) map[string]string { return map[string]string{"Authorization": tok} }
	probes := []probe{
		{"header 40 KiB", "POST", "/api/v1/products/1/buy", map[string]string{"X-Big": strings.Repeat("h", 40<<10)}, `{"user_id":"adv-h"}`, 431, "headers-too-large"},
		{"many headers", "POST", "/api/v1/products/1/buy", manyHeaders(2000), `{"user_id":"adv-mh"}`, 431, "headers-too-large"},
		{"body 70 KiB", "POST", "/api/v1/products/1/buy", nil, big, 413, "body-too-large"},
		{"body 70 KiB with key", "POST", "/api/v1/products/1/buy", map[string]string{"Idempotency-Key": "adv-k1"}, big, 413, "body-too-large"},
		{"grab body 70 KiB", "POST", "/api/v1/coupons/1/grab", nil, big, 413, "body-too-large"},
		{"key with space", "POST", "/api/v1/products/1/buy", map[string]string{"Idempotency-Key": "has space"}, `{"user_id":"adv-k2"}`, 400, "idempotency-key-invalid"},
		{"key 256 chars", "POST", "/api/v1/products/1/buy", map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}, `{"user_id":"adv-k3"}`, 400, "idempotency-key-invalid"},
		{"key not ASCII", "POST", "/api/v1/products/1/buy", map[string]string{"Idempotency-Key": "caf\u00e9"}, `{"user_id":"adv-k4"}`, 400, "idempotency-key-invalid"},
		{"key with escape", "POST", "/api/v1/products/1/buy", map[string]string{"Idempotency-Key": `"a\"b"`}, `{"user_id":"adv-k5"}`, 400, "idempotency-key-invalid"},
		{"key empty quoted", "POST", "/api/v1/products/1/buy", map[string]string{"Idempotency-Key": `""`}, `{"user_id":"adv-k6"}`, 400, "idempotency-key-invalid"},
		{"grab key with tab", "POST", "/api/v1/coupons/1/grab", map[string]string{"Idempotency-Key": "a\tb"}, `{"user_id":"adv-k7"}`, 400, "idempotency-key-invalid"},
		{"admin no token", "POST", "/api/v1/admin/products/1/reset", nil, `{"stock":1000}`, 401, "unauthorized"},
		{"admin wrong token", "POST", "/api/v1/admin/products/1/reset", bearer("Bearer wrong-token-123"), `{"stock":1000}`, 403, "forbidden"},
		{"admin empty bearer", "POST", "/api/v1/admin/products/1/reset", bearer("Bearer "), `{"stock":1000}`, 401, "unauthorized"},
		{"admin basic auth", "POST", "/api/v1/admin/products/1/reset", bearer("Basic YWRtaW46YWRtaW4="), `{"stock":1000}`, 401, "unauthorized"},
		{"admin token prefix", "POST", "/api/v1/admin/products/1/reset", bearer("Bearer " + adminToken[:8]), `{"stock":1000}`, 403, "forbidden"},
		{"stage switch wrong token", "PUT", "/api/v1/admin/stage", bearer("Bearer nope-nope-nope"), `{"stage":"unlocked"}`, 403, "forbidden"},
		{"stage header no token", "POST", "/api/v1/products/1/buy", map[string]string{"X-Seckill-Stage": "unlocked"}, `{"user_id":"adv-m1"}`, 401, "unauthorized"},
		{"stage header wrong token", "POST", "/api/v1/products/1/buy", map[string]string{"X-Seckill-Stage": "unlocked", "Authorization": "Bearer wrong-token-123"}, `{"user_id":"adv-m2"}`, 403, "forbidden"},
		{"coupon reset no token", "POST", "/api/v1/admin/coupons/1/reset", nil, `{"stock":1000}`, 401, "unauthorized"},
	}
	var mu sync.Mutex
	var latencies []time.Duration
	note := func(ok bool, d time.Duration, slug string) {
		mu.Lock()
		defer mu.Unlock()
		f.Requests++
		if ok {
			f.Successes++
		}
		if slug != "" {
			f.Refused[slug]++
		}
		latencies = append(latencies, d)
	}

	t.Run("probes", func(t *testing.T) {
		for _, p := range probes {
			t.Run(p.name, func(t *testing.T) {
				t.Parallel()
				start := time.Now()
				status, ctype, body, err := rawRequest(in.url, p)
				d := time.Since(start)
				ok := err == nil && status == p.status
				if err != nil {
					t.Errorf("%s: %v", p.name, err)
				} else if status != p.status {
					t.Errorf("%s: status %d, want %d: %.300s", p.name, status, p.status, body)
				}
				if ok && p.slug != "" {
					c := call{Op: "probe", Status: status}
					classify(&c, ctype, body)
					if c.Bad != "" || c.Problem != p.slug {
						ok = false
						t.Errorf("%s: problem %q (%s), want %q", p.name, c.Problem, c.Bad, p.slug)
					}
				}
				note(ok, d, p.slug)
			})
		}
		t.Run("slow body", func(t *testing.T) {
			t.Parallel()
			// Headers at once, then one byte of a 256-byte body every
			// 250ms: the server's ReadTimeout (15s) must end it. The whole
			// body would take 64s, so no delay of the server's can let it
			// arrive in time and buy (a 64-byte body took 16s: 1s to spare).
			d, err := trickle(in.url, "POST /api/v1/products/1/buy HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 256\r\n\r\n", `{"user_id":"adv-slow","quantity":1}`+strings.Repeat(" ", 256), 250*time.Millisecond, 25*time.Second)
			if err != nil {
				t.Error(err)
			}
			t.Logf("slow body cut off after %v", d)
			note(err == nil, d, "")
		})
		t.Run("slow headers", func(t *testing.T) {
			t.Parallel()
			// One byte of the header block every 250ms: ReadHeaderTimeout
			// (5s) must end it.
			d, err := trickle(in.url, "", "POST /api/v1/products/1/buy HTTP/1.1\r\nHost: x\r\nX-Slow: "+strings.Repeat("s", 200), 250*time.Millisecond, 15*time.Second)
			if err != nil {
				t.Error(err)
			}
			t.Logf("slow headers cut off after %v", d)
			note(err == nil, d, "")
		})
	})

	// Nothing was sold and nothing changed; the instance still sells.
	if status, body := r.do(in, http.MethodGet, "/healthz", nil, ""); status != http.StatusOK {
		t.Errorf("healthz after the probes: %d %s", status, body)
	}
	r.verify(f, nil, stock, window{}, expect{}, in)
	status, body := r.do(in, http.MethodPost, "/api/v1/products/1/buy", nil, `{"user_id":"adv-after","quantity":1}`)
	if status != http.StatusCreated {
		t.Errorf("a normal buy after the probes: %d %s", status, body)
	}
	f.P99FaultMs = pctl(latencies, 99).Milliseconds()
	f.MaxMs = pctl(latencies, 100).Milliseconds()
}

func manyHeaders(n int) map[string]string {
	h := make(map[string]string, n)
	for i := 0; i < n; i++ {
		h[fmt.Sprintf("X-H%d", i)] = strings.Repeat("v", 16)
	}
	return h
}

// rawRequest writes p by hand on a fresh connection, so that header values
// net/http would refuse to send (a tab) still reach the server, and reads
// the answer with a 10s bound.
func rawRequest(base string, p probe) (status int, contentType string, body []byte, err error) {
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 2*time.Second)
	if err != nil {
		return 0, "", nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return 0, "", nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: chaos\r\nConnection: close\r\n", p.method, p.path)
	if p.body != "" {
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(p.body))
	}
	for k, v := range p.header {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	b.WriteString("\r\n")
	b.WriteString(p.body)
	// The server may answer and close before reading everything (431,
	// 413); a write error then is expected, the answer is what counts.
	_, _ = io.WriteString(conn, b.String())
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, "", nil, fmt.Errorf("no answer: %w", err)
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, resp.Header.Get("Content-Type"), body, err
}

// trickle sends head at once and then slow one byte every gap, until the
// server closes the connection; it fails if the server has not done so
// within limit. An answer the server sends before closing must be a
// problem+json (or Go's own plain 408/400 for a broken request).
func trickle(base, head, slow string, gap, limit time.Duration) (time.Duration, error) {
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 2*time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	start := time.Now()
	if err := conn.SetDeadline(start.Add(limit)); err != nil {
		return 0, err
	}
	closed := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, conn) // returns when the server closes
		closed <- err
	}()
	if _, err := io.WriteString(conn, head); err != nil {
		return time.Since(start), nil // closed already
	}
	for i := 0; i < len(slow); i++ {
		select {
		case err := <-closed:
			if err != nil {
				return time.Since(start), fmt.Errorf("connection not closed by the server within %v: %w", limit, err)
			}
			return time.Since(start), nil
		case <-time.After(gap):
		}
		if _, err := conn.Write([]byte{slow[i]}); err != nil {
			break // the server closed its side
		}
	}
	if err := <-closed; err != nil {
		return time.Since(start), fmt.Errorf("connection not closed by the server within %v: %w", limit, err)
	}
	return time.Since(start), nil
}

func pctl(ls []time.Duration, p int) time.Duration {
	if len(ls) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ls...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[(len(s)*p+99)/100-1]
}
