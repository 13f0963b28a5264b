package main

import (
	"context"
	"time"
)

// background is one instance's background work (the order writers, the
// reconcile and payment-timeout jobs, the restock announcements): each
// job runs until stop, which cancels the jobs and waits for them, in
// reverse order of start.
type background struct {
	stops []func()
}

// run runs f until stop.
func (bg *background) run(f func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f(ctx) }()
	bg.stops = append(bg.stops, func() { cancel(); <-done })
}

// every runs f once every period until stop.
func (bg *background) every(period time.Duration, f func(ctx context.Context)) {
	bg.run(func(ctx context.Context) {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				f(ctx)
			}
		}
	})
}

// stop cancels every job and waits for it, the last started first.
func (bg *background) stop() {
	for i := len(bg.stops) - 1; i >= 0; i-- {
		bg.stops[i]()
	}
	bg.stops = nil
}
