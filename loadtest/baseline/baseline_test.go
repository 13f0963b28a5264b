package baseline

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill-lab/seckill/loadtest/results"
	"github.com/seckill-lab/seckill/loadtest/scenario"
)

// TestHTTPCeilingAsksEveryTarget: the HTTP ceiling sends exactly one GET
// /healthz per buyer, spread over the targets, and counts the 200s.
func TestHTTPCeilingAsksEveryTarget(t *testing.T) {
	var hits [2]atomic.Int64
	var urls []string
	for i := range hits {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/healthz" || r.Method != http.MethodGet {
				http.Error(w, "unexpected", http.StatusTeapot)
				return
			}
			hits[i].Add(1)
		}))
		defer srv.Close()
		urls = append(urls, srv.URL)
	}
	c := Config{Targets: urls, Requests: 300, Timeout: 5 * time.Second, MaxDuration: 30 * time.Second}
	b := HTTPCeiling(context.Background(), baselineConns(t, c.Timeout), c, 16)
	if b.OK != 300 || hits[0].Load() != 150 || hits[1].Load() != 150 || b.PerSecond <= 0 {
		t.Fatalf("ceiling %+v, hits %d and %d; want 300 ok, 150 each", b, hits[0].Load(), hits[1].Load())
	}
}

// TestRedisRoundTripIsAnAdminPing: the Redis baseline sends one GET
// /api/v1/admin/redis-ping per buyer, with the admin token, spread over the
// targets; a target that answers anything else (404 without Redis) is
// counted in the note, not in the rate.
func TestRedisRoundTripIsAnAdminPing(t *testing.T) {
	var hits [2]atomic.Int64
	var urls []string
	for i := range hits {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/api/v1/admin/redis-ping" || r.Method != http.MethodGet || r.Header.Get("Authorization") != "Bearer lab-token" {
				http.Error(w, "unexpected", http.StatusTeapot)
				return
			}
			hits[i].Add(1)
			if i == 1 {
				http.Error(w, "no redis", http.StatusNotFound)
			}
		}))
		defer srv.Close()
		urls = append(urls, srv.URL)
	}
	c := Config{Targets: urls, Token: "lab-token", Requests: 300, Timeout: 5 * time.Second, MaxDuration: 30 * time.Second}
	b := RedisRoundTrip(context.Background(), baselineConns(t, c.Timeout), c, 16)
	if b.Name != results.BaselineRedis || b.OK != 150 || hits[0].Load() != 150 || hits[1].Load() != 150 || b.PerSecond <= 0 || b.Note != "not 200: 404 ×150" {
		t.Fatalf("baseline %+v, hits %d and %d; want 150 ok, 150 × 404 noted", b, hits[0].Load(), hits[1].Load())
	}
	c.Targets = urls[1:]
	if b := RedisRoundTrip(context.Background(), baselineConns(t, c.Timeout), c, 16); b.OK != 0 || b.PerSecond != 0 || b.Note != "not 200: 404 ×300" {
		t.Fatalf("targets without Redis: %+v; want no rate, 300 × 404 noted", b)
	}
}

// TestBaselineCappedSaysSo: a baseline slower than --max-duration is cut
// by the cap as a burst is. Its row must say how many requests went out,
// not pass for a baseline that sent them all (the keyed sold-out baseline
// of make lab-cpu on a busy fleet answered about half its 10,000 so, and
// nothing said why). The one worker's first request is held until the cap
// has passed, so the attack sends at most the hit it had already paced.
func TestBaselineCappedSaysSo(t *testing.T) {
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got.Add(1) == 1 {
			entered <- struct{}{}
			<-release
		}
	}))
	defer srv.Close()
	c := Config{Targets: []string{srv.URL}, Requests: 10, Timeout: time.Minute, MaxDuration: 50 * time.Millisecond}
	conns := baselineConns(t, c.Timeout)
	done := make(chan results.Ceiling, 1)
	go func() {
		done <- Get(context.Background(), conns, c, 1, results.BaselineHTTP, "/healthz", nil)
	}()
	<-entered
	time.Sleep(c.MaxDuration) // the attack began before the request came in: the cap has passed
	close(release)
	b := <-done
	want := fmt.Sprintf("stopped at the --max-duration cap (50ms) after %d of 10 requests", got.Load())
	if b.Requests >= 10 || b.Requests != int(got.Load()) || b.OK != b.Requests || !strings.Contains(b.Note, want) {
		t.Fatalf("capped baseline: %d requests, %d ok, %d reached the server, note %q; want those sent, fewer than 10, and %q", b.Requests, b.OK, got.Load(), b.Note, want)
	}
	// Uncapped, it sends them all and says nothing of a cap.
	c.MaxDuration = time.Minute
	if b := Get(context.Background(), conns, c, 1, results.BaselineHTTP, "/healthz", nil); b.Requests != 10 || b.OK != 10 || b.Note != "" {
		t.Fatalf("uncapped baseline: %+v; want 10 of 10 and no note", b)
	}
}

// baselineConns is the connections of a baseline, closed at the test's
// end.
func baselineConns(t *testing.T, timeout time.Duration) *http.Transport {
	tr := scenario.NewAttackTransport(timeout)
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}
