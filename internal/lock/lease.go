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
	// holder is the context given to Obtain. The lease keeps it because its
	// contract is tied to it: Context derives from it, renewals run with its
	// values, and the watchdog stops when it ends.
	holder context.Context

	mu       sync.Mutex
	ttl      time.Duration
	deadline time.Time // local validity deadline, monotonic
	err      error     // why the lease ended; set once
	released bool
	losing   bool // lose has claimed the lease and is running the Lost hook
	// done and ctx are made on first use: a caller that never asks pays
	// nothing for them. Both end with err.
	done   chan struct{}
	ctx    context.Context
	cancel context.CancelCauseFunc

	// One timer, not a goroutine, serves the watchdog and the deadline: it
	// fires at the next renewal while the watchdog runs, else at the
	// deadline, and during a renewal at the deadline in case the renewal
	// hangs. So a short critical section starts no goroutine at all.
	timer    *time.Timer
	watching bool      // the watchdog renews at next
	next     time.Time // the next renewal, while watching
	renewing bool      // a renewal is in flight
	// renewMu is held for the whole of a renewal, so that Release can wait
	// for one in flight: none may race the delete.
	renewMu sync.Mutex
	unwatch func() bool // deregisters the hook on the holder's context
}

func newLease(ctx context.Context, key string, token int64, b backend, ttl time.Duration, sent time.Time, watchdog bool, hooks *Hooks) *Lease {
	l := &Lease{
		key:      key,
		token:    token,
		backend:  b,
		hooks:    hooks,
		holder:   ctx,
		ttl:      ttl,
		deadline: sent.Add(ttl - drift(ttl)),
		watching: watchdog,
		next:     sent.Add(ttl / 3),
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer = time.AfterFunc(time.Until(l.fireAt()), l.tick)
	if watchdog && ctx.Done() != nil {
		// Stop renewing once the holder's context ends.
		l.unwatch = context.AfterFunc(ctx, l.stopWatching)
	}
	return l
}

// fireAt is when the timer should fire next; l.mu must be held.
func (l *Lease) fireAt() time.Time {
	if l.watching && !l.renewing && l.next.Before(l.deadline) {
		return l.next
	}
	return l.deadline
}

// arm sets the timer for fireAt, unless the lease has ended; l.mu must be
// held.
func (l *Lease) arm() {
	if l.err == nil {
		l.timer.Reset(time.Until(l.fireAt()))
	}
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
func (l *Lease) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		l.done = make(chan struct{})
		if l.err != nil {
			close(l.done)
		}
	}
	return l.done
}

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
func (l *Lease) Context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		l.ctx, l.cancel = context.WithCancelCause(l.holder)
		if l.err != nil {
			l.cancel(l.err)
		}
	}
	return l.ctx
}

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
	l.watching = false
	l.mu.Unlock()
	l.renewMu.Lock() // wait for a renewal in flight: none may race the delete
	l.renewMu.Unlock()

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
	l.arm()
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

// end records why the lease ended, closes Done, cancels Context and stops
// the timer and the watchdog. Only the first call has an effect.
func (l *Lease) end(err error) {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return
	}
	l.err = err
	l.watching = false
	l.timer.Stop()
	if l.done != nil {
		close(l.done)
	}
	if l.cancel != nil {
		l.cancel(err)
	}
	unwatch := l.unwatch
	l.mu.Unlock()
	if unwatch != nil {
		unwatch() // the holder's context may live on: leave nothing in it
	}
}

// tick runs when the timer fires: at the validity deadline, which ends the
// lease unless a renewal moved it, or at the next renewal.
//
// Renewals run every TTL/3 until the lease is released or lost, or the
// holder's context ends. Each may take at most TTL/3. A renewal that finds
// the lock gone ends the lease at once. A renewal that fails (Redis
// unreachable) is retried after TTL/10 if that attempt could still finish
// before the validity deadline; otherwise the lease ends now. So with a
// client that honours context deadlines the loss is reported at about 2/3
// of the TTL after the last renewal, well before the deadline; if a call
// ignores its deadline, the timer still reports it at the deadline.
func (l *Lease) tick() {
	if !l.renewMu.TryLock() {
		// A renewal is in flight, or Release is waiting for one: only the
		// deadline can matter now.
		l.mu.Lock()
		expired := l.err == nil && !time.Now().Before(l.deadline)
		l.arm()
		l.mu.Unlock()
		if expired {
			l.lose(l.expired())
		}
		return
	}
	defer l.renewMu.Unlock()

	l.mu.Lock()
	now := time.Now()
	switch {
	case l.err != nil:
		l.mu.Unlock()
		return
	case !now.Before(l.deadline):
		l.mu.Unlock()
		l.lose(l.expired())
		return
	case !l.watching || l.released || now.Before(l.next):
		l.arm() // fired early, or the watchdog has stopped: wait for the deadline
		l.mu.Unlock()
		return
	}
	ttl, deadline := l.ttl, l.deadline
	l.renewing = true
	l.arm() // now at the deadline, in case the renewal hangs
	l.mu.Unlock()

	sent := time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(l.holder), ttl/3)
	err := l.backend.refresh(ctx, ttl)
	cancel()
	var retry time.Time // when a failed renewal is tried again
	switch {
	case err == nil:
		l.extend(sent, ttl)
		l.hooks.renewed(l.key, time.Since(sent))
	case errors.Is(err, ErrLockLost):
		l.hooks.renewFailed(l.key, err)
		l.lose(err)
	default:
		l.hooks.renewFailed(l.key, err)
		// Retry soon, if a retry could still finish in time.
		if !time.Now().Add(ttl/10 + ttl/3).Before(deadline) {
			l.lose(fmt.Errorf("%w: renewing %q failed: %w", ErrLockLost, l.key, err))
		}
		retry = time.Now().Add(ttl / 10)
	}
	l.mu.Lock()
	l.renewing = false
	l.next = retry
	if err == nil {
		l.next = sent.Add(l.ttl / 3) // a Refresh meanwhile may have changed the ttl
	}
	l.arm()
	l.mu.Unlock()
}

func (l *Lease) expired() error {
	return fmt.Errorf("%w: %q was not renewed before its validity deadline", ErrLockLost, l.key)
}

// stopWatching stops future renewals; one in flight finishes. The timer
// then waits for the deadline.
func (l *Lease) stopWatching() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.watching = false
	l.arm()
}
