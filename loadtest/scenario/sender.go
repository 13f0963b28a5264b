package scenario

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sort"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
	"github.com/tsenart/vegeta/v12/lib/plot"
)

// The T-0 and paced crowds need what vegeta's attacker does not give: a
// buyer that holds its own connection and waits at a barrier, and the
// instant each request actually left. They send with net/http, and turn
// every answer into a vegeta.Result, so that the tally, the latency
// metrics, the plot and the verdicts read them as they read an attack's.

// newBuyerTransport is a keep-alive transport for conns connections per
// target, dialled on first use and kept between requests.
func newBuyerTransport(conns int, timeout time.Duration) *http.Transport {
	return &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSClientConfig:     vegeta.DefaultTLSConfig,
		DialContext:         (&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     30 * time.Second,
	}
}

// sent is one request's result, the instant its last byte was written
// (zero when it was never written: the connection failed first), and the
// instant its buyer arrived, which the crowd sets (clocks.go).
type sent struct {
	result *vegeta.Result
	wrote  time.Time
	due    time.Time
}

// sendOne sends t through client and reads the whole answer.
func sendOne(ctx context.Context, client *http.Client, t vegeta.Target, series string, seq uint64) sent {
	r := &vegeta.Result{Attack: series, Seq: seq, Method: t.Method, URL: t.URL, BytesOut: uint64(len(t.Body))}
	// The transport's writer goroutine reports the write, which may come
	// after the answer (a server that answers before reading it all).
	var mu sync.Mutex
	var wrote time.Time
	trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
		mu.Lock()
		wrote = time.Now()
		mu.Unlock()
	}}
	done := func() sent {
		mu.Lock()
		defer mu.Unlock()
		return sent{result: r, wrote: wrote}
	}
	req, err := t.Request()
	if err != nil {
		r.Timestamp, r.Error = time.Now(), err.Error()
		return done()
	}
	req = req.WithContext(httptrace.WithClientTrace(ctx, trace))
	r.Timestamp = time.Now()
	resp, err := client.Do(req)
	if err != nil {
		r.Latency, r.Error = time.Since(r.Timestamp), err.Error()
		return done()
	}
	body, err := io.ReadAll(resp.Body)
	if cerr := resp.Body.Close(); err == nil {
		err = cerr
	}
	r.Latency = time.Since(r.Timestamp)
	r.Code, r.Headers, r.Body, r.BytesIn = uint16(resp.StatusCode), resp.Header, body, uint64(len(body))
	if err != nil {
		// An answer cut off mid-body is no answer the lab can read.
		r.Code, r.Error = 0, err.Error()
	}
	return done()
}

// plotInOrder adds results to the stage's plot in the order they were
// sent, numbered from 0 as vegeta's plot wants a series: the crowd's
// goroutines finish in any order. Each result with its buyer's arrival
// set goes in the buyer-time series too.
func plotInOrder(pl *plot.Plot, results []sent) error {
	rs := slices.Clone(results)
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].result.Timestamp.Before(rs[j].result.Timestamp) })
	for i, s := range rs {
		c := withLabel(s.result, classify(s.result))
		c.Seq = uint64(i)
		if err := pl.Add(c); err != nil {
			return err
		}
		if s.due.IsZero() {
			continue
		}
		b := buyerPoint(s.result, s.due)
		b.Seq = uint64(i)
		if err := pl.Add(b); err != nil {
			return err
		}
	}
	return nil
}
