// Package fleet talks to the instances under test outside the attack:
// what they are and which stages they have, resetting an item's stock and
// its sale's opening, reading the audit (and waiting for it to settle),
// the orders a queued stage accepted, their rate limits, and their
// /metrics. It uses a plain http.Client; the load itself comes from
// vegeta, in the scenarios.
package fleet

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

// Item is one item of the sale: a product, or a coupon batch.
type Item struct {
	Coupon bool
	ID     int64
}

// kind is the path segment of the item's routes.
func (it Item) kind() string {
	if it.Coupon {
		return "coupons"
	}
	return "products"
}

// Fleet talks to the targets outside the attack: which stages they have,
// resetting stock, and reading the audit. It uses a plain http.Client; the
// load itself comes from vegeta.
type Fleet struct {
	client  *http.Client
	token   string
	Targets []string
	Infos   []api.Info // one per target, same order
}

// Survey asks every target for its info, and fails when one does not
// answer or has its admin routes off, since the lab cannot reset stock or
// pick a stage without them.
func Survey(ctx context.Context, targets []string, token string, timeout time.Duration) (*Fleet, error) {
	f := &Fleet{client: &http.Client{Timeout: timeout}, token: token, Targets: targets}
	for _, t := range targets {
		var in api.Info
		if err := f.Do(ctx, http.MethodGet, t+"/api/v1/info", nil, &in); err != nil {
			return nil, fmt.Errorf("target %s: %w (is it running? `make run` starts the demo)", t, err)
		}
		if !in.Admin {
			return nil, fmt.Errorf("target %s has its admin routes off: start it with SECKILL_ADMIN_TOKEN set", t)
		}
		f.Infos = append(f.Infos, in)
	}
	return f, nil
}

// Missing lists the targets that lack stage.
func (f *Fleet) Missing(stage string) []string {
	var out []string
	for i, in := range f.Infos {
		if !slices.Contains(in.Stages, stage) {
			out = append(out, f.Targets[i])
		}
	}
	return out
}

// InstanceCount is the number of distinct instances behind the targets, as
// their info says. A target that is a load balancer counts once here; the
// attack's answers tell the true count.
func (f *Fleet) InstanceCount() int {
	seen := map[string]bool{}
	for _, in := range f.Infos {
		seen[in.Instance] = true
	}
	return len(seen)
}

// InstanceNames are the instances of the fleet: those the targets' info
// named, and those that answered (seen), which a load balancer in front
// can hide from the info.
func (f *Fleet) InstanceNames(seen map[string]bool) map[string]bool {
	own := maps.Clone(seen)
	if own == nil {
		own = map[string]bool{}
	}
	for _, in := range f.Infos {
		own[in.Instance] = true
	}
	return own
}

// Reset restocks the item through every target. They share one database,
// so one reset would do for the stock; asking each lets every instance drop
// whatever per-item state its stages keep.
func (f *Fleet) Reset(ctx context.Context, it Item, stock int) error {
	_, err := f.ResetSale(ctx, it, stock, time.Time{})
	return err
}

// SaleReply is the part of a reset's answer (an api.Product or an
// api.Coupon) that says when the sale opens.
type SaleReply struct {
	OpensAt    *time.Time `json:"opens_at"`
	ServerTime time.Time  `json:"server_time"`
}

// ResetSale is reset with the sale opening at opensAt (zero: at once),
// and returns the first target's answer. The targets are asked at once:
// each instance's reset waits until no instance can still trust the item's
// old sold-out mark (about a second), and those waits overlap. A target
// whose reset failed beside the others is asked once more, alone, since
// concurrent resets of one row may meet in the database.
func (f *Fleet) ResetSale(ctx context.Context, it Item, stock int, opensAt time.Time) (SaleReply, error) {
	b := map[string]any{"stock": stock}
	if !opensAt.IsZero() {
		b["opens_at"] = opensAt.UTC().Format(time.RFC3339Nano)
	}
	body, err := json.Marshal(b)
	if err != nil {
		return SaleReply{}, err
	}
	replies := make([]SaleReply, len(f.Targets))
	errs := make([]error, len(f.Targets))
	one := func(i int) {
		url := fmt.Sprintf("%s/api/v1/admin/%s/%d/reset", f.Targets[i], it.kind(), it.ID)
		if err := f.Do(ctx, http.MethodPost, url, body, &replies[i]); err != nil {
			errs[i] = fmt.Errorf("reset %s %d on %s: %w", it.kind(), it.ID, f.Targets[i], err)
		}
	}
	var wg sync.WaitGroup
	for i := range f.Targets {
		wg.Go(func() { one(i) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil && ctx.Err() == nil {
			errs[i] = nil
			one(i)
		}
		if errs[i] != nil {
			return SaleReply{}, errs[i]
		}
	}
	return replies[0], nil
}

// ClockOffset estimates how far the reference clock (the item's
// server_time, the database's) is ahead of the lab's: server_time minus
// the lab's instant halfway through the request. It asks a few times and
// keeps the answer of the quickest round trip, whose midpoint is the
// closest to the instant the server read its clock.
func (f *Fleet) ClockOffset(ctx context.Context, it Item) (time.Duration, error) {
	best, bestRTT := time.Duration(0), time.Duration(-1)
	for range 5 {
		var reply SaleReply
		before := time.Now()
		if err := f.Do(ctx, http.MethodGet, fmt.Sprintf("%s/api/v1/%s/%d", f.Targets[0], it.kind(), it.ID), nil, &reply); err != nil {
			return 0, fmt.Errorf("reading the reference clock: %w", err)
		}
		rtt := time.Since(before)
		if bestRTT < 0 || rtt < bestRTT {
			best, bestRTT = reply.ServerTime.Sub(before.Add(rtt/2)), rtt
		}
	}
	return best, nil
}

// ErrAuditsDisagree is Audit's error when two targets' audits of an item
// differ.
var ErrAuditsDisagree = errors.New("audits disagree")

// Audit reads the audit through every target; they must agree, or the
// targets do not share one store and no verdict can be drawn.
func (f *Fleet) Audit(ctx context.Context, it Item) (api.Audit, error) {
	var first api.Audit
	for i, t := range f.Targets {
		a, err := f.AuditOn(ctx, t, it)
		if err != nil {
			return api.Audit{}, err
		}
		if i == 0 {
			first = a
		} else if !reflect.DeepEqual(a, first) {
			return api.Audit{}, fmt.Errorf("%w: %s says %+v, %s says %+v; do the targets share one database?", ErrAuditsDisagree, f.Targets[0], first, t, a)
		}
	}
	return first, nil
}

// AuditOn reads the audit through one target.
func (f *Fleet) AuditOn(ctx context.Context, target string, it Item) (api.Audit, error) {
	var a api.Audit
	if err := f.Do(ctx, http.MethodGet, fmt.Sprintf("%s/api/v1/%s/%d/audit", target, it.kind(), it.ID), nil, &a); err != nil {
		return api.Audit{}, fmt.Errorf("audit on %s: %w", target, err)
	}
	// The lab judges the counts; the last reconcile finding and the
	// record of dashboard bursts are not part of them (and, a pointer and
	// a slice, never compare equal).
	a.Reconcile, a.Bursts = nil, nil
	return a, nil
}

// SettledAudit reads the audit until two reads a poll apart agree. After
// client-side timeouts the server may still be finishing requests the lab
// gave up on, and an audit taken mid-flight would judge a moving target.
func (f *Fleet) SettledAudit(ctx context.Context, it Item, within time.Duration) (api.Audit, error) {
	const poll = 250 * time.Millisecond
	deadline := time.Now().Add(within)
	prev, err := f.Audit(ctx, it)
	if err != nil {
		return api.Audit{}, err
	}
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return api.Audit{}, ctx.Err()
		case <-time.After(poll):
		}
		cur, err := f.Audit(ctx, it)
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

// Do sends one request with the admin token and decodes a 2xx JSON answer
// into out (when not nil).
func (f *Fleet) Do(ctx context.Context, method, url string, body []byte, out any) (err error) {
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

// ResidentMiB reads each target's resident memory from its /metrics
// (process_resident_memory_bytes), in MiB; nil when a target has no
// metrics.
func (f *Fleet) ResidentMiB(ctx context.Context) []float64 {
	var out []float64
	for _, t := range f.Targets {
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
