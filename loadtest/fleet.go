package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
)

// fleet talks to the targets outside the attack: which stages they have,
// resetting stock, and reading the audit. It uses a plain http.Client; the
// load itself comes from vegeta.
type fleet struct {
	client  *http.Client
	token   string
	targets []string
	infos   []api.Info // one per target, same order
}

// survey asks every target for its info, and fails when one does not
// answer or has its admin routes off, since the lab cannot reset stock or
// pick a stage without them.
func survey(ctx context.Context, targets []string, token string, timeout time.Duration) (*fleet, error) {
	f := &fleet{client: &http.Client{Timeout: timeout}, token: token, targets: targets}
	for _, t := range targets {
		var in api.Info
		if err := f.do(ctx, http.MethodGet, t+"/api/v1/info", nil, &in); err != nil {
			return nil, fmt.Errorf("target %s: %w (is it running? `make run` starts the demo)", t, err)
		}
		if !in.Admin {
			return nil, fmt.Errorf("target %s has its admin routes off: start it with SECKILL_ADMIN_TOKEN set", t)
		}
		f.infos = append(f.infos, in)
	}
	return f, nil
}

// missing lists the targets that lack stage.
func (f *fleet) missing(stage string) []string {
	var out []string
	for i, in := range f.infos {
		if !slices.Contains(in.Stages, stage) {
			out = append(out, f.targets[i])
		}
	}
	return out
}

// instanceCount is the number of distinct instances behind the targets, as
// their info says. A target that is a load balancer counts once here; the
// attack's answers tell the true count.
func (f *fleet) instanceCount() int {
	seen := map[string]bool{}
	for _, in := range f.infos {
		seen[in.Instance] = true
	}
	return len(seen)
}

// instanceNames are the instances of the fleet: those the targets' info
// named, and those that answered (seen), which a load balancer in front
// can hide from the info.
func (f *fleet) instanceNames(seen map[string]bool) map[string]bool {
	own := maps.Clone(seen)
	if own == nil {
		own = map[string]bool{}
	}
	for _, in := range f.infos {
		own[in.Instance] = true
	}
	return own
}

// reset restocks the item through every target. They share one database,
// so one reset would do for the stock; asking each lets every instance drop
// whatever per-item state its stages keep.
func (f *fleet) reset(ctx context.Context, sc scenario, id int64, stock int) error {
	_, err := f.resetSale(ctx, sc, id, stock, time.Time{})
	return err
}

// saleReply is the part of a reset's answer (an api.Product or an
// api.Coupon) that says when the sale opens.
type saleReply struct {
	OpensAt    *time.Time `json:"opens_at"`
	ServerTime time.Time  `json:"server_time"`
}

// resetSale is reset with the sale opening at opensAt (zero: at once),
// and returns the first target's answer. The targets are asked at once:
// each instance's reset waits until no instance can still trust the item's
// old sold-out mark (about a second), and those waits overlap. A target
// whose reset failed beside the others is asked once more, alone, since
// concurrent resets of one row may meet in the database.
func (f *fleet) resetSale(ctx context.Context, sc scenario, id int64, stock int, opensAt time.Time) (saleReply, error) {
	b := map[string]any{"stock": stock}
	if !opensAt.IsZero() {
		b["opens_at"] = opensAt.UTC().Format(time.RFC3339Nano)
	}
	body, err := json.Marshal(b)
	if err != nil {
		return saleReply{}, err
	}
	replies := make([]saleReply, len(f.targets))
	errs := make([]error, len(f.targets))
	one := func(i int) {
		url := fmt.Sprintf("%s/api/v1/admin/%s/%d/reset", f.targets[i], sc.kind(), id)
		if err := f.do(ctx, http.MethodPost, url, body, &replies[i]); err != nil {
			errs[i] = fmt.Errorf("reset %s %d on %s: %w", sc.kind(), id, f.targets[i], err)
		}
	}
	var wg sync.WaitGroup
	for i := range f.targets {
		wg.Go(func() { one(i) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil && ctx.Err() == nil {
			errs[i] = nil
			one(i)
		}
		if errs[i] != nil {
			return saleReply{}, errs[i]
		}
	}
	return replies[0], nil
}

// clockOffset estimates how far the reference clock (the item's
// server_time, the database's) is ahead of the lab's: server_time minus
// the lab's instant halfway through the request. It asks a few times and
// keeps the answer of the quickest round trip, whose midpoint is the
// closest to the instant the server read its clock.
func (f *fleet) clockOffset(ctx context.Context, sc scenario, id int64) (time.Duration, error) {
	best, bestRTT := time.Duration(0), time.Duration(-1)
	for range 5 {
		var it saleReply
		before := time.Now()
		if err := f.do(ctx, http.MethodGet, fmt.Sprintf("%s/api/v1/%s/%d", f.targets[0], sc.kind(), id), nil, &it); err != nil {
			return 0, fmt.Errorf("reading the reference clock: %w", err)
		}
		rtt := time.Since(before)
		if bestRTT < 0 || rtt < bestRTT {
			best, bestRTT = it.ServerTime.Sub(before.Add(rtt/2)), rtt
		}
	}
	return best, nil
}

// audit reads the audit through every target; they must agree, or the
// targets do not share one store and no verdict can be drawn.
func (f *fleet) audit(ctx context.Context, sc scenario, id int64) (api.Audit, error) {
	var first api.Audit
	for i, t := range f.targets {
		a, err := f.auditOn(ctx, t, sc, id)
		if err != nil {
			return api.Audit{}, err
		}
		if i == 0 {
			first = a
		} else if !reflect.DeepEqual(a, first) {
			return api.Audit{}, fmt.Errorf("audits disagree: %s says %+v, %s says %+v; do the targets share one database?", f.targets[0], first, t, a)
		}
	}
	return first, nil
}

// auditOn reads the audit through one target.
func (f *fleet) auditOn(ctx context.Context, target string, sc scenario, id int64) (api.Audit, error) {
	var a api.Audit
	if err := f.do(ctx, http.MethodGet, fmt.Sprintf("%s/api/v1/%s/%d/audit", target, sc.kind(), id), nil, &a); err != nil {
		return api.Audit{}, fmt.Errorf("audit on %s: %w", target, err)
	}
	// The lab judges the counts; the last reconcile finding and the
	// record of dashboard bursts are not part of them (and, a pointer and
	// a slice, never compare equal).
	a.Reconcile, a.Bursts = nil, nil
	return a, nil
}

// settledAudit reads the audit until two reads a poll apart agree. After
// client-side timeouts the server may still be finishing requests the lab
// gave up on, and an audit taken mid-flight would judge a moving target.
func (f *fleet) settledAudit(ctx context.Context, sc scenario, id int64, within time.Duration) (api.Audit, error) {
	const poll = 250 * time.Millisecond
	deadline := time.Now().Add(within)
	prev, err := f.audit(ctx, sc, id)
	if err != nil {
		return api.Audit{}, err
	}
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return api.Audit{}, ctx.Err()
		case <-time.After(poll):
		}
		cur, err := f.audit(ctx, sc, id)
		if err != nil {
			return api.Audit{}, err
		}
		if reflect.DeepEqual(cur, prev) {
			return cur, nil
		}
		prev = cur
	}
	return prev, nil
}

// do sends one request with the admin token and decodes a 2xx JSON answer
// into out (when not nil).
func (f *fleet) do(ctx context.Context, method, url string, body []byte, out any) (err error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+f.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := resp.Body.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s answered %s: %s", method, url, resp.Status, bytes.TrimSpace(raw))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: decoding the answer: %w", method, url, err)
	}
	return nil
}

// residentMiB reads each target's resident memory from its /metrics
// (process_resident_memory_bytes), in MiB; nil when a target has no
// metrics.
func (f *fleet) residentMiB(ctx context.Context) []float64 {
	var out []float64
	for _, t := range f.targets {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, t+"/metrics", nil)
		if err != nil {
			return nil
		}
		resp, err := f.client.Do(req)
		if err != nil {
			return nil
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return nil
		}
		v, ok := gauge(string(b), "process_resident_memory_bytes")
		if !ok {
			return nil
		}
		out = append(out, v/(1<<20))
	}
	return out
}

// gauge finds an unlabelled sample in a Prometheus text exposition.
func gauge(text, name string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}
