package inventory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/seckill-lab/seckill/internal/lock"
)

// Stage "redis-lock": the critical section under one lock per item, held in
// Redis, so every instance of the fleet queues on the same lock.
//
// local-mutex failed because each process had its own mutex. Here the lock
// lives in Redis (internal/lock): an owner token makes release safe, a
// watchdog renews the lease while the holder works and tells it when the
// lock is lost, and waiters are woken by pub/sub. A lock alone is still not
// enough: a holder can pause (GC, swap, a slow network) past its lease, so
// the stock write carries the lease's fencing token and the database refuses
// a write from an older token (see critical.go). That fence, not the lock,
// is what finally makes this stage safe.
//
// In a crowd, buyers line up in front of the lock (queue.go): a sold-out
// item is answered from a read, and one buyer per instance at a time asks
// Redis. That line is first come, first served on one instance only: on a
// release, each instance's next buyer races the others', and whoever's
// try lands first wins, however late it came. With Fair (the setting
// SECKILL_LOCK_FAIR), the lock's fair mode keeps one line in Redis for the
// whole fleet instead, and buyers join it on arrival.

// LockOptions tune the lease of the redis-lock and redlock stages.
type LockOptions struct {
	// TTL is the lease length. It must exceed the longest critical section
	// it guards when the watchdog is off; with the watchdog on (the
	// default) it only bounds how long a crashed holder blocks the item.
	TTL time.Duration
	// Wait bounds how long a buyer queues for the lock (ErrLockTimeout).
	Wait time.Duration
	// Fixed turns the watchdog off. Tests use it to let a lease run out
	// while its holder is paused.
	Fixed bool
	// Fair makes redis-lock first come, first served across the fleet
	// (lock.ObtainOptions.Fair), at the price of a Redis try per buyer
	// (none waits behind its instance's turn) and a renewal script a second
	// per item. The redlock stage has no fair mode.
	Fair bool
}

// NewRedisLock returns the redis-lock stage over a single-Redis locker.
func NewRedisLock(locker lock.Locker, store SectionStore, kind string, section SectionOptions, lo LockOptions) Stage {
	q := newLockQueue(store, lo.Wait)
	q.turnless = lo.Fair
	return newGuarded(&leaseGuard{locker: locker, opts: lo}, store, kind, section, q)
}

// leaseGuard adapts internal/lock to the Guard of the critical section.
type leaseGuard struct {
	locker lock.Locker
	opts   LockOptions
}

func (g *leaseGuard) Enter(ctx context.Context, key string, by time.Time) (Held, error) {
	wait := g.opts.Wait
	if !by.IsZero() {
		wait = max(time.Until(by), 0)
	}
	lease, err := g.locker.Obtain(ctx, key, g.opts.TTL, lock.ObtainOptions{Wait: wait, Fixed: g.opts.Fixed, Fair: g.opts.Fair})
	if err != nil {
		return nil, classifyLockError(ctx, err)
	}
	return leaseHold{lease}, nil
}

type leaseHold struct{ l *lock.Lease }

func (h leaseHold) Token() int64 { return h.l.Token() }

func (h leaseHold) Context(context.Context) context.Context { return h.l.Context() }

func (h leaseHold) Err() error {
	if err := h.l.Err(); errors.Is(err, lock.ErrLockLost) {
		return fmt.Errorf("%w: %w", ErrLockLost, err)
	}
	return nil
}

func (h leaseHold) Exit(ctx context.Context) error { return h.l.Release(ctx) }

// classifyLockError tells a busy lock (429, try later) from an unreachable
// Redis or RedLock quorum (503): the first is contention, the second an
// outage, and clients should treat them differently.
func classifyLockError(ctx context.Context, err error) error {
	var ne net.Error
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("waiting for the lock: %w", ctx.Err())
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne), errors.Is(err, io.EOF):
		// Per-instance timeouts surface as DeadlineExceeded while the
		// request's own context is still alive.
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	case errors.Is(err, lock.ErrNotReplicated):
		// Granted and given back for want of a replica: an outage of the
		// replica, not contention; nothing was sold.
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	case errors.Is(err, lock.ErrNotObtained):
		return fmt.Errorf("%w: %w", ErrLockTimeout, err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}
