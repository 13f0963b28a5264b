// Package lock is a distributed lock on Redis for code that must not run
// twice at once across processes: in seckill, the read-check-write of a
// flash sale's stock. It exists because the common Go libraries stop short
// of what a holder needs to stay safe: they leave renewal to the caller,
// poll while waiting, and never say when a lock has been lost.
//
// # Obtaining and releasing
//
// New wraps any go-redis v9 client (single server, Sentinel or Cluster);
// build it with ClientOptions: ContextTimeoutEnabled, so that go-redis ends
// calls when their context does, and retries off (MaxRetries -1; on a
// Cluster, MaxRedirects -1 too). New refuses a client that retries, since
// the scripts are not safe to run twice: go-redis sends a command again
// after an EOF, a reset or a read timeout, when the first may well have
// run, and the second run answers about the first one's work (an obtain
// finds its own grant and reports the lock held, a release finds nothing
// and reports the lease lost, a re-entry counts two holds). We chose to
// refuse such clients rather than make every script remember its last
// caller: a lost reply is then an error the package sees, and it handles
// it as an unknown outcome, below. Obtain runs one Lua script that sets the lock only if
// it is absent, with a TTL, and issues a fencing token in the same step.
// The lock records an owner token of 128 random bits that only this lease
// knows (a fresh one for every try); Release and Refresh are scripts that
// compare it before they delete or extend, so a holder whose lease has run
// out can never delete a lock someone else now holds. Such a late Release
// returns ErrLockLost, which tells the caller that its critical section may
// have overlapped with another holder. Release ignores the caller's
// cancellation and returns within Options.ReleaseTimeout, so a cancelled
// request still gives its lock back and a stalled Redis cannot hold it up.
// A try that fails in a way that leaves open whether Redis ran it (a reply
// lost or too late, the context ending mid-call) is released by owner
// before Obtain returns, so it does not leave the lock held by nobody for a
// whole TTL. That release goes out on another pooled connection, and Redis
// does not order commands across connections: the try may still be on its
// way (a TCP retransmit) and land after it. So a release by owner that
// finds the lock not the owner's leaves a tombstone for that owner,
// PREFIX{key}:gone:OWNER, for 15 minutes (about as long as Linux retransmits
// unacknowledged data), and a try that finds its tombstone grants nothing.
// (A reentrant owner's tries work the same way with a record of each try's
// own; see Reentrancy.)
//
// One lock is two Redis keys that share the Cluster hash tag {key} (a key
// that starts with '}', which would leave that tag empty, is written
// PREFIX{~}key~ instead, with the tag "~"):
// PREFIX{key}, which holds "owner|token|holds" while the lock is held and is
// deleted by the last release, and the fence record PREFIX{key}:fence, the
// last token issued, given Options.FenceTTL again on every obtain and
// renewal, so it outlives any lease kept alive (Obtain and Refresh refuse
// a ttl above FenceTTL). Its
// wake-up channel is PREFIX{key}:wake; tombstones of abandoned tries (see
// above) share its hash tag, as does the record of waiters,
// PREFIX{key}:waiting (see Waiting), and a fair lock's line (see Fair
// mode). Every key the package writes carries
// a TTL, and each script makes a handful of Redis calls.
//
// # TTLs and the watchdog
//
// The TTL is the promise that a crashed holder cannot block everyone
// forever; it is also the window in which a paused holder (a GC pause, a
// stalled VM, a slow disk) might still believe it holds the lock. Pick a TTL
// comfortably above the slowest critical section you guard and rely on the
// watchdog instead of guessing high: unless ObtainOptions.Fixed is set, the
// lease renews itself every TTL/3 with the owner-checked script.
//
// A lease is trusted only until its validity deadline: the time the last
// obtain or renewal was sent (measured on the monotonic clock), plus the
// TTL, minus a drift allowance of 1% of the TTL plus 2 ms. Redis cannot
// expire the key earlier than that. Renewals (the watchdog's and Refresh)
// go one at a time, so their replies are handled in the order Redis ran
// them. A renewal whose reply was lost may have run, or may yet run (it can
// wait in the input buffer of a stalled server): the deadline then drops to
// what it could have set, and no later renewal is trusted for longer than
// the shortest such TTL.
//
// When a renewal finds the lock gone or taken, or Redis stays unreachable
// too long for a retry to finish in time, the lease ends before its
// deadline: Done closes, Err says why (matching ErrLockLost), and the
// Context handed to the critical section is cancelled. Err, Done and the
// Context's Err also compare the clock with the deadline each time they are
// called, so a holder that was paused past it sees the loss on its very
// first check, before the lease's own timer has had a chance to run. Pass
// Context to the work you do under the lock, and check it (or Err) right
// before you commit anything. The watchdog stops on Release and when the
// context given to Obtain ends; then the lease runs out at its deadline.
//
// # Waiting
//
// With ObtainOptions.Wait, waiters of one Client on one key line up in
// arrival order, and only the first of them asks Redis: a burst of hundreds
// of requests for one item costs Redis a few tries per handoff, one per
// process, and does not drain the client's connection pool with tries
// that cannot win. The first in line records that someone waits, in the
// same script as its failed try (PREFIX{key}:waiting, for 3 seconds),
// subscribes to the lock's channel and sleeps until the holder's Release
// publishes on it. A release publishes only while that record lives, so a
// lock nobody waits for costs no PUBLISH (which Redis Cluster would send to
// every node). The first in line tries again at least every second, which
// renews the record while anyone waits; once the last waiter has gone,
// releases stop publishing within 3 seconds. A waiter that could not renew
// it in time (a paused process) may miss the wake-up: its own timer then
// catches the release. One pub/sub connection per Client carries the
// channels of all its waiters; a goroutine of its own sends SUBSCRIBE and
// UNSUBSCRIBE, so that no waiter ever waits on that connection (go-redis
// can hold it for a whole read timeout while it reconnects to a stalled
// server). A channel stays subscribed for a moment after a successful
// wait, for the next one. Messages can be lost (a reconnect, a holder that
// crashes instead of releasing), so a waiter also tries again once its
// subscription is confirmed, and when the holder's remaining TTL runs out
// (with jitter) or a second has passed, whichever is first. A waiter whose
// context ends returns at once with an error that matches both
// ErrNotObtained and the context's error.
//
// # Fair mode
//
// The wait above is first come, first served only among the waiters of one
// Client: on a release, each Client's first waiter races the others', and
// a newcomer that tries just then can take the lock ahead of all of them.
// ObtainOptions.Fair keeps one line for the key in Redis instead, which
// every Client and process joins:
//
//   - What it promises. A waiter takes its place at the end of the line
//     with its first try, and the lock is granted only to the first live
//     waiter in line, or to anyone while nobody waits. So waiters get the
//     lock in the order their first tries reached Redis, across clients and
//     instances, and a newcomer never takes a free lock from a waiter.
//   - Dead waiters. Each place has a lease on Redis's clock, QueueLease (3
//     seconds). Each Client renews the places of all its waiters on a key
//     once a second, in one script, and each try of a waiter renews its
//     own. A waiter whose wait ends (Wait runs out, its context ends) gives
//     its place up at once and wakes the next; one that is killed, paused
//     or cut off is dropped when its lease runs out, wherever it stands,
//     and every script drops such places. A dead waiter first in line thus
//     holds a free lock back for at most one lease (plus the second until
//     the next renewal notices); waiters that died together are all gone
//     by then.
//   - A waiter that comes back after its place was dropped (a process
//     resumed after a pause) is a newcomer: its next try puts it at the end
//     of the line. It cannot take the lock out of turn, nor get its old
//     place back.
//   - Reentrancy, fencing tokens, the watchdog, loss reporting, tombstones
//     and Replicas work as in the default mode. A re-entry by the holder
//     passes the line (the line is waiting for it).
//   - What it costs. A free key costs one script, as in the default mode,
//     with a little more work in it (a clock read and a look at the line:
//     1.05-1.10x the default's obtain and release in
//     BenchmarkFairUncontendedInterleaved). A waiter costs more: there are
//     no per-Client lines, so every waiter asks Redis itself, once on
//     arrival, once when its subscription is confirmed, when woken, and
//     every 5 seconds as a fallback; a waiter that gives up costs one more
//     script to leave. On top of that each Client runs one renewal script
//     a second per key it has waiters on. BenchmarkContended put 40 Redis
//     commands (those run by scripts included) on each handoff in fair
//     mode, 12 in the default. Each try takes a connection from the
//     client's pool: size it for the waiters a process may have (go-redis's
//     default is 10 per CPU), or tries queue there and can fail with its
//     PoolTimeout. The line
//     is two sorted sets, PREFIX{key}:queue (arrival order) and
//     PREFIX{key}:queue:until (the leases), under the lock's hash tag.
//   - Why 3 seconds. Shorter, and a live waiter paused by a GC or a busy
//     machine would lose its place; longer, and a dead one would hold a
//     free lock back for longer. It is the waiting record's TTL as well,
//     and three renewals must go missing in a row.
//   - A release wakes only the first in line: the waiting record holds that
//     waiter's id, and the release publishes it; each Client wakes the
//     waiter of that id if it has it. While the lock is free, each
//     Client's renewal wakes the first in line again, so a wake-up lost on
//     the way, or sent to a waiter that has died since, costs at most a
//     second once the dead waiter's place is dropped.
//   - Every Obtain of a key must use the same mode. An Obtain without Fair
//     does not look at the line and may take a free lock ahead of it;
//     releases still wake the first in line. RedLock has no fair mode (a
//     line on each instance would not be one line): it refuses Fair.
//
// # Reentrancy
//
// Go has no thread identity, so reentrancy is opt-in and explicit:
// ObtainOptions.Owner names the owner (a request or job id; any string).
// The same owner may obtain the lock again while holding it; each Obtain
// returns its own Lease and adds a hold, and the lock is freed when every
// hold is released. Releasing a lease twice returns ErrNotHeld and changes
// nothing in Redis. A reentrant owner does not line up with other waiters
// (the line may be waiting for the lock it holds).
//
// All of an owner's holds share its owner and token, so a try of its that
// fails with an unknown outcome cannot be released by owner: that could
// give back the hold of an earlier lease. Instead each try has an id of its
// own, and a try that adds a hold (a first grant or a re-entry) writes its
// token to PREFIX{key}:gone:ID in the same script, for 15 minutes or the
// TTL if longer (renewed with the lease). Its clean-up, and its lease's
// Release, give back the hold that record names and delete it; a clean-up
// that finds no record leaves it as the try's tombstone, and a try that
// lands after its tombstone, even on a lock its owner holds, adds no hold.
// So an Obtain that failed with its reply lost, or its try held back in the
// network, never leaves the lock held once the owner's other leases are
// released. A reentrant Obtain costs one key more in Redis while its lease
// lasts, and each renewal of its lease renews that key too.
//
// # Fencing
//
// A lock alone cannot protect a store from a holder that was paused past
// its deadline and then writes: by the time it wakes, another holder may
// have the lock. Lease.Token is the defence. Tokens only grow for a key:
// each is the larger of the last token plus one (kept in the fence record,
// which outlives every lease on the key) and Redis's clock in microseconds,
// so they keep growing across releases, leases that expire unreleased, a
// server clock that steps back, and even the loss of the fence record,
// unless the clock stepped back too. Send the token with every write and
// let the store refuse stale ones, for example:
//
//	UPDATE stock SET qty = qty - 1, fence_token = ?
//	 WHERE sku = ? AND qty > 0 AND fence_token <= ?
//
// The comparison is <=, not <: a holder may write more than once under one
// lease, and re-entered holds share its token, so the store must accept
// the newest token again; it refuses only tokens older than one it has
// seen. A write that matches no row came from a holder that was overtaken,
// and must be treated as failed.
//
// A caller that needs mutual exclusion and no tokens pays for the fence
// record anyway: a key read and a write in every obtain, and a PEXPIRE in
// every renewal. Options.Unfenced makes a Client without it (Redisson,
// likewise, keeps its fenced lock a type of its own). Owner tokens, the
// watchdog, the loss signal, waiting, reentrancy and RedLock are the same;
// Lease.Token is then the grant's time in microseconds, which is not a
// fencing token: it falls back with the clock, and nothing keeps it above
// the token of a lease that expired unreleased. An unfenced Obtain that
// tries once, with no Owner, is one SET NX PX instead of the obtain
// script; it does not look for its tombstone, so if its reply is lost and
// it lands after its clean-up, the key is held by nobody until its TTL.
// The fenced lock stays the default.
//
// Every guarantee here assumes Redis keeps the keys until their TTLs run
// out. A server with maxmemory and an eviction policy that may pick them
// (allkeys-*, or volatile-*, since every lock key has a TTL) breaks all of
// them: an evicted lock is free for the next contender while its holder
// works on, and an evicted fence record lets tokens fall back to the clock.
// Run the lock's Redis with maxmemory-policy noeviction, or without
// maxmemory. Likewise a failover to a replica that had not received the
// latest writes can hand out a lock that is held, or a token already
// issued; that is what RedLock is for, and what replica sync narrows.
//
// # Replica sync
//
// Redis replicates asynchronously: the primary answers a grant before any
// replica has it, and if the primary dies then, Sentinel promotes a replica
// on which the lock is free. Options.Replicas sends WAIT right behind the
// obtain script (and each renewal's), on the same connection, and trusts
// the grant only once that many replicas acknowledged it within
// Options.ReplicaTimeout. A grant they do not confirm is released and
// Obtain fails with ErrNotObtained and ErrNotReplicated; a renewal they do
// not confirm does not extend the lease.
//
// What WAIT is not: it is not consensus. It says that N replicas received
// the write, not that a failover will choose one of them: with several
// replicas, Sentinel may promote one that never saw the grant (it picks by
// priority and replication offset among those it can reach). Nor does it
// make the write durable on disk, and a grant released after a failed WAIT
// may already have reached a replica that is promoted before the release
// does (the holder was told "not obtained", so nothing runs under it, but
// the key stays until its TTL). Keep fencing tokens at the store: they
// refuse the stale holder's write whatever the failover did.
//
// # RedLock
//
// NewRedLock runs the Redlock algorithm over N independent servers, each
// call bounded by a short per-instance timeout, and holds the lock only if
// a majority (N/2+1) said yes and time is left: validity is the TTL minus
// the time the acquisition took minus the drift. It returns as soon as a
// majority has said yes or can no longer say yes, without waiting for
// slower instances; an instance that grants the lock later is renewed and
// released with the lease (by owner), and one whose answer never came is
// released by owner once its call has ended when the attempt failed. A
// release by owner that reaches an instance before the try it undoes
// leaves a tombstone there (see above), so that a grant landing after the
// lease's Release grants nothing. A reentrant Owner's instances are released
// by the try's record instead (see Reentrancy): the hold that try added
// there, or, when it has not landed yet, a tombstone, and never a hold of
// the owner's other leases.
// Renewals must reach a majority, or the lease is reported lost. A release
// returns once a majority has answered and, for at most an instance timeout
// more, the instances not known to be slow; each release call is bounded by
// ReleaseTimeout, not by the instance timeout, since a release given up
// early leaves the key held there for the rest of its TTL. Build the
// instances' clients with InstanceOptions.
//
// Contenders first ask the key's gate alone: the first instance, in an
// order derived from the key, that answers. Only the gate's winner asks the
// other instances, in parallel. Asking all instances at once lets a burst
// of contenders split the votes (each wins one instance, none a majority),
// give up together and retry together, a livelock; the gate prevents that,
// and the majority rule, which is what makes the lock safe, is unchanged.
// An instance whose call got no reply in time is marked slow until it
// answers again; a key whose gate is slow asks it last, so that one stalled
// server does not cost every handoff an instance timeout. Only the gate
// moves, and only by one place: clients that disagree about it use one of
// two gates, and two contenders holding one gate each still leave the other
// instances to decide between them.
//
// When a majority refuses connections the servers are down, so Obtain
// fails at once with ErrNotObtained (wrapping the refusal) instead of
// waiting. When instances only time out (go-redis reports a deadline as
// "i/o timeout"; a busy server looks the same as a dead one for a while), a
// waiter keeps trying, backing off by a few instance timeouts, until its
// Wait runs out. A waiter whose try the gate refused records that it waits
// on the other instances too (those not marked slow), before it
// subscribes, so that if the gate fails before the release, the majority
// left still publishes it. A waiter tries again once a majority of its subscriptions
// is confirmed: a release that reaches a majority reaches one of them, and
// a dead instance never confirms. RedLock survives the crash of a minority
// of servers, which a single Redis (or a failover pair, whose asynchronous
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
// the largest of the tokens of the instances that granted it. Successive
// majorities overlap, and each instance's tokens rise, so it normally
// grows; but the instances' clocks and fence records are independent, and
// an instance that restarted empty or whose clock runs ahead or behind can
// break the order. RedLock tokens are a best-effort order across
// instances, not a proof: a store that must not accept a stale write needs
// a token from a single source of order.
//
// # Metrics
//
// Options.Hooks reports obtain latency and outcome, waits, renewals,
// renewal failures and lost leases as plain function calls, so a service can
// feed Prometheus or anything else without this package importing it.
package lock
