// Package lock is a distributed lock on Redis for code that must not run
// twice at once across processes: in seckill, the read-check-write of a
// flash sale's stock. It exists because the common Go libraries stop short
// of what a holder needs to stay safe: they leave renewal to the caller,
// poll while waiting, and never say when a lock has been lost.
//
// # Obtaining and releasing
//
// New wraps any go-redis v9 client (single server, Sentinel or Cluster).
// Obtain runs one Lua script that sets the lock only if it is absent, with a
// TTL, and issues a fencing token in the same step. The lock records an
// owner token of 128 random bits that only this lease knows; Release and
// Refresh are scripts that compare it before they delete or extend, so a
// holder whose lease has run out can never delete a lock someone else now
// holds. Such a late Release returns ErrLockLost, which tells the caller
// that its critical section may have overlapped with another holder.
// Release ignores the caller's cancellation (it runs with
// context.WithoutCancel and a short timeout) so a cancelled request still
// gives its lock back.
//
// One lock is one Redis key, PREFIX{key}, whose braces make the key a
// Cluster hash tag (its wake-up channel is PREFIX{key}:wake). While held it
// stores "owner|token|holds"; after the last release it keeps only
// "|token|0", so the next token can be larger, and expires after
// Options.FenceTTL. Either may end in "w", the mark of a lock someone has
// waited for (see Waiting). Every key the package writes carries a TTL, and
// each script does at most three Redis calls.
//
// # TTLs and the watchdog
//
// The TTL is the promise that a crashed holder cannot block everyone
// forever; it is also the window in which a paused holder (a GC pause, a
// stalled VM, a slow disk) might still believe it holds the lock. Pick a TTL
// comfortably above the slowest critical section you guard and rely on the
// watchdog instead of guessing high: unless ObtainOptions.Fixed is set, a
// goroutine renews the lease every TTL/3 with the owner-checked script.
//
// A lease is trusted only until its validity deadline: the time the last
// obtain or renewal was sent (measured on the monotonic clock), plus the
// TTL, minus a drift allowance of 1% of the TTL plus 2 ms. Redis cannot
// expire the key earlier than that. When a renewal finds the lock gone or
// taken, or Redis stays unreachable too long for a retry to finish in time,
// the lease ends before that deadline: Done closes, Err says why (matching
// ErrLockLost), and the Context handed to the critical section is
// cancelled. Pass Context to the work you do under the lock, and check it
// before you commit anything. The watchdog stops on Release and when the
// context given to Obtain ends; then the lease runs out at its deadline.
//
// # Waiting
//
// With ObtainOptions.Wait, a contender marks the lock as waited for, in the
// same script as its failed try, subscribes to a per-lock channel and
// sleeps until the holder's Release publishes on it. Only a marked lock's
// release publishes, so a lock nobody waits for costs no PUBLISH (which
// Redis Cluster would send to every node). The next holder inherits the
// mark, since more waiters may be queued, and it lasts as long as the
// lock's record. One pub/sub connection
// per Client carries the channels of all its waiters; a release wakes only
// the longest-waiting of them (the others could not win anyway), so a hot
// key does not send a herd to Redis, and a channel stays subscribed for a
// moment after a successful wait, for the next one. Messages can be lost
// (a reconnect, a holder that crashes instead of releasing), so every
// waiter also re-checks when the holder's remaining TTL runs out, with
// jitter. A waiter whose context ends returns at once with an error that
// matches both ErrNotObtained and the context's error, and unsubscribes.
//
// # Reentrancy
//
// Go has no thread identity, so reentrancy is opt-in and explicit:
// ObtainOptions.Owner names the owner (a request or job id). The same owner
// may obtain the lock again while holding it; each Obtain returns its own
// Lease and adds a hold, and the lock is freed when every hold is released.
// Releasing a lease twice returns ErrNotHeld and changes nothing in Redis.
//
// # Fencing
//
// A lock alone cannot protect a store from a holder that was paused past
// its deadline and then writes: by the time it wakes, another holder may
// have the lock. Lease.Token is the defence. Tokens only grow for a key:
// each is the larger of the previous token plus one and Redis's clock in
// microseconds, so they keep growing across releases, expiries and even the
// loss of the key that remembers the previous one. Send the token with every
// write and let the store refuse stale ones, for example:
//
//	UPDATE stock SET qty = qty - 1, fence_token = ?
//	 WHERE sku = ? AND qty > 0 AND fence_token < ?
//
// A write that matches no row came from a holder that was overtaken, and
// must be treated as failed. The guarantee rests on Redis's clock not
// jumping backwards while that key is absent.
//
// # RedLock
//
// NewRedLock runs the Redlock algorithm over N independent servers, each
// call bounded by a short per-instance timeout, and holds the lock only if
// a majority (N/2+1) said yes and time is left: validity is the TTL minus
// the time the acquisition took minus the drift. On a miss every instance
// that may have said yes is released at once. Renewals must also reach a
// majority, or the lease is reported lost.
//
// Contenders first ask the key's gate alone: the first instance, in an
// order derived from the key, that answers. Only the gate's winner asks the
// other instances, in parallel. Asking all instances at once lets a burst
// of contenders split the votes (each wins one instance, none a majority),
// give up together and retry together, a livelock; the gate prevents that
// while it is up, and the majority rule, which is what makes the lock safe,
// is unchanged. When a majority refuses connections the servers are down,
// so Obtain fails at once with ErrNotObtained instead of waiting; when
// instances only time out (a busy server looks the same as a dead one for
// a while), a waiter keeps trying until its Wait runs out. It survives the crash of a minority of
// servers, which a single Redis (or a failover pair, whose asynchronous
// replica can lose a fresh lock) does not.
//
// What it does not promise: it is a timing-based algorithm. Martin
// Kleppmann's critique is that its safety assumes bounded process pauses,
// network delays and clock drift; a holder paused after its check, or a
// server whose clock jumps, can leave two holders that each believe they are
// alone, and Redlock has no token that a store could use to tell them apart.
// Salvatore Sanfilippo's answer is that the validity check after acquiring
// bounds the damage of delays before it, that clocks can be kept monotonic
// enough in practice, that crashed servers must stay down for a TTL (or
// persist with fsync) before rejoining, and that a store able to check a
// token could as well provide the mutual exclusion itself. We side with the
// pragmatic reading: use RedLock when you want availability through server
// crashes and efficiency (work done once, almost always), and use fencing
// at the store when correctness must survive pauses. The RedLock token is
// the maximum of the tokens of the instances that granted it; since the
// majorities of two successive grants overlap and tokens follow each
// server's clock, it normally grows, but a server whose clock runs behind
// or that lost its counter in a crash can weaken that, so treat it as a
// best effort, not a proof.
//
// # Metrics
//
// Options.Hooks reports obtain latency and outcome, waits, renewals,
// renewal failures and lost leases as plain function calls, so a service can
// feed Prometheus or anything else without this package importing it.
package lock
