// Package burst lets the dashboard show a race without a load-testing tool:
// the server itself fires N concurrent buys (or coupon grabs) across every
// instance of the fleet over plain HTTP, as N shoppers would, and reports
// what came back and what the audit says afterwards. It also switches the
// stage on every instance at once and lists the instances' health, since a
// page served by one instance behind a proxy cannot reach the others.
//
// It speaks only the public HTTP API, so what a burst shows is what any
// client would see.
package burst

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
)

// ErrInvalid marks a request the caller must fix: no peers, N out of range,
// an unknown kind. Errors wrapping it name the field.
var ErrInvalid = errors.New("burst: invalid request")

// Options configure a Fleet.
type Options struct {
	// Peers are the base URLs of every instance (http://host:port).
	Peers []string
	// AdminToken is sent with admin calls and with X-Seckill-Stage.
	AdminToken string
	// Max bounds N in one burst (SECKILL_BURST_MAX).
	Max int
	// Concurrency bounds requests in flight at once. Default 256: enough to
	// pile up on one lock, few enough for a laptop's file descriptors.
	Concurrency int
	// RequestTimeout bounds each request. Default 10s.
	RequestTimeout time.Duration
	// AuditBudget bounds the reading of the audit after a burst: the peers
	// are asked in turn, again and again, until one answers or the budget
	// is spent. Default 15s: on a busy machine an instance can be slow to
	// answer just after a burst, and the audit is the burst's verdict.
	AuditBudget time.Duration
	// Client is the HTTP client; default one with a pool sized for
	// Concurrency.
	Client *http.Client
}

// Fleet talks to every instance. It is safe for concurrent use.
type Fleet struct {
	opts   Options
	client *http.Client
}

// New returns a Fleet over opts.Peers.
func New(opts Options) *Fleet {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 256
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 10 * time.Second
	}
	if opts.Max <= 0 {
		opts.Max = 2000
	}
	if opts.AuditBudget <= 0 {
		opts.AuditBudget = 15 * time.Second
	}
	opts.Peers = slices.Clone(opts.Peers)
	for i, p := range opts.Peers {
		opts.Peers[i] = strings.TrimRight(p, "/")
	}
	c := opts.Client
	if c == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns = opts.Concurrency
		tr.MaxIdleConnsPerHost = opts.Concurrency
		c = &http.Client{Transport: tr}
	}
	return &Fleet{opts: opts, client: c}
}

// Peers returns the base URLs of the fleet.
func (f *Fleet) Peers() []string { return slices.Clone(f.opts.Peers) }

// Max returns the largest N a burst accepts.
func (f *Fleet) Max() int { return f.opts.Max }

// outcome of one request.
type outcome struct {
	status     int
	retryAfter bool // the answer said when to try again
	problem    string
	instance   string
	stage      string
	latency    time.Duration
	answered   time.Time // when the answer was read (zero: none)
	err        error
}

// Burst fires r.N requests at once, spread round-robin over the peers, each
// with its own user id and Idempotency-Key, then reads the item's audit.
// All requests are released together from a barrier so they race for real.
//
// It returns an error wrapping ErrInvalid for a bad request, or ctx's error
// if ctx ended before the requests were sent. Failed requests are counted,
// not returned.
func (f *Fleet) Burst(ctx context.Context, r api.BurstRequest) (api.BurstResult, error) {
	path, body, err := f.route(r)
	if err != nil {
		return api.BurstResult{}, err
	}
	if len(f.opts.Peers) == 0 {
		return api.BurstResult{}, fmt.Errorf("%w: no peers configured", ErrInvalid)
	}
	run := runID()
	outs := make([]outcome, r.N)
	start := make(chan struct{})
	slots := make(chan struct{}, f.opts.Concurrency)
	var wg sync.WaitGroup
	for i := range r.N {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				outs[i] = outcome{err: ctx.Err()}
				return
			}
			defer func() { <-slots }()
			peer := f.opts.Peers[i%len(f.opts.Peers)]
			user := fmt.Sprintf("burst-%s-%d", run, i)
			outs[i] = f.fire(ctx, peer+path, body(user), user, r.Stage)
		}()
	}
	began := time.Now()
	close(start)
	wg.Wait()
	res := api.BurstResult{
		Request:    r,
		Targets:    f.Peers(),
		ElapsedMS:  ms(time.Since(began)),
		ByInstance: map[string]int{},
		Stages:     map[string]int{},
	}
	lat := make([]float64, 0, len(outs))
	buyer := make([]float64, 0, len(outs))
	for _, o := range outs {
		count(&res.Counts, o)
		if o.err == nil {
			lat = append(lat, ms(o.latency))
			// Every buyer of the burst arrived at its start: its time
			// includes the wait for a slot among the Concurrency in flight.
			buyer = append(buyer, ms(o.answered.Sub(began)))
			res.ByInstance[o.instance]++
			if o.stage != "" {
				res.Stages[o.stage]++
			}
		}
	}
	res.Latency = summarise(lat)
	res.BuyerLatency = summarise(buyer)
	// The audit is read even when ctx ended mid-burst (the caller left):
	// whatever the buys that went out did is on the record all the same.
	a, err := f.audit(context.WithoutCancel(ctx), r)
	if err != nil {
		res.AuditError = err.Error()
	} else {
		res.Audit = &a
	}
	return res, nil
}

// route checks r and returns the path to call and a body maker.
func (f *Fleet) route(r api.BurstRequest) (string, func(user string) []byte, error) {
	if r.N < 1 || r.N > f.opts.Max {
		return "", nil, fmt.Errorf("%w: n must be between 1 and %d (SECKILL_BURST_MAX), got %d", ErrInvalid, f.opts.Max, r.N)
	}
	if r.ItemID <= 0 {
		return "", nil, fmt.Errorf("%w: item_id must be a positive integer", ErrInvalid)
	}
	switch r.Kind {
	case "product", "":
		return fmt.Sprintf("/api/v1/products/%d/buy", r.ItemID), func(user string) []byte {
			b, _ := json.Marshal(map[string]any{"user_id": user, "quantity": 1})
			return b
		}, nil
	case "coupon":
		return fmt.Sprintf("/api/v1/coupons/%d/grab", r.ItemID), func(user string) []byte {
			b, _ := json.Marshal(map[string]any{"user_id": user})
			return b
		}, nil
	}
	return "", nil, fmt.Errorf("%w: kind must be product or coupon, got %q", ErrInvalid, r.Kind)
}

func (f *Fleet) fire(ctx context.Context, url string, body []byte, key, stage string) outcome {
	ctx, cancel := context.WithTimeout(ctx, f.opts.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return outcome{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if stage != "" {
		req.Header.Set(api.StageHeader, stage)
		req.Header.Set("Authorization", "Bearer "+f.opts.AdminToken)
	}
	began := time.Now()
	resp, err := f.client.Do(req)
	if err != nil {
		return outcome{err: err, latency: time.Since(began)}
	}
	defer resp.Body.Close()
	o := outcome{
		status:     resp.StatusCode,
		retryAfter: resp.Header.Get("Retry-After") != "",
		instance:   resp.Header.Get(api.InstanceHeader),
		stage:      resp.Header.Get(api.StageHeader),
	}
	if resp.StatusCode >= 400 {
		var p api.Problem
		_ = json.NewDecoder(io.LimitReader(resp.Body, 8<<10)).Decode(&p) // a body that is not a problem counts by status alone
		o.problem = p.Type[strings.LastIndex(p.Type, "/")+1:]
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // let the connection be reused
	o.answered = time.Now()
	o.latency = o.answered.Sub(began)
	return o
}

func count(c *api.BurstCounts, o outcome) {
	switch {
	case o.err != nil:
		c.Failed++
	case o.status == http.StatusCreated || o.status == http.StatusOK:
		c.Created++
	case o.status == http.StatusAccepted:
		c.Accepted++ // redis-stream: the order is written later
	case o.status == http.StatusConflict && o.problem == "sold-out":
		c.SoldOut++
	case o.status == http.StatusTooManyRequests:
		c.LockTimeout++
	case o.status == http.StatusServiceUnavailable && o.retryAfter:
		c.Overloaded++
	case o.status >= 500:
		c.ServerErrors++
	default:
		c.Other4xx++
	}
}

// summarise sorts lat in place and returns its percentiles.
func summarise(lat []float64) api.BurstLatency {
	slices.Sort(lat)
	l := api.BurstLatency{Samples: lat}
	if len(lat) == 0 {
		return l
	}
	l.P50, l.P95, l.P99 = quantile(lat, 0.50), quantile(lat, 0.95), quantile(lat, 0.99)
	l.Max = lat[len(lat)-1]
	return l
}

// quantile of sorted samples by the nearest-rank method.
func quantile(sorted []float64, q float64) float64 {
	rank := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}

func ms(d time.Duration) float64 {
	return float64(d.Microseconds()) / 1000
}

// audit reads the item's audit from the first peer that answers. Every
// instance shares one database, so any of them tells the truth. A peer that
// fails (busy, slow, restarting) is asked again after the others, with a
// short pause between rounds, until opts.AuditBudget is spent: one slow
// answer just after a burst must not cost the burst its verdict.
func (f *Fleet) audit(ctx context.Context, r api.BurstRequest) (api.Audit, error) {
	kind := "products"
	if r.Kind == "coupon" {
		kind = "coupons"
	}
	ctx, cancel := context.WithTimeout(ctx, f.opts.AuditBudget)
	defer cancel()
	var errs []error
	for round := 0; ; round++ {
		for _, p := range f.opts.Peers {
			var a api.Audit
			err := f.getJSON(ctx, fmt.Sprintf("%s/api/v1/%s/%d/audit", p, kind, r.ItemID), &a)
			if err == nil {
				return a, nil
			}
			if round == 0 {
				errs = append(errs, err)
			}
		}
		pause := time.NewTimer(min(time.Duration(round+1)*100*time.Millisecond, time.Second))
		select {
		case <-ctx.Done():
			pause.Stop()
			return api.Audit{}, fmt.Errorf("no peer answered the audit within %s: %w", f.opts.AuditBudget, errors.Join(errs...))
		case <-pause.C:
		}
	}
}

func (f *Fleet) getJSON(ctx context.Context, url string, dst any) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(dst); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}

// runID names one burst, so its user ids and Idempotency-Keys are unique
// across bursts and across servers.
func runID() string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails since Go 1.24
	return hex.EncodeToString(b[:])
}
