package lock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// attempt tries to obtain once. It returns a lease, or the time after which
// the current holder's lease runs out, or an error that ends the wait.
type attempt func(ctx context.Context) (*Lease, time.Duration, error)

// subscriber registers wake for release messages of one lock and returns a
// channel that closes once enough subscriptions are confirmed that a release
// cannot go unheard (one Redis; a majority of RedLock's), and a cancel;
// cancel(true) lets the channel stay subscribed for a moment (see linger).
type subscriber func(ctx context.Context, wake chan struct{}) (<-chan struct{}, func(linger bool))

// minRecheck bounds how soon a waiter re-checks a lock whose remaining TTL
// Redis could not tell (it was just expiring).
const minRecheck = 2 * time.Millisecond

// waitFor runs try until it obtains the lock, wait runs out, or ctx ends.
// Between tries it sleeps until a release message arrives, the subscription
// is confirmed (a release published before then went unheard, so it looks
// again), or the holder's TTL would have run out (plus jitter), whichever
// is first: the timer is the fallback for a lost message or a holder that
// died without releasing.
//
// Waiters of one lock object on one key line up (see lineup): only the
// first of them asks Redis; the others wait for their turn. line is nil for
// a reentrant owner, who may hold the lock the line is waiting for, and for
// a fair waiter. recheck caps the sleep between tries (waitingRefresh, or
// fairRecheck for a fair waiter, whose place the keeper renews).
func waitFor(ctx context.Context, key string, wait time.Duration, hooks *Hooks, line *lineup, recheck time.Duration, try attempt, subscribe subscriber) (l *Lease, err error) {
	if wait <= 0 {
		l, _, err = try(ctx)
		if l != nil || err != nil {
			return l, orCtxErr(ctx, key, err)
		}
		return nil, fmt.Errorf("%w: %q is held", ErrNotObtained, key)
	}
	// The wait counts from the start, so that Obtain returns within about
	// Wait plus one try.
	start := time.Now()
	deadline := start.Add(wait)
	wakeups := 0
	waited := false
	defer func() {
		if waited {
			hooks.waited(key, time.Since(start), wakeups)
		}
	}()
	stillHeld := func() error {
		return fmt.Errorf("%w: %q still held after waiting %v", ErrNotObtained, key, wait)
	}

	if turn, leave := line.join(key); turn != nil {
		defer leave()
		select {
		case <-turn:
		default:
			waited = true
			timer := time.NewTimer(time.Until(deadline))
			select {
			case <-turn:
				timer.Stop()
			case <-timer.C:
				return nil, stillHeld()
			case <-ctx.Done():
				timer.Stop()
				return nil, notObtainedCtx(ctx, key)
			}
		}
	}
	l, retry, err := try(ctx)
	if l != nil || err != nil {
		return l, orCtxErr(ctx, key, err)
	}
	waited = true
	if !time.Now().Before(deadline) {
		return nil, stillHeld()
	}

	wake := make(chan struct{}, 1)
	ready, cancel := subscribe(ctx, wake)
	// A waiter that got the lock leaves the channel subscribed for a moment,
	// since more contention usually follows; one that gave up leaves none.
	defer func() { cancel(l != nil) }()

	timer := time.NewTimer(recheckAfter(retry, deadline, recheck))
	defer timer.Stop()
	for {
		select {
		case <-wake:
			wakeups++
		case <-ready:
			ready = nil // fires once
		case <-timer.C:
		case <-ctx.Done():
			return nil, notObtainedCtx(ctx, key)
		}
		l, retry, err = try(ctx)
		if l != nil || err != nil {
			return l, orCtxErr(ctx, key, err)
		}
		if !time.Now().Before(deadline) {
			return nil, stillHeld()
		}
		timer.Reset(recheckAfter(retry, deadline, recheck))
	}
}

// lineup queues the waiters of one Client or RedLock by key, from their
// arrival. Only the first in line asks Redis; when it leaves (with the lock,
// or giving up) the next takes its place. A burst of hundreds of buyers of one item thus costs
// Redis a few tries per handoff (one per process) instead of one per buyer,
// and the process's pool is not drained by tries that cannot win: under a
// burst on a busy machine, those tries were what kept every call timing
// out. It also makes the wait first-come, first-served within a process.
type lineup struct {
	mu sync.Mutex
	m  map[string][]chan struct{} // per key, first in line first; its channel is closed
}

// join puts a waiter in line for key. turn is closed when it is first;
// leave takes it out of line and hands the turn on. A nil lineup returns
// a nil turn.
func (u *lineup) join(key string) (turn <-chan struct{}, leave func()) {
	if u == nil {
		return nil, nil
	}
	t := make(chan struct{})
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = make(map[string][]chan struct{})
	}
	if len(u.m[key]) == 0 {
		close(t)
	}
	u.m[key] = append(u.m[key], t)
	return t, func() { u.leave(key, t) }
}

func (u *lineup) leave(key string, t chan struct{}) {
	u.mu.Lock()
	defer u.mu.Unlock()
	q := u.m[key]
	i := slices.Index(q, t)
	if i < 0 {
		return
	}
	q = slices.Delete(q, i, i+1)
	if len(q) == 0 {
		delete(u.m, key)
		return
	}
	if i == 0 {
		close(q[0])
	}
	u.m[key] = q
}

// orCtxErr reports a failed try as "not obtained" when it failed because ctx
// ended.
func orCtxErr(ctx context.Context, key string, err error) error {
	if err != nil && ctx.Err() != nil && !errors.Is(err, ErrNotObtained) {
		return notObtainedCtx(ctx, key)
	}
	return err
}

func notObtainedCtx(ctx context.Context, key string) error {
	return fmt.Errorf("%w: waiting for %q: %w", ErrNotObtained, key, ctx.Err())
}

// recheckAfter is the fallback sleep: the holder's remaining TTL plus up to
// 10% jitter (so waiters do not all re-check at once), capped at limit
// (waitingRefresh: each try that finds the lock held renews the waiting
// record, which makes releases publish) and at the deadline.
func recheckAfter(remaining time.Duration, deadline time.Time, limit time.Duration) time.Duration {
	if remaining < minRecheck {
		remaining = minRecheck
	}
	d := min(remaining+rand.N(remaining/10+time.Millisecond), limit)
	if left := time.Until(deadline); d > left {
		d = max(left, 0)
	}
	return d
}
