package inventory

import "github.com/seckill-lab/seckill/internal/lock"

// Stage "redlock": the same critical section under a lock granted by a
// majority of independent Redis servers (lock.RedLock).
//
// redis-lock trusts one Redis. If that server fails over to a replica that
// had not yet received the lock key, a second buyer obtains the "same" lock.
// RedLock asks N independent servers and holds the lock only with N/2+1 of
// them, within a validity window that subtracts the time spent asking and
// an allowance for clock drift. It survives the loss of a minority of
// servers. It does not make pauses harmless: as in redis-lock, the fencing
// token at the stock write is what refuses a holder whose lease ran out.

// NewRedLock returns the redlock stage over a quorum locker (a
// *lock.RedLock; any lock.Locker fits, which tests use).
func NewRedLock(quorum lock.Locker, store SectionStore, kind string, section SectionOptions, lo LockOptions) Stage {
	lo.Fair = false // RedLock has no fair mode (see LockOptions.Fair)
	return newGuarded(&leaseGuard{locker: quorum, opts: lo}, store, kind, section, newLockQueue(store, lo.Wait))
}
