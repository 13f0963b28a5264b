// Package story fires one burst per stage, in teaching order, against a
// running seckill fleet and tells what happened: which stages oversold and
// which sold exactly their stock. It is the one-minute tour behind
// `seckill story`; it drives the fleet only through its HTTP API (reset,
// the dashboard's burst, the audit), so it works the same against the demo
// and against a compose fleet.
package story

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/seckill-lab/seckill/internal/api"
	"github.com/seckill-lab/seckill/internal/inventory"
)

// Options say where the fleet is and what to fire.
type Options struct {
	// URL is a base URL that serves the API: the demo's front page, nginx,
	// or one instance.
	URL string
	// Token is the admin token (reset and burst are admin routes).
	Token string
	// ProductID is the product the story resets and sells.
	ProductID int64
	// Stock is what the product is reset to before each burst.
	Stock int
	// Buyers is the number of buyers fired at once in each burst.
	Buyers int
	// Stages, when set, are the stages to run, in this order (each once);
	// each must be one the fleet runs. Empty means every stage the fleet
	// runs, in teaching order.
	Stages []string
	// Client is the HTTP client; nil means a default one.
	Client *http.Client
	// Progress receives a line as each burst starts and ends.
	Progress io.Writer
	// Tick is how often a running burst reports it is still running.
	// Zero means every two seconds.
	Tick time.Duration
}

// Row is one stage's chapter of the story.
type Row struct {
	Stage    string `json:"stage"`
	Stock    int    `json:"stock"`
	Sold     int    `json:"sold"`
	Oversold int    `json:"oversold"`
	// Conserved is the audit's: every unit that left the stock is in
	// exactly one order. Lost updates break it without overselling.
	Conserved bool    `json:"conserved"`
	PerSec    float64 `json:"answered_per_sec"`
	P99MS     float64 `json:"p99_ms"`
	// BuyerP99MS is the p99 of buyer time: from the burst's start, when
	// every buyer arrived, rather than from each request's send.
	BuyerP99MS float64 `json:"buyer_p99_ms"`
	// Unsafe stages are expected to oversell; the lesson is that they do.
	Unsafe  bool             `json:"unsafe"`
	Verdict string           `json:"verdict"`
	Counts  api.BurstCounts  `json:"counts"`
	Result  *api.BurstResult `json:"-"`
	Audit   *api.Audit       `json:"-"`
}

// Exact reports whether the stage sold its whole stock, not one unit more,
// and accounted for every unit.
func (r Row) Exact() bool { return r.Oversold == 0 && r.Sold == r.Stock && r.Conserved }

// unsafe are the stages the story shows failing.
var unsafe = []string{inventory.StageUnlocked, inventory.StageLocalMutex}

// ErrSafeStageOversold means a stage that must never oversell did, or lost
// track of a unit (not conserved): a bug in the stage (or in the fleet's
// set-up), not a lesson.
var ErrSafeStageOversold = errors.New("a safe stage oversold or lost a unit")

// ErrBurstInProgress means the fleet refused the story's reset or burst
// because another burst of the product was in flight (409
// burst-in-progress): another story, or the dashboard, is selling it. The
// two would have mixed their buyers and reported numbers that are
// neither's, so the story stops.
var ErrBurstInProgress = errors.New("another burst of this product is running on the fleet (another `seckill story`, or the dashboard's burst), and the two would mix their numbers: run the story again when it is over, or choose another -product")

// Run tells the story: for each stage, reset the product, fire the burst,
// wait for any queued orders to be written, and read the audit. It returns
// the rows it finished; an error stops it. Rows of safe stages that
// oversold are returned with an error wrapping ErrSafeStageOversold.
func Run(ctx context.Context, o Options) ([]Row, error) {
	c := newClient(o)
	fleet, err := c.fleet(ctx)
	if err != nil {
		return nil, err
	}
	offered := fleetStages(fleet)
	stages := offered
	if len(o.Stages) > 0 {
		stages = nil
		for _, st := range o.Stages {
			if !slices.Contains(offered, st) {
				return nil, fmt.Errorf("stage %q is not one this fleet runs (it runs: %s)", st, strings.Join(offered, ", "))
			}
			if !slices.Contains(stages, st) {
				stages = append(stages, st)
			}
		}
	}
	if len(stages) == 0 {
		return nil, fmt.Errorf("%s lists no stage (GET /api/v1/fleet): is every instance down?", o.URL)
	}
	for _, p := range fleet.Peers {
		if !p.Healthy || !p.Ready {
			fmt.Fprintf(c.o.Progress, "note: instance %s (%s) is not ready: the buyers sent to it get no answer, and a stage may sell less than its stock\n", p.Instance, p.URL)
		}
	}
	if o.Buyers > fleet.BurstMax && fleet.BurstMax > 0 {
		return nil, fmt.Errorf("%d buyers is more than this fleet's burst limit, %d (SECKILL_BURST_MAX)", o.Buyers, fleet.BurstMax)
	}
	var rows []Row
	var bad []string
	for i, stage := range stages {
		row, err := c.chapter(ctx, i+1, len(stages), stage)
		if err != nil {
			return rows, fmt.Errorf("%s: %w", stage, err)
		}
		rows = append(rows, row)
		if !row.Unsafe && (row.Oversold > 0 || !row.Conserved) {
			bad = append(bad, stage)
		}
	}
	if len(bad) > 0 {
		return rows, fmt.Errorf("%w: %s", ErrSafeStageOversold, strings.Join(bad, ", "))
	}
	return rows, nil
}

// fleetStages is the stages every answering instance can run, in the
// order the first one lists them (teaching order).
func fleetStages(f api.Fleet) []string {
	var out []string
	first := true
	for _, p := range f.Peers {
		if len(p.Stages) == 0 {
			continue
		}
		if first {
			out, first = slices.Clone(p.Stages), false
			continue
		}
		out = slices.DeleteFunc(out, func(s string) bool { return !slices.Contains(p.Stages, s) })
	}
	return out
}

type client struct {
	o    Options
	http *http.Client
}

func newClient(o Options) *client {
	o.URL = strings.TrimRight(o.URL, "/")
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Tick <= 0 {
		o.Tick = 2 * time.Second
	}
	hc := o.Client
	if hc == nil {
		hc = &http.Client{}
	}
	return &client{o: o, http: hc}
}

// chapter is one stage: reset, burst, drain, audit.
func (c *client) chapter(ctx context.Context, i, n int, stage string) (Row, error) {
	if err := c.call(ctx, http.MethodPost, fmt.Sprintf("/api/v1/admin/products/%d/reset", c.o.ProductID), map[string]int{"stock": c.o.Stock}, nil); err != nil {
		return Row{}, fmt.Errorf("reset: %w", err)
	}
	fmt.Fprintf(c.o.Progress, "[%d/%d] %-12s %d buyers at once for %d units…\n", i, n, stage, c.o.Buyers, c.o.Stock)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(c.o.Tick)
		defer t.Stop()
		began := time.Now()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(c.o.Progress, "      %-12s still selling, %s in\n", stage, time.Since(began).Round(time.Second))
			}
		}
	}()
	var res api.BurstResult
	err := c.call(ctx, http.MethodPost, "/api/v1/admin/burst", api.BurstRequest{Kind: "product", ItemID: c.o.ProductID, N: c.o.Buyers, Stage: stage}, &res)
	close(done)
	if err != nil {
		return Row{}, fmt.Errorf("burst: %w", err)
	}
	a, err := c.settled(ctx, res.Audit)
	if err != nil {
		return Row{}, err
	}
	row := Row{
		Stage: stage, Stock: a.InitialStock, Sold: a.Sold, Oversold: a.Oversold, Conserved: a.Conserved,
		P99MS: res.Latency.P99, BuyerP99MS: res.BuyerLatency.P99, Unsafe: slices.Contains(unsafe, stage),
		Counts: res.Counts, Result: &res, Audit: &a,
	}
	if res.ElapsedMS > 0 {
		// Answered: every buyer who got an HTTP answer, whatever it said.
		row.PerSec = float64(res.Request.N-res.Counts.Failed) / (res.ElapsedMS / 1000)
	}
	row.Verdict = verdict(row)
	fmt.Fprintf(c.o.Progress, "      %-12s %s\n", stage, row.Verdict)
	return row, nil
}

// settled waits until no order of the burst is still queued (redis-stream
// answers 202 and writes later), then returns the audit.
func (c *client) settled(ctx context.Context, a *api.Audit) (api.Audit, error) {
	path := fmt.Sprintf("/api/v1/products/%d/audit", c.o.ProductID)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if a != nil && a.PendingOrders == 0 {
			return *a, nil
		}
		if time.Now().After(deadline) {
			return api.Audit{}, fmt.Errorf("%d orders were still queued after 30s (is the stream's writer running?)", a.PendingOrders)
		}
		select {
		case <-ctx.Done():
			return api.Audit{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		var next api.Audit
		if err := c.call(ctx, http.MethodGet, path, nil, &next); err != nil {
			return api.Audit{}, fmt.Errorf("audit: %w", err)
		}
		a = &next
	}
}

// verdict says in plain words what a row shows.
func verdict(r Row) string {
	var s string
	switch {
	case r.Oversold > 0:
		s = fmt.Sprintf("OVERSOLD: %d units sold that did not exist", r.Oversold)
	case !r.Conserved:
		s = fmt.Sprintf("LOST UPDATES: %d sold, but the stock does not account for them (not conserved)", r.Sold)
	case r.Unsafe:
		s = fmt.Sprintf("no oversell this time (%d of %d sold): the race is luck, try again", r.Sold, r.Stock)
	case r.Exact():
		s = "exact: sold out, nothing oversold"
	default:
		s = fmt.Sprintf("safe, but %d of %d units left unsold", r.Stock-r.Sold, r.Stock)
	}
	var notes []string
	if n := r.Counts.LockTimeout; n > 0 && !r.Exact() {
		notes = append(notes, fmt.Sprintf("%d lock timeouts", n))
	}
	if n := r.Counts.Overloaded; n > 0 && !r.Exact() {
		notes = append(notes, fmt.Sprintf("%d overloaded", n))
	}
	if n := r.Counts.ServerErrors; n > 0 {
		notes = append(notes, fmt.Sprintf("%d server errors", n))
	}
	if n := r.Counts.Failed; n > 0 {
		notes = append(notes, fmt.Sprintf("%d without an answer", n))
	}
	if len(notes) > 0 {
		s += " (" + strings.Join(notes, ", ") + ")"
	}
	return s
}

// fleet reads GET /api/v1/fleet, which also proves the URL serves seckill.
func (c *client) fleet(ctx context.Context) (api.Fleet, error) {
	var f api.Fleet
	if err := c.call(ctx, http.MethodGet, "/api/v1/fleet", nil, &f); err != nil {
		return f, err
	}
	return f, nil
}

// call sends one request with the admin token and decodes a 2xx answer
// into out; any other answer is an error carrying its problem title.
func (c *client) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.o.URL+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+c.o.Token)
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var p api.Problem
		if json.Unmarshal(raw, &p) == nil && p.Type == api.ProblemTypePrefix+"burst-in-progress" {
			return fmt.Errorf("%s %s: %s: %w", method, path, resp.Status, ErrBurstInProgress)
		}
		if json.Unmarshal(raw, &p) == nil && p.Title != "" {
			return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(p.Title+". "+p.Detail))
		}
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	return nil
}

// Table writes the rows as an aligned text table.
func Table(w io.Writer, rows []Row) {
	fmt.Fprintf(w, "%-13s %10s %9s %11s %9s %13s  %s\n", "stage", "sold", "oversold", "answered/s", "p99 ms", "buyer p99 ms", "verdict")
	for _, r := range rows {
		fmt.Fprintf(w, "%-13s %10s %9d %11.0f %9.1f %13.1f  %s\n", r.Stage, fmt.Sprintf("%d/%d", r.Sold, r.Stock), r.Oversold, r.PerSec, r.P99MS, r.BuyerP99MS, r.Verdict)
	}
}
