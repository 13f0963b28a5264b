package main

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
	o := options{targets: []string{srv.URL}, Config: scenario.Config{Buyers: 10, Timeout: time.Minute, MaxDuration: 50 * time.Millisecond}}
	conns := baselineConns(t, o.Timeout)
	done := make(chan results.Ceiling, 1)
	go func() { done <- getBaseline(context.Background(), conns, o, 1, results.BaselineHTTP, "/healthz", nil) }()
	<-entered
	time.Sleep(o.MaxDuration) // the attack began before the request came in: the cap has passed
	close(release)
	b := <-done
	want := fmt.Sprintf("stopped at the --max-duration cap (50ms) after %d of 10 requests", got.Load())
	if b.Requests >= 10 || b.Requests != int(got.Load()) || b.OK != b.Requests || !strings.Contains(b.Note, want) {
		t.Fatalf("capped baseline: %d requests, %d ok, %d reached the server, note %q; want those sent, fewer than 10, and %q", b.Requests, b.OK, got.Load(), b.Note, want)
	}
	// Uncapped, it sends them all and says nothing of a cap.
	o.MaxDuration = time.Minute
	if b := getBaseline(context.Background(), conns, o, 1, results.BaselineHTTP, "/healthz", nil); b.Requests != 10 || b.OK != 10 || b.Note != "" {
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
