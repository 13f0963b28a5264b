package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// backend is what a Lease needs from the lock that issued it: a Client for
// one Redis, or a RedLock for a quorum.
type backend interface {
	// refresh extends the lock to ttl; it returns an error matching
	// ErrLockLost when the lock is no longer ours.
	refresh(ctx context.Context, ttl time.Duration) error
	// release gives back this hold; it returns an error matching ErrLockLost
	// when the lock had expired or been taken. It must run even when ctx is
	// cancelled.
	release(ctx context.Context) error
}

// errReleased is what Err reports after a clean Release.
var errReleased = fmt.Errorf("%w: released", ErrNotHeld)

// Lease is one hold of a lock. Its methods are safe for concurrent use.
//
// A lease is valid until its local validity deadline: the time the last
// successful obtain or renewal was sent, plus the TTL, minus a drift
// allowance (1% of the TTL plus 2 ms). Redis expires the key no earlier,
// so the holder stops trusting the lease before anyone else can get it.
type Lease struct {
	key     string
	token   int64
	backend backend
	hooks   *Hooks

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}

	mu       sync.Mutex
	ttl      time.Duration
	deadline time.Time   // local validity deadline, monotonic
	expiry   *time.Timer // reports the loss at deadline
	err      error       // why the lease ended; set once, with done closed
	released bool
	losing   bool // lose has claimed the lease and is running the Lost hook

	// The watchdog is a timer, not a goroutine: a short critical section
	// never starts one. renewing is held for the whole of a renewal, so
	// Release can wait for one in flight.
	renewal  *time.Timer // nil for a Fixed lease
	watching bool        // renewal may be (re)armed
	renewing sync.Mutex
	unwatch  func() bool // deregisters the context hook that stops renewals
}

func newLease(ctx context.Context, key string, token int64, b backend, ttl time.Duration, sent time.Time, watchdog bool, hooks *Hooks) *Lease {
	l := &Lease{
		key:      key,
		token:    token,
		backend:  b,
		hooks:    hooks,
		done:     make(chan struct{}),
		ttl:      ttl,
		deadline: sent.Add(ttl - drift(ttl)),
	}
	l.ctx, l.cancel = context.WithCancelCause(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expiry = time.AfterFunc(time.Until(l.deadline), l.expire)
	if watchdog {
		l.watching = true
		l.renewal = time.AfterFunc(ttl/3, func() { l.renew(ctx) })
		// Stop renewing once the lease's context ends: the holder's context
		// ended, or the lease was released or lost.
		l.unwatch = context.AfterFunc(l.ctx, l.stopWatching)
	}
	return l
}

// Key returns the key the lease holds, without the prefix.
func (l *Lease) Key() string { return l.key }

// Token returns the fencing token: it is larger than the token of every
// earlier lease on the same key. Send it with every write the lock guards
// and let the store reject writes with a token older than one it has seen.
// Re-entered holds share the token of the first hold.
func (l *Lease) Token() int64 { return l.token }

// Done returns a channel that is closed when the lease ends: when it is
// lost (then Err matches ErrLockLost) or released (then Err matches
// ErrNotHeld). A lost lease is reported no later than its validity deadline.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err returns nil while the lease is held. Once Done is closed it returns
// why: an error matching ErrLockLost if the lease was lost, or ErrNotHeld
// after a Release.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Context returns a context for the critical section. It is cancelled when
// the lease ends (context.Cause then returns the Err value) or when the
// context passed to Obtain ends.
func (l *Lease) Context() context.Context { return l.ctx }

// Deadline returns the local validity deadline: the lease must not be
// trusted after it. Renewals move it forward.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Refresh sets the lease's TTL to ttl from now; the watchdog then renews
// with that ttl. (While the owner holds a re-entered lock more than once,
// Redis keeps the longest TTL of its holds.) It returns an error matching ErrLockLost when the lock is no
// longer held, which also ends the lease, and ErrNotHeld after Release.
func (l *Lease) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := checkArgs(l.key, ttl); err != nil {
		return err
	}
	l.mu.Lock()
	released, lost := l.released, l.err
	l.mu.Unlock()
	switch {
	case released:
		return fmt.Errorf("%w: refresh of %q after release", ErrNotHeld, l.key)
	case lost != nil:
		return lost
	}
	sent := time.Now()
	err := l.backend.refresh(ctx, ttl)
	switch {
	case err == nil:
		l.extend(sent, ttl)
	case errors.Is(err, ErrLockLost):
		l.lose(err)
	}
	return err
}

// Release gives the hold back and wakes waiters. It runs with the caller's
// values but without its cancellation, bounded by Options.ReleaseTimeout, so
// a cancelled request still releases its lock.
//
// Release returns nil when the hold was given back; an error matching
// ErrLockLost when the lease had already expired, been taken or been
// reported lost (the critical section may have overlapped with another
// holder); ErrNotHeld when this lease was already released, in which case
// nothing is sent to Redis. Other errors come from Redis; the key then
// expires at its TTL.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return fmt.Errorf("%w: %q released twice", ErrNotHeld, l.key)
	}
	l.released = true
	l.mu.Unlock()
	if l.unwatch != nil {
		l.unwatch() // stop it here, rather than in a goroutine when ctx ends
	}
	l.stopWatching()
	l.renewing.Lock() // wait for a renewal in flight: none may race the delete
	l.renewing.Unlock()

	err := l.backend.release(ctx)
	if errors.Is(err, ErrLockLost) {
		l.lose(err)
	}
	l.end(errReleased)
	if lost := l.Err(); errors.Is(lost, ErrLockLost) {
		return lost
	}
	return err
}

// extend moves the validity deadline after a renewal that was sent at sent.
func (l *Lease) extend(sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return // too late: the loss has been reported
	}
	// Set, not just move forward: a Refresh with a shorter ttl shortens the
	// key in Redis too.
	l.ttl = ttl
	l.deadline = sent.Add(ttl - drift(ttl))
	l.expiry.Reset(time.Until(l.deadline))
}

// expire runs at the validity deadline unless a renewal moved it.
func (l *Lease) expire() {
	l.mu.Lock()
	early := time.Now().Before(l.deadline)
	l.mu.Unlock()
	if early {
		return // a renewal moved the deadline after the timer fired
	}
	l.lose(fmt.Errorf("%w: %q was not renewed before its validity deadline", ErrLockLost, l.key))
}

// lose ends the lease with err. The Lost hook runs before Done closes, so a
// holder that sees Done also sees the metric.
func (l *Lease) lose(err error) {
	l.mu.Lock()
	first := l.err == nil && !l.losing
	l.losing = true
	l.mu.Unlock()
	if first {
		l.hooks.lost(l.key, err)
		l.end(err)
	}
}

// end records why the lease ended, closes Done and cancels Context. Only the
// first call has an effect.
func (l *Lease) end(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	l.err = err
	l.expiry.Stop()
	close(l.done)
	l.cancel(err)
}

// renew runs every TTL/3 until the lease is released or lost, or the
// holder's context ends. Each renewal may take at most TTL/3. A renewal that
// finds the lock gone ends the lease at once. A renewal that fails (Redis
// unreachable) is retried after TTL/10 if that attempt could still finish
// before the validity deadline; otherwise the lease ends now. So with a
// client that honours context deadlines the loss is reported at about 2/3
// of the TTL after the last renewal, well before the deadline; if a call
// ignores its deadline, the expiry timer still reports it at the deadline.
func (l *Lease) renew(holder context.Context) {
	l.renewing.Lock()
	defer l.renewing.Unlock()
	l.mu.Lock()
	ttl, deadline, ok := l.ttl, l.deadline, l.watching && !l.released && l.err == nil
	l.mu.Unlock()
	if !ok {
		return
	}

	sent := time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(holder), ttl/3)
	err := l.backend.refresh(ctx, ttl)
	cancel()
	next := l.interval()
	switch {
	case err == nil:
		l.extend(sent, ttl)
		l.hooks.renewed(l.key, time.Since(sent))
	case errors.Is(err, ErrLockLost):
		l.hooks.renewFailed(l.key, err)
		l.lose(err)
		return
	default:
		l.hooks.renewFailed(l.key, err)
		// Retry soon, if a retry could still finish in time.
		if !time.Now().Add(ttl/10 + ttl/3).Before(deadline) {
			l.lose(fmt.Errorf("%w: renewing %q failed: %w", ErrLockLost, l.key, err))
			return
		}
		next = ttl / 10
	}
	l.mu.Lock()
	if l.watching {
		l.renewal.Reset(next)
	}
	l.mu.Unlock()
}

// stopWatching stops future renewals; one in flight finishes.
func (l *Lease) stopWatching() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watching = false
	if l.renewal != nil {
		l.renewal.Stop()
	}
}

func (l *Lease) interval() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl / 3
}
