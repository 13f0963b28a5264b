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
	// ErrLockLost when the lock is no longer ours. unsure reports that some
	// of it may have run in Redis, or may yet run, without our knowing (a
	// lost or late reply), so that it could have set ttl even if it
	// failed, or set it later than we think.
	refresh(ctx context.Context, ttl time.Duration) (unsure bool, err error)
	// release gives back this hold; it returns an error matching ErrLockLost
	// when the lock had expired or been taken. It must run even when ctx is
	// cancelled, and return within Options.ReleaseTimeout.
	release(ctx context.Context) error
}

// errReleased is what Err reports after a clean Release.
var errReleased = fmt.Errorf("%w: released", ErrNotHeld)

// leaseState is where a lease is in its life. Every change happens under
// Lease.mu, and only these:
//
//	held      → releasing  Release begins
//	held      → losing     lose: a renewal found the lock gone, renewals
//	                       failed too long, or the validity deadline passed
//	losing    → lost       the Lost hook has run; Done closes
//	releasing → released   Release has its answer; Done closes. err is
//	                       errReleased, or the loss it found (after the Lost
//	                       hook)
//	lost      → released   Release of a lease already lost: it still sends
//	                       the owner-checked release, and returns the loss
//
// Only a held lease is trusted, renewed or armed; once Release has begun,
// only its outcome counts. Done and Context end on entering lost or
// released, and only then; err is set on entering losing or released.
type leaseState uint8

const (
	held leaseState = iota
	releasing
	losing
	lost
	released
)

// Lease is one hold of a lock. Its methods are safe for concurrent use.
//
// A lease is valid until its local validity deadline: the time the last
// successful obtain or renewal was sent, plus the TTL, minus a drift
// allowance (1% of the TTL plus 2 ms). Redis expires the key no earlier,
// so the holder stops trusting the lease before anyone else can get it.
// Err, Done and Context compare the clock with that deadline whenever they
// are called, so a holder that was paused (GC, SIGSTOP, a stalled VM) past
// it sees the loss on its first check after resuming.
type Lease struct {
	key     string
	token   int64
	backend backend
	hooks   *Hooks
	// fenceTTL bounds the ttl of a Refresh (see checkArgs).
	fenceTTL time.Duration
	// holder is the context given to Obtain. The lease keeps it because its
	// contract is tied to it: Context derives from it, renewals run with its
	// values, and the watchdog stops when it ends.
	holder context.Context

	mu       sync.Mutex
	ttl      time.Duration // what renewals ask for; Refresh changes it
	distrust time.Duration // the shortest ttl sent with an unknown outcome; 0: none
	deadline time.Time     // local validity deadline, monotonic
	state    leaseState
	err      error         // why the lease ended: set on entering losing or released
	hooked   chan struct{} // closed when the Lost hook has run (made on entering losing)
	// done and ctx are made on first use: a caller that never asks pays
	// nothing for them. Both end with err, on entering lost or released.
	done   chan struct{}
	ctx    *leaseContext
	cancel context.CancelCauseFunc

	// One timer, not a goroutine, serves the watchdog and the deadline: it
	// fires at the next renewal while the watchdog runs, else at the
	// deadline, and during a renewal at the deadline in case the renewal
	// hangs. So a short critical section starts no goroutine at all.
	timer    *time.Timer
	watching bool      // the watchdog renews at next
	next     time.Time // the next renewal, while watching
	// Renewals (the watchdog's and Refresh) go one at a time, so that their
	// replies are handled in the order Redis ran them. renewing is set
	// while one is in flight; turn, made when someone waits for it, closes
	// when it ends.
	renewing bool
	turn     chan struct{}
	unwatch  func() bool // deregisters the hook on the holder's context
}

func newLease(ctx context.Context, key string, token int64, b backend, ttl time.Duration, sent time.Time, watchdog bool, opts *Options) *Lease {
	l := &Lease{
		key:      key,
		token:    token,
		backend:  b,
		hooks:    &opts.Hooks,
		fenceTTL: opts.FenceTTL,
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

// trusted is the longest TTL a renewal of ttl can be trusted for: a renewal
// sent earlier whose outcome is unknown may still run after it (it can wait
// in the input buffer of a stalled server) and set its own, shorter TTL
// from then on. l.mu must be held.
func (l *Lease) trusted(ttl time.Duration) time.Duration {
	if l.distrust > 0 && l.distrust < ttl {
		return l.distrust
	}
	return ttl
}

// fireAt is when the timer should fire next; l.mu must be held.
func (l *Lease) fireAt() time.Time {
	if l.watching && !l.renewing && l.next.Before(l.deadline) {
		return l.next
	}
	return l.deadline
}

// arm sets the timer for fireAt while the lease is held; l.mu must be held.
func (l *Lease) arm() {
	if l.state == held {
		l.timer.Reset(time.Until(l.fireAt()))
	}
}

// pastDeadline reports whether the lease is held past its validity
// deadline; l.mu must be held.
func (l *Lease) pastDeadline() bool {
	return l.state == held && !time.Now().Before(l.deadline)
}

// ended reports whether Done and Context have ended; l.mu must be held.
func (l *Lease) ended() bool { return l.state == lost || l.state == released }

// checkClock ends the lease if it has run past its validity deadline, so
// that no check after a pause can see it healthy; it reports the error the
// lease ended with.
func (l *Lease) checkClock() error {
	l.mu.Lock()
	err, expired := l.err, l.pastDeadline()
	l.mu.Unlock()
	if !expired {
		return err
	}
	loss := l.expired()
	l.lose(loss)
	// Another call may have claimed the loss first (and still be running
	// the Lost hook), or a Release may have begun: lost all the same.
	if err := l.currentErr(); err != nil {
		return err
	}
	return loss
}

func (l *Lease) currentErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Key returns the key the lease holds, without the prefix.
func (l *Lease) Key() string { return l.key }

// Token returns the fencing token: it is larger than the token of every
// earlier lease on the same key. Send it with every write the lock guards
// and let the store reject writes with a token older than one it has seen.
// Re-entered holds share the token of the first hold. A lease of a lock
// without a fence record (Options.Unfenced) has no fencing token: Token is
// then the grant's time in microseconds, which may fall back.
func (l *Lease) Token() int64 { return l.token }

// Done returns a channel that is closed when the lease ends: when it is
// lost (then Err matches ErrLockLost) or released (then Err matches
// ErrNotHeld). A lost lease is reported no later than its validity
// deadline; a lease past its deadline is closed before Done returns.
func (l *Lease) Done() <-chan struct{} {
	l.checkClock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done == nil {
		l.done = make(chan struct{})
		if l.ended() {
			close(l.done)
		}
	}
	return l.done
}

// Err returns nil while the lease is held. Once it has ended it returns
// why: an error matching ErrLockLost if the lease was lost (which includes
// running past its validity deadline: Err looks at the clock), or
// ErrNotHeld after a Release. Check it right before committing the work
// the lock guards.
func (l *Lease) Err() error {
	return l.checkClock()
}

// Context returns a context for the critical section. It is cancelled when
// the lease ends (context.Cause then returns the Err value) or when the
// context passed to Obtain ends. Its Err and Done look at the clock like
// the lease's own, so ctx.Err() right before a commit is a sound check.
func (l *Lease) Context() context.Context {
	l.checkClock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		inner, cancel := context.WithCancelCause(l.holder)
		l.ctx, l.cancel = &leaseContext{Context: inner, l: l}, cancel
		if l.ended() {
			l.cancel(l.err)
		}
	}
	return l.ctx
}

// leaseContext is the context of a critical section: a cancel context whose
// Err and Done first check the lease's clock, so that a check made before
// the lease's timer has run (after a pause) still sees the loss.
type leaseContext struct {
	context.Context
	l *Lease
}

func (c *leaseContext) Done() <-chan struct{} {
	c.l.checkClock()
	return c.Context.Done()
}

func (c *leaseContext) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if c.l.checkClock() != nil {
		return context.Canceled
	}
	return nil
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
// Redis keeps the longest TTL of its holds.) A renewal by the watchdog in
// flight is waited for first, bounded by ctx, so that replies are handled
// in the order Redis ran them.
//
// A ttl below MinTTL or above Options.FenceTTL is refused, changing
// nothing. It returns an error matching ErrLockLost when the lock is no
// longer held, which also ends the lease, and ErrNotHeld after Release
// (also when a Release began while the Refresh was in flight). Other errors leave the
// outcome unknown: the lease then assumes the new ttl may have been set, and
// trusts itself no longer than that.
func (l *Lease) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := checkArgs(l.key, ttl, l.fenceTTL); err != nil {
		return err
	}
	l.checkClock()
	l.mu.Lock()
	for {
		switch l.state {
		case releasing, released:
			l.mu.Unlock()
			return fmt.Errorf("%w: refresh of %q after release", ErrNotHeld, l.key)
		case losing, lost:
			err := l.err
			l.mu.Unlock()
			return err
		}
		if !l.renewing {
			break
		}
		if l.turn == nil {
			l.turn = make(chan struct{})
		}
		turn := l.turn
		l.mu.Unlock()
		select {
		case <-turn:
		case <-ctx.Done():
			return fmt.Errorf("lock: refresh %q: waiting for the renewal in flight: %w", l.key, ctx.Err())
		}
		l.mu.Lock()
	}
	l.renewing = true
	l.arm() // now at the deadline, in case the call hangs
	l.mu.Unlock()

	sent := time.Now()
	unsure, err := l.backend.refresh(ctx, ttl)
	loss, err := l.refreshed(sent, ttl, unsure, err)
	if loss != nil {
		l.lose(loss)
	}
	return err
}

// Release gives the hold back and wakes waiters. It runs with the caller's
// values but without its cancellation, and returns within
// Options.ReleaseTimeout, so a cancelled request still releases its lock
// and a stalled Redis cannot hold the caller up. It does not wait for a
// renewal in flight: renewals are owner-checked, so one that lands after
// the release changes nothing, and its reply is ignored.
//
// Release returns nil when the hold was given back; an error matching
// ErrLockLost when the lease had already expired (its validity deadline had
// passed), been taken or been reported lost (the critical section may have
// overlapped with another holder); ErrNotHeld when this lease was already
// released, in which case nothing is sent to Redis. Other errors come from
// Redis or from the timeout; the key then expires at its TTL. A Release
// that meets the lease's loss being reported waits for the Lost hook (which
// must not block) to return, and then returns that loss.
func (l *Lease) Release(ctx context.Context) error {
	l.checkClock()
	l.mu.Lock()
	if l.state == losing {
		// Another goroutine is running the Lost hook; the lease is lost
		// once it has run (the hook must not block).
		hooked := l.hooked
		l.mu.Unlock()
		<-hooked
		l.mu.Lock()
	}
	switch l.state {
	case releasing, released:
		l.mu.Unlock()
		return fmt.Errorf("%w: %q released twice", ErrNotHeld, l.key)
	case lost:
		// Still give the key back if Redis holds it for us: a lease lost by
		// the clock alone may not have expired there yet.
		l.state = released
		loss := l.err
		l.mu.Unlock()
		_ = l.backend.release(ctx)
		return loss
	}
	l.state = releasing
	l.watching = false
	l.timer.Stop() // from now on only the release's outcome counts
	l.mu.Unlock()

	err := l.backend.release(ctx)
	why := errReleased
	if errors.Is(err, ErrLockLost) {
		l.hooks.lost(l.key, err) // before Done closes, as lose does
		why = err
	}
	l.mu.Lock()
	l.state, l.err = released, why
	unwatch := l.finish()
	l.mu.Unlock()
	if unwatch != nil {
		unwatch()
	}
	return err
}

// endTurn ends the turn of a renewal of ttl, whose outcome unsure says is
// unknown; l.mu must be held.
func (l *Lease) endTurn(ttl time.Duration, unsure bool) {
	l.renewing = false
	if l.turn != nil {
		close(l.turn)
		l.turn = nil
	}
	if unsure {
		// It may have set ttl, or may yet set it, at any moment from now:
		// never trust a renewal for longer than that again.
		l.distrust = l.trusted(ttl)
	}
}

// extended moves the deadline for a renewal of ttl sent at sent that
// succeeded; l.mu must be held. It sets, not just moves forward: a Refresh
// with a shorter ttl shortens the key in Redis too. Renewals go one at a
// time, so no older reply can come after this one.
func (l *Lease) extended(sent time.Time, ttl time.Duration) {
	l.ttl = ttl
	t := l.trusted(ttl)
	l.deadline = sent.Add(t - drift(t))
	l.next = sent.Add(t / 3)
}

// mayHaveSet lowers the deadline to what a renewal of ttl sent at sent,
// whose outcome is unknown, could have set; l.mu must be held.
func (l *Lease) mayHaveSet(sent time.Time, ttl time.Duration) {
	l.deadline = earlier(l.deadline, sent.Add(ttl-drift(ttl)))
}

// refreshed handles the outcome of a Refresh to ttl sent at sent, and ends
// its turn. It returns the loss to end the lease with, if any, and the
// error for the caller.
func (l *Lease) refreshed(sent time.Time, ttl time.Duration, unsure bool, err error) (loss, report error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endTurn(ttl, unsure)
	switch {
	case l.state == releasing || l.state == released:
		// Release has begun: its outcome decides, and a refresh that
		// landed after it would only find the lock gone.
		return nil, fmt.Errorf("%w: %q was released during the refresh", ErrNotHeld, l.key)
	case l.state != held:
		return nil, l.err // too late: the loss has been reported
	case err == nil:
		l.extended(sent, ttl)
	case errors.Is(err, ErrLockLost):
		return err, err
	default:
		l.ttl = ttl // what the caller asked for, whatever happened
		if unsure {
			l.mayHaveSet(sent, ttl)
		}
	}
	l.arm()
	return nil, err
}

// renewed handles the outcome of a watchdog renewal of ttl sent at sent,
// and ends its turn. It returns the loss to end the lease with, if any,
// and whether the outcome still counts (not once the lease is released or
// lost).
//
// A renewal that failed (Redis unreachable) is retried after TTL/10 if that
// attempt could still finish before the validity deadline; otherwise the
// lease is lost now.
func (l *Lease) renewed(sent time.Time, ttl time.Duration, unsure bool, err error) (loss error, counts bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.endTurn(ttl, unsure)
	switch {
	case l.state != held:
		return nil, false
	case err == nil:
		l.extended(sent, ttl)
	case errors.Is(err, ErrLockLost):
		return err, true
	default:
		if unsure {
			l.mayHaveSet(sent, ttl)
		}
		t := l.trusted(l.ttl)
		if !time.Now().Add(t/10 + t/3).Before(l.deadline) {
			return fmt.Errorf("%w: renewing %q failed: %w", ErrLockLost, l.key, err), true
		}
		l.next = time.Now().Add(t / 10)
	}
	l.arm()
	return nil, true
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// lose ends a held lease with err: held → losing, the Lost hook, then
// losing → lost. The hook runs before Done closes, so a holder that sees
// Done also sees the metric. A lease that is no longer held is left alone:
// its loss, or its Release, has been claimed already.
func (l *Lease) lose(err error) {
	l.mu.Lock()
	if l.state != held {
		l.mu.Unlock()
		return
	}
	l.state, l.err = losing, err
	l.hooked = make(chan struct{})
	l.watching = false
	l.timer.Stop()
	l.mu.Unlock()

	l.hooks.lost(l.key, err)

	l.mu.Lock()
	l.state = lost
	close(l.hooked)
	unwatch := l.finish()
	l.mu.Unlock()
	if unwatch != nil {
		unwatch()
	}
}

// finish closes Done, cancels Context with err and stops the timer and the
// watchdog, on entering lost or released (each reached once); l.mu must be
// held. It returns the deregistration of the hook on the holder's context,
// for the caller to run without l.mu: the holder's context may live on, so
// nothing of the lease may be left in it.
func (l *Lease) finish() (unwatch func() bool) {
	l.watching = false
	l.timer.Stop()
	if l.done != nil {
		close(l.done)
	}
	if l.cancel != nil {
		l.cancel(l.err)
	}
	return l.unwatch
}

// tick runs when the timer fires: at the validity deadline, which ends the
// lease unless a renewal moved it, or at the next renewal.
//
// Renewals run every TTL/3 until the lease is released or lost, or the
// holder's context ends. Each may take at most TTL/3. A renewal that finds
// the lock gone ends the lease at once. A renewal that fails (Redis
// unreachable) is retried after TTL/10 if that attempt could still finish
// before the validity deadline; otherwise the lease ends now. So the loss is
// reported at about 2/3 of the TTL after the last renewal, well before the
// deadline; if a call hangs, the timer still reports it at the deadline.
func (l *Lease) tick() {
	l.mu.Lock()
	now := time.Now()
	switch {
	case l.state != held:
		l.mu.Unlock()
		return
	case !now.Before(l.deadline):
		l.mu.Unlock()
		l.lose(l.expired())
		return
	case l.renewing || !l.watching || now.Before(l.next):
		l.arm() // a Refresh is in flight, fired early, or the watchdog has stopped
		l.mu.Unlock()
		return
	}
	ttl := l.ttl
	l.renewing = true
	l.arm() // now at the deadline, in case the renewal hangs
	timeout := l.trusted(ttl) / 3
	l.mu.Unlock()

	sent := time.Now()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(l.holder), timeout)
	unsure, err := l.backend.refresh(ctx, ttl)
	cancel()
	loss, counts := l.renewed(sent, ttl, unsure, err)
	switch {
	case !counts:
	case err == nil:
		l.hooks.renewed(l.key, time.Since(sent))
	default:
		l.hooks.renewFailed(l.key, err)
	}
	if loss != nil {
		l.lose(loss)
	}
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
