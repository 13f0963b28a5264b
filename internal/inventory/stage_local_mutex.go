package inventory

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Stage "local-mutex": the critical section under a per-item mutex held in
// this process's memory.
//
// One process can no longer oversell: its buyers take turns. But the mutex
// lives in one process, so a second instance behind the load balancer has a
// mutex of its own and the two instances race exactly as "unlocked" does.
// The next stage moves the lock out of the process, into Redis.

// NewLocalMutex returns the local-mutex stage. Each call has its own
// mutexes, as each process would.
func NewLocalMutex(store SectionStore, kind string, opts SectionOptions) Stage {
	return NewGuarded(&mutexGuard{}, store, kind, opts)
}

// mutexGuard keeps one mutex per key. A mutex is a one-slot channel so that
// a waiting buyer can give up when its request is cancelled.
type mutexGuard struct{ keys sync.Map } // key -> chan struct{}

func (g *mutexGuard) Enter(ctx context.Context, key string, by time.Time) (Held, error) {
	ch, _ := g.keys.LoadOrStore(key, make(chan struct{}, 1))
	slot := ch.(chan struct{})
	var timeout <-chan time.Time
	if !by.IsZero() {
		t := time.NewTimer(time.Until(by))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case slot <- struct{}{}:
		return mutexHold(slot), nil
	case <-timeout:
		return nil, fmt.Errorf("%w: %s: buyers ahead on this instance still held it", ErrLockTimeout, key)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type mutexHold chan struct{}

func (mutexHold) Token() int64 { return 0 }

func (mutexHold) Context(ctx context.Context) context.Context { return ctx }

func (mutexHold) Err() error { return nil }

func (h mutexHold) Exit(context.Context) error {
	<-h
	return nil
}
