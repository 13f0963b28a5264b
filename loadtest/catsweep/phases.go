package main

import (
	"context"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"sync"
	"time"
)

// adminToken is the sweep's instances' admin token (SECKILL_ADMIN_TOKEN).
const adminToken = "catsweep"

// The idle phases a row belongs to.
const (
	phaseIdle  = "idle"
	phaseAfter = "after bursts"
)

// sizeRun is one catalogue size: a row per instance and phase, and the
// bursts between the phases.
type sizeRun struct {
	Items  int           `json:"items"`
	Points []point       `json:"rows"`
	Bursts []burstResult `json:"bursts,omitempty"`
}

// runSize times every instance until ready, measures the idle window
// and, with -bursts, bursts K random products, waits o.after and
// measures the idle window again.
func runSize(ctx context.Context, o options, base point, f *fleet) (sizeRun, error) {
	run := sizeRun{Items: base.Items}
	rows := readiness(ctx, o, base, f)
	for _, r := range rows {
		if r.Exited != "" {
			return sizeRun{Items: base.Items, Points: rows}, nil
		}
	}
	if err := sleep(ctx, o.settle); err != nil {
		return run, err
	}
	idle, err := measureWindow(ctx, f, o.window)
	if err != nil {
		return run, err
	}
	run.Points = withIdle(rows, idle, phaseIdle)
	if o.bursts == 0 {
		return run, nil
	}
	b := burster{urls: f.allURLs(), token: adminToken, stock: o.burstStock, buyers: o.burstBuyers, inFlight: o.inFlight,
		settle: 30 * time.Second, orders: sqlOrders(f.db),
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: o.inFlight}}}
	ids := pickProducts(rand.New(rand.NewSource(o.seed+int64(base.Items))), base.Items, o.bursts)
	if run.Bursts, err = b.run(ctx, ids, fmt.Sprintf("cs%d-%d", o.seed, base.Items)); err != nil {
		return run, err
	}
	if err := sleep(ctx, o.after); err != nil {
		return run, err
	}
	after, err := measureWindow(ctx, f, o.window)
	if err != nil {
		return run, err
	}
	run.Points = append(run.Points, withIdle(rows, after, phaseAfter)...)
	return run, nil
}

// readiness times each instance until ready, side by side.
func readiness(ctx context.Context, o options, base point, f *fleet) []point {
	rows := make([]point, len(f.procs))
	var wg sync.WaitGroup
	for i, p := range f.procs {
		wg.Add(1)
		go func(i int, p *proc) {
			defer wg.Done()
			r := base
			r.Instance = f.names[i]
			took, ready := waitReady(ctx, p, f.urls[i], o.readyTimeout)
			r.ReadySeconds, r.Ready = took.Seconds(), ready
			select {
			case <-p.exited:
				r.Exited, r.Ready = lastError(p.log.Name()), false
			default:
			}
			rows[i] = r
		}(i, p)
	}
	wg.Wait()
	return rows
}

// withIdle is rows with each instance's idle cost of one phase.
func withIdle(rows []point, idle []idle, phase string) []point {
	out := make([]point, len(rows))
	for i, r := range rows {
		r.Phase, r.Idle = phase, idle[i]
		out[i] = r
	}
	return out
}

// measureWindow samples every instance and the Redis at both ends of a
// window: one idle per instance, the Redis's figures in each (the total,
// and the total split over the instances).
func measureWindow(ctx context.Context, f *fleet, window time.Duration) ([]idle, error) {
	pb, rb, err := sampleFleet(ctx, f)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	if err := sleep(ctx, window); err != nil {
		return nil, err
	}
	pa, ra, err := sampleFleet(ctx, f)
	if err != nil {
		return nil, err
	}
	took := time.Since(began)
	out := make([]idle, len(f.procs))
	for i := range f.procs {
		out[i] = idleOver(took, pb[i], pa[i], os.Getpagesize(), rb, ra, len(f.procs))
	}
	return out, nil
}

// sampleFleet reads every instance's /proc and the Redis's INFO.
func sampleFleet(ctx context.Context, f *fleet) ([]procSample, *redisSample, error) {
	var ps []procSample
	for _, p := range f.procs {
		s, err := readProc(p.pid())
		if err != nil {
			return nil, nil, err
		}
		ps = append(ps, s)
	}
	r, err := readRedis(ctx, f.rdb)
	return ps, r, err
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
