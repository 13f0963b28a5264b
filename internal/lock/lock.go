package lock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrNotObtained means the lock is held by someone else and could not be
	// obtained within ObtainOptions.Wait (or before the context ended).
	ErrNotObtained = errors.New("lock: not obtained")
	// ErrLockLost means a lease that was obtained is no longer held: it
	// expired, was deleted or taken over, or could not be renewed in time.
	ErrLockLost = errors.New("lock: lock lost")
	// ErrNotHeld means a Release or Refresh on a lease that was already
	// released: one hold was given back more often than it was taken.
	ErrNotHeld = errors.New("lock: not held")
	// ErrNotReplicated means fewer replicas than Options.Replicas confirmed
	// a grant or a renewal within Options.ReplicaTimeout. An Obtain that
	// fails so also matches ErrNotObtained: the grant was given back.
	ErrNotReplicated = errors.New("lock: not confirmed by replicas")
)

// Locker obtains leases. Both *Client (one Redis) and *RedLock (a quorum of
// independent Redis servers) implement it, so callers can swap them.
type Locker interface {
	Obtain(ctx context.Context, key string, ttl time.Duration, o ObtainOptions) (*Lease, error)
}

var (
	_ Locker = (*Client)(nil)
	_ Locker = (*RedLock)(nil)
)

// ObtainOptions tune one Obtain call.
type ObtainOptions struct {
	// Wait is how long to wait for a held lock, counted from the start of
	// Obtain; 0 tries once. A try under way when it runs out is finished,
	// so Obtain returns within about Wait plus one try. Waiters sleep until
	// the holder's release wakes them (pub/sub), with a fallback re-check
	// when the holder's ttl runs out; waiters of one Client (or RedLock) on
	// one key queue in arrival order, and only the first asks Redis.
	Wait time.Duration
	// Fixed turns the watchdog off: the lease expires ttl after it was
	// obtained unless the caller calls Refresh.
	Fixed bool
	// Owner, when non-empty, makes the lock reentrant for that owner: an
	// Obtain with the same Owner while the owner holds the key succeeds and
	// adds a hold; each hold needs its own Release. The caller must make
	// Owner unique per logical owner (for example a request or job id). Any
	// string works, separators included.
	Owner string
	// Fair makes the wait first come, first served across every client and
	// process: a waiter takes a place in a line kept in Redis, and the lock
	// goes only to the first in line (or to anyone while nobody waits). A
	// waiter that stops renewing its place (a killed or paused process)
	// loses it after QueueLease. Every waiter asks Redis itself (there is
	// no per-Client line), and each Client renews its waiters' places in
	// one script a second per key; see doc.go. Every Obtain of a key must agree
	// on Fair: one without it does not look at the line and may take a
	// free lock before the first in line. RedLock has no fair mode.
	Fair bool
}

// Hooks observe the lock for metrics. Every field is optional and must be
// cheap, safe for concurrent use and must not block: they are called inline.
// Release does not wait for a renewal in flight, so a renewal's hook may
// run after Release returned.
type Hooks struct {
	// Obtained reports every Obtain: its latency, including any wait, and
	// its error (nil when the lease was obtained).
	Obtained func(key string, latency time.Duration, err error)
	// Waited reports an Obtain that found the lock held and waited, with the
	// time spent waiting and how many release wake-ups it received.
	Waited func(key string, wait time.Duration, wakeups int)
	// Renewed reports a successful watchdog renewal and its latency.
	Renewed func(key string, latency time.Duration)
	// RenewFailed reports a watchdog renewal that failed or found the lock
	// gone.
	RenewFailed func(key string, err error)
	// Lost reports a lease that ended without a clean Release.
	Lost func(key string, err error)
}

func (h *Hooks) obtained(key string, d time.Duration, err error) {
	if h.Obtained != nil {
		h.Obtained(key, d, err)
	}
}

func (h *Hooks) waited(key string, d time.Duration, wakeups int) {
	if h.Waited != nil {
		h.Waited(key, d, wakeups)
	}
}

func (h *Hooks) renewed(key string, d time.Duration) {
	if h.Renewed != nil {
		h.Renewed(key, d)
	}
}

func (h *Hooks) renewFailed(key string, err error) {
	if h.RenewFailed != nil {
		h.RenewFailed(key, err)
	}
}

func (h *Hooks) lost(key string, err error) {
	if h.Lost != nil {
		h.Lost(key, err)
	}
}

// Options configure a Client. The zero value is usable.
type Options struct {
	// Prefix starts every key and channel the package writes. Default
	// "lock:". It must not contain '{' or '}': the key itself becomes the
	// Redis Cluster hash tag, so all keys of one lock live in one slot
	// (a key that starts with '}' gets the tag "~", see doc.go).
	Prefix string
	// Hooks observe obtains, waits, renewals and losses.
	Hooks Hooks
	// FenceTTL is how long a lock's fence record (the last fencing token
	// issued for the key) survives the last Obtain or renewal. It must
	// outlive every lease on the key, so keep it far above the longest TTL
	// (a renewal gives it FenceTTL again); Obtain and Refresh refuse a ttl
	// above it. Tokens keep
	// rising after it expires as long as the server clock does not step
	// back; the TTL only keeps idle keys from piling up. Default 24h.
	FenceTTL time.Duration
	// ReleaseTimeout bounds Release, which runs even when the caller's
	// context is already cancelled, and the clean-up of an Obtain that
	// failed after Redis may have granted it. Default 2s.
	ReleaseTimeout time.Duration
	// Replicas, when above 0, makes every grant and renewal wait until that
	// many replicas of the primary acknowledged it: WAIT is sent right
	// behind the script, on its connection, for at most ReplicaTimeout. A
	// grant they do not confirm is released and Obtain fails with
	// ErrNotObtained and ErrNotReplicated; a renewal they do not confirm
	// does not extend the lease (the watchdog tries again, and the lease is
	// lost if no renewal is confirmed before its deadline). It needs a
	// *redis.Client (one server or a Sentinel group): a Cluster client
	// splits a pipeline by slot. See doc.go for what WAIT does not promise.
	// Every try carries the WAIT, so while the replicas are down a try
	// that finds the lock held (and records a waiter, a write) also waits
	// out ReplicaTimeout, and held leases end at their deadlines.
	Replicas int
	// ReplicaTimeout bounds the wait for Replicas. Default 100ms.
	ReplicaTimeout time.Duration
	// Unfenced makes a lock without a fence record, for callers that need
	// mutual exclusion and no fencing tokens: obtain neither reads nor
	// writes PREFIX{key}:fence, and a renewal does not extend it, which
	// saves Redis a key read and a write on every obtain (see README.md,
	// Benchmarks). Owner tokens, the watchdog, the loss signal,
	// reentrancy, waiting and RedLock work as in the default mode, but
	// Lease.Token is then only the grant's time in microseconds: it falls
	// back if a clock steps back, and a lease that expired unreleased is
	// not guaranteed a smaller token than the next one. Do not send it to
	// a store as a fencing token. An Obtain that tries once (no Wait, no
	// Owner, no Fair, no Replicas) is one SET NX PX, with no script, whose
	// token is this process's clock; should its reply be lost and the SET
	// land after the clean-up, the key stays held by nobody until its TTL
	// (the scripted try leaves a tombstone that stops it). Every client of one key
	// should agree on it: a fenced obtain after unfenced ones still issues
	// a token above the fence record's, which unfenced grants did not
	// raise.
	Unfenced bool
}

func (o Options) withDefaults() (Options, error) {
	if o.Prefix == "" {
		o.Prefix = "lock:"
	}
	if strings.ContainsAny(o.Prefix, "{}") {
		return o, fmt.Errorf("lock: Prefix %q must not contain '{' or '}'", o.Prefix)
	}
	if o.FenceTTL <= 0 {
		o.FenceTTL = 24 * time.Hour
	}
	if o.ReleaseTimeout <= 0 {
		o.ReleaseTimeout = 2 * time.Second
	}
	if o.Replicas < 0 {
		return o, fmt.Errorf("lock: Replicas %d is negative", o.Replicas)
	}
	switch {
	case o.ReplicaTimeout <= 0:
		o.ReplicaTimeout = 100 * time.Millisecond
	case o.ReplicaTimeout < time.Millisecond:
		o.ReplicaTimeout = time.Millisecond // WAIT's 0 would wait for ever
	}
	return o, nil
}

// MinTTL is the shortest lease Obtain accepts: shorter leases would be mostly
// clock drift allowance.
const MinTTL = 10 * time.Millisecond

// drift is the part of a TTL we do not trust: the clocks of this process and
// of Redis may run at slightly different rates, and Redis expires keys with
// millisecond precision.
func drift(ttl time.Duration) time.Duration {
	return ttl/100 + 2*time.Millisecond
}

// names are the Redis names one lock uses. The key is wrapped in braces, so
// a lock's keys and channel share a Cluster hash tag and land in one slot.
// A key that starts with '}' would make that tag empty (Redis then hashes
// each whole name, and the scripts fail with CROSSSLOT), so such a key is
// written PREFIX{~}KEY~ instead: tag "~". No other key gets that name:
// PREFIX{KEY} always ends in '}' before any suffix, this form in '~', and a
// key that does not start with '}' is never written this way.
type names struct {
	key   string // the caller's key
	lock  string // "owner|token|holds" while held; see obtain.lua
	fence string // the last token issued; outlives every lease
	// waiting is the record of someone waiting for the lock: see
	// obtain.lua. Made once per Obtain, for every try and the release.
	waiting string
	// line and leases are a fair lock's queue: see fair_queue.lua.
	line, leases string
}

func newNames(prefix, key string) names {
	lock := prefix + "{" + key + "}"
	if strings.HasPrefix(key, "}") {
		lock = prefix + "{~}" + key + "~"
	}
	return names{key: key, lock: lock, fence: lock + ":fence", waiting: lock + ":waiting",
		line: lock + ":queue", leases: lock + ":queue:until"}
}

// waitingTTL is how long a waiting record lasts after the last try that
// found the lock held and will wait; a waiter first in line tries again at
// least every waitingRefresh, which keeps it alive while anyone waits. Once
// the last waiter has gone, releases stop publishing within waitingTTL. A
// waiter that cannot refresh it in time (a paused process) may miss a
// wake-up; its own timer then catches the release.
const (
	waitingTTL     = 3 * time.Second
	waitingRefresh = waitingTTL / 3
)

// waitingTTLArg is waitingTTL as a script argument, boxed once.
var waitingTTLArg any = ms(waitingTTL)

// gone is the record of the try id (see claim): its tombstone, or the
// hold a reentrant try added; see obtain.lua and release.lua.
func (n names) gone(id string) string { return n.lock + ":gone:" + id }

// goneTTL is how long a tombstone keeps a late try from granting the lock:
// as long as Linux keeps retransmitting data a peer has not acknowledged
// (tcp_retries2 = 15, about 15 minutes), so that the try's bytes, still on
// their way after the client gave up, cannot land after it.
const goneTTL = 15 * time.Minute

// channel carries release wake-ups. The release script derives the same
// name from the lock's key; only waiters need it here.
func (n names) channel() string { return n.lock + ":wake" }

// checkArgs checks a key and a lease ttl: the ttl must not exceed the
// fence record's, or the record (the last token) could expire under a held
// lock, and the next token would come from the server clock alone.
func checkArgs(key string, ttl, fenceTTL time.Duration) error {
	if key == "" {
		return errors.New("lock: empty key")
	}
	if ttl < MinTTL {
		return fmt.Errorf("lock: ttl %v for %q is below MinTTL %v", ttl, key, MinTTL)
	}
	if ttl > fenceTTL {
		return fmt.Errorf("lock: ttl %v for %q is above Options.FenceTTL %v: the fence record must outlive every lease", ttl, key, fenceTTL)
	}
	return nil
}

// newOwnerToken returns 128 random bits, hex-encoded. Only the holder knows
// it, so only the holder can renew or delete the lock. Each try gets its own,
// so that cleaning up after a failed try can never touch a later one.
func newOwnerToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails since Go 1.24
	return hex.EncodeToString(b[:])
}

// claim is whom a try claims the lock for. owner goes into the lock's
// record: a fresh random token, or the caller's Owner behind a '=', so that
// no owner starts with the '|' that marks a record of an older version (see
// obtain.lua) and none can equal a random token. id names the try's own
// record, PREFIX{key}:gone:ID (see obtain.lua and release.lua): for an owner
// of one try the owner itself; for a reentrant owner, whose tries all write
// the same owner, a fresh random id, so that the clean-up of a try whose
// outcome is unknown gives back the hold that try added and no other.
type claim struct {
	owner, id string
	reentrant bool
}

func (o ObtainOptions) claim() claim {
	if o.Owner == "" {
		token := newOwnerToken()
		return claim{owner: token, id: token}
	}
	return claim{owner: "=" + o.Owner, id: newOwnerToken(), reentrant: true}
}

// entryTTL is how long a reentrant try's record (see obtain.lua) lasts: as
// long as a tombstone, and never less than the hold it names, whose lease
// renews it.
func entryTTL(ttl time.Duration) any { return ms(max(goneTTL, ttl)) }

func ms(d time.Duration) int64 { return d.Milliseconds() }

// Client is a lock on one Redis deployment: a single server, a Sentinel
// group or a Cluster. It is safe for concurrent use. Close it to stop the
// shared pub/sub connection that waiters use.
type Client struct {
	rdb         redis.UniversalClient
	opts        Options
	wake        *notifier
	line        lineup
	keeper      keeper // renews fair waiters' places
	fenceTTLArg any    // opts.FenceTTL in ms, boxed once for the obtain script
	// deadlines is true when rdb itself gives up when a context ends
	// (ContextTimeoutEnabled); otherwise calls that must be bounded run on
	// a goroutine of their own that is abandoned at the deadline.
	deadlines bool
}

// New returns a Client on rdb. It returns an error if opts.Prefix contains
// braces, or if rdb may send a command again after a failure (see
// ClientOptions): the package's scripts are not safe to run twice.
//
// Build rdb with ClientOptions, or set what it sets yourself.
// ContextTimeoutEnabled makes go-redis honour context deadlines on reads,
// so an Obtain ends with its context even while Redis is stalled. Without
// it, Release, Refresh and renewals are still bounded (by
// Options.ReleaseTimeout and their contexts) at the cost of a goroutine per
// call, and an Obtain in flight waits for the client's read timeout.
func New(rdb redis.UniversalClient, opts Options) (*Client, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := noRetries(rdb); err != nil {
		return nil, err
	}
	if _, ok := rdb.(*redis.Client); opts.Replicas > 0 && !ok {
		return nil, fmt.Errorf("lock: Replicas needs a *redis.Client (one server or a Sentinel group), not a %T: WAIT must follow the script on its connection", rdb)
	}
	c := &Client{rdb: rdb, opts: opts, wake: newNotifier(rdb), fenceTTLArg: ms(opts.FenceTTL), deadlines: honoursDeadlines(rdb)}
	if opts.Unfenced {
		c.fenceTTLArg = unfencedArg
	}
	c.keeper.c = c
	return c, nil
}

// ClientOptions adjusts o for a client of the lock and returns it:
// ContextTimeoutEnabled, and MaxRetries -1, which turns go-redis's retries
// off. go-redis sends a command again (3 times by default) after an EOF, a
// reset connection or a read timeout shorter than the context, when the
// first may well have run. A lock script that runs twice answers about its
// own first run: an obtain finds its own grant and reports the lock held
// (leaving it held by nobody for a whole TTL), a release finds nothing and
// reports the lease lost, a re-entry counts two holds. With retries off,
// such a failure comes back as an error, which the package treats as an
// unknown outcome (see Obtain). For a ClusterClient set MaxRedirects -1
// as well: go-redis counts a network retry against that budget too, so a
// try that meets a MOVED or ASK (a slot being moved; the script did not
// run) then fails with that error, and the next try reaches the new node.
func ClientOptions(o *redis.Options) *redis.Options {
	o.ContextTimeoutEnabled = true
	o.MaxRetries = -1
	return o
}

// FailoverOptions adjusts o, the options of go-redis's failover client
// (a primary found through Sentinel), as ClientOptions does for one server,
// and returns it. The failover client, too, would send a command again
// after a lost reply, including one lost to the failover itself.
func FailoverOptions(o *redis.FailoverOptions) *redis.FailoverOptions {
	o.ContextTimeoutEnabled = true
	o.MaxRetries = -1
	return o
}

// noRetries returns an error unless rdb is a go-redis client whose retries
// are off. The options are read after go-redis applied its defaults, where
// 0 means none.
func noRetries(rdb redis.UniversalClient) error {
	const fix = "its scripts must not run twice, so build the client with MaxRetries: -1 (see lock.ClientOptions)"
	switch c := rdb.(type) {
	case *redis.Client:
		if n := c.Options().MaxRetries; n > 0 {
			return fmt.Errorf("lock: the Redis client retries commands (MaxRetries %d); %s", n, fix)
		}
	case *redis.ClusterClient:
		o := c.Options()
		if o.MaxRetries > 0 || o.MaxRedirects > 0 {
			return fmt.Errorf("lock: the Redis Cluster client retries commands (MaxRetries %d, MaxRedirects %d, which counts network retries too); %s and MaxRedirects: -1",
				o.MaxRetries, o.MaxRedirects, fix)
		}
	case *redis.Ring:
		if n := c.Options().MaxRetries; n > 0 {
			return fmt.Errorf("lock: the Redis Ring client retries commands (MaxRetries %d); %s", n, fix)
		}
	default:
		return fmt.Errorf("lock: cannot tell whether a %T retries commands; use a *redis.Client, *redis.ClusterClient or *redis.Ring with retries off", rdb)
	}
	return nil
}

func honoursDeadlines(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// bounded runs f, returning no later than ctx ends: if the client does not
// end calls with their context itself, f runs on its own goroutine and is
// left behind at the deadline (go-redis ends it at its own timeout).
func (c *Client) bounded(ctx context.Context, f func(context.Context) error) error {
	if c.deadlines || ctx.Done() == nil {
		return f(ctx)
	}
	done := make(chan error, 1)
	go func() { done <- f(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops the shared pub/sub connection and the renewal of fair
// waiters' places. It does not release leases.
func (c *Client) Close() error {
	c.keeper.close()
	return c.wake.close()
}

// Obtain takes the lock on key for ttl, waiting up to o.Wait while another
// owner holds it.
//
// ctx bounds the wait and the hold: when ctx ends, the watchdog stops
// renewing, the lease runs out at its TTL and Lease.Context is cancelled.
// Use o.Wait, not a ctx timeout, to bound only the wait.
//
// Obtain returns an error matching ErrNotObtained when the lock stayed held;
// if ctx ended first, the error matches ctx.Err() as well. A ttl below
// MinTTL or above Options.FenceTTL is refused with an error that matches
// neither. Other errors come from Redis. When a try fails in a way that leaves open whether Redis ran it
// (a late or lost reply, ctx ending mid-call), Obtain releases that try by
// owner before it returns, detached from ctx and bounded by
// Options.ReleaseTimeout, so that the key is not left held by nobody for its
// whole TTL. For a reentrant Owner that release gives back the hold the try
// added, if it added one, and never one of the owner's earlier leases.
func (c *Client) Obtain(ctx context.Context, key string, ttl time.Duration, o ObtainOptions) (*Lease, error) {
	start := time.Now()
	l, err := c.obtain(ctx, key, ttl, o)
	c.opts.Hooks.obtained(key, time.Since(start), err)
	return l, err
}

func (c *Client) obtain(ctx context.Context, key string, ttl time.Duration, o ObtainOptions) (*Lease, error) {
	if err := checkArgs(key, ttl, c.opts.FenceTTL); err != nil {
		return nil, err
	}
	n := newNames(c.opts.Prefix, key)
	var waiter string // a fair waiter's id: one place in line for the whole Obtain
	if o.Fair {
		waiter = newOwnerToken()
	}
	setNX := c.opts.Unfenced && c.opts.Replicas == 0 && o.Wait == 0 && o.Owner == "" && !o.Fair
	try := func(ctx context.Context) (*Lease, time.Duration, error) {
		cl := o.claim()
		start := time.Now()
		var (
			ok  bool
			val int64
			err error
		)
		if setNX {
			ok, val, err = c.trySetNX(ctx, n, cl, ttl)
		} else {
			ok, val, err = c.try(ctx, n, cl, o.Wait > 0, ttl, waiter)
		}
		if err != nil {
			if classify(err).mayHaveRun() && !errors.Is(err, ErrNotReplicated) {
				c.releaseDetached(ctx, n, cl, "")
			}
			return nil, 0, err
		}
		if !ok {
			return nil, time.Duration(val) * time.Millisecond, nil
		}
		ops := &single{c: c, n: n, cl: cl, token: strconv.FormatInt(val, 10)}
		return newLease(ctx, n.key, val, ops, ttl, start, !o.Fixed, &c.opts), 0, nil
	}
	subscribe := func(ctx context.Context, wake chan struct{}) (<-chan struct{}, func(bool)) {
		ready := make(chan struct{})
		cancel := c.wake.subscribe(n.channel(), waiter, wake, func() { close(ready) })
		return ready, cancel
	}
	recheck := waitingRefresh
	if o.Fair && o.Wait > 0 {
		recheck = fairRecheck
		// The keeper renews the place from its first try on (renewing an
		// id with no place does nothing), until the Obtain returns.
		c.keeper.add(n, waiter)
		defer c.keeper.remove(n, waiter)
	}
	l, err := waitFor(ctx, key, o.Wait, &c.opts.Hooks, c.lineFor(o), recheck, try, subscribe)
	if err != nil && o.Fair && o.Wait > 0 {
		// Give up the place in line now, so that the next waiter need not
		// wait for its lease to end. A try whose outcome is unknown has
		// been released by owner above, which leaves it a tombstone: should
		// it still land, it neither grants nor queues.
		c.leaveDetached(ctx, n, waiter)
	}
	return l, err
}

// lineFor is the line a waiter queues in; a reentrant owner does not queue,
// since the line may be waiting for the lock the owner holds. A fair
// waiter does not either: its place is in Redis's line, which it must
// take on arrival, not once the waiters ahead of it in this process have
// gone.
func (c *Client) lineFor(o ObtainOptions) *lineup {
	if o.Owner != "" || o.Fair {
		return nil
	}
	return &c.line
}

// QueueLease is how long a fair waiter keeps its place in line after its
// last try. A waiter tries at least once a second while it waits, which
// renews its place; one that stops (killed, paused, cut off from Redis) is
// dropped once its lease ends. So it bounds how long a dead waiter can hold
// the line up, and how long a live one may stall (a GC pause, a stopped VM)
// without losing its place: three renewals in a row must go missing.
const QueueLease = waitingTTL

// queueLeaseArg is QueueLease as a script argument, boxed once.
var queueLeaseArg any = ms(QueueLease)

// leaveDetached takes a fair waiter's place out of line, even though ctx
// may have ended, bounded by ReleaseTimeout; it is best effort: a place it
// cannot remove is dropped when its lease ends.
func (c *Client) leaveDetached(ctx context.Context, n names, waiter string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.ReleaseTimeout)
	defer cancel()
	_ = c.bounded(rctx, func(ctx context.Context) error {
		return fairLeaveScript.Run(ctx, c.rdb, []string{n.lock, n.waiting, n.line, n.leases}, waiter, waitingTTLArg).Err()
	})
}

// try runs the obtain script once. It returns (true, token) when obtained and
// (false, remaining ttl in ms) when the lock is held by another owner. With
// wait, a held lock's waiting record is set (for waitingTTL), so that its
// release publishes a wake-up; locks nobody waits for are released without
// one.
//
// A fair try (waiter is not "") is granted only to the first in line or
// when nobody waits; with wait, it takes or renews waiter's place in line
// when not granted (see fair_obtain.lua).
func (c *Client) try(ctx context.Context, n names, cl claim, wait bool, ttl time.Duration, waiter string) (bool, int64, error) {
	var (
		cmd       *redis.Cmd
		confirmed bool
	)
	if waiter == "" {
		args := []any{cl.owner, ms(ttl), flag(cl.reentrant), flag(wait), c.fenceTTLArg, waitingTTLArg}
		if cl.reentrant {
			args = append(args, entryTTL(ttl))
		}
		cmd, confirmed = c.run(ctx, obtainScript, []string{n.lock, n.fence, n.waiting, n.gone(cl.id)}, args...)
	} else {
		cmd, confirmed = c.run(ctx, fairObtainScript, []string{n.lock, n.fence, n.waiting, n.line, n.leases, n.gone(cl.id)},
			cl.owner, ms(ttl), flag(cl.reentrant), flag(wait), c.fenceTTLArg, waitingTTLArg, waiter, queueLeaseArg, entryTTL(ttl))
	}
	res, err := cmd.Int64()
	if err != nil {
		return false, 0, fmt.Errorf("lock: obtain %q: %w", n.key, err)
	}
	switch {
	case res > 0 && !confirmed:
		// A failover now could promote a replica without the grant, and
		// hand the lock to someone else: give it back. The release takes
		// back this hold only (owner and token), a re-entry's too.
		rerr := c.releaseDetached(ctx, n, cl, strconv.FormatInt(res, 10))
		return false, 0, errors.Join(fmt.Errorf("%w: %w: %q was granted, but fewer than %d replicas confirmed it within %s; given back",
			ErrNotObtained, ErrNotReplicated, n.key, c.opts.Replicas, c.opts.ReplicaTimeout), rerr)
	case res > 0:
		return true, res, nil
	case res < 0:
		return false, -1 - res, nil
	}
	// obtain.lua never answers 0 (see its header): a server that does runs
	// some other script under that name, and its answer is not a grant.
	return false, 0, fmt.Errorf("lock: obtain %q: unexpected reply 0 from the obtain script", n.key)
}

// trySetNX is the try of an unfenced lock that will not wait and is not
// reentrant (see Options.Unfenced): one SET NX PX, as redislock's, with no
// script. The token is this process's clock in microseconds: there is no
// fence record to keep above. Unlike the scripted try it does not look for
// its tombstone, so a try whose reply was lost and that lands after its
// clean-up holds the key, for nobody, until its ttl. When the key is
// taken it asks the obtain script, which also reads a released record of
// an older version (a key that starts with '|') as free.
func (c *Client) trySetNX(ctx context.Context, n names, cl claim, ttl time.Duration) (bool, int64, error) {
	token := max(time.Now().UnixMicro(), 1)
	ok, err := c.rdb.SetNX(ctx, n.lock, cl.owner+"|"+strconv.FormatInt(token, 10)+"|1", ttl).Result()
	if err != nil {
		return false, 0, fmt.Errorf("lock: obtain %q: %w", n.key, err)
	}
	if ok {
		return true, token, nil
	}
	return c.try(ctx, n, cl, false, ttl, "")
}

// flag is a script's boolean argument, boxed once: the obtain script is on
// every obtain's path, and each argument boxed per call is an allocation.
func flag(b bool) any {
	if b {
		return flagOn
	}
	return flagOff
}

var flagOn, flagOff any = "1", "0"

// unfencedArg is the fence record's TTL argument of a lock without one
// (Options.Unfenced): the scripts then leave the record alone.
var unfencedArg any = "0"

// refresh runs the owner-checked pexpire; token "" matches any token of the
// owner. A reentrant try's record is renewed with its hold, so that the
// release finds it however long the lease lasts.
func (c *Client) refresh(ctx context.Context, n names, cl claim, token string, ttl time.Duration) error {
	keys, args := []string{n.lock, n.fence}, []any{cl.owner, token, ms(ttl), c.fenceTTLArg}
	if cl.reentrant {
		keys, args = append(keys, n.gone(cl.id)), append(args, entryTTL(ttl))
	}
	cmd, confirmed := c.run(ctx, refreshScript, keys, args...)
	res, err := cmd.Int64()
	if err != nil {
		return fmt.Errorf("lock: refresh %q: %w", n.key, err)
	}
	if res != 1 {
		return fmt.Errorf("%w: %q is no longer held by this lease", ErrLockLost, n.key)
	}
	if !confirmed {
		// The primary extended it, a promoted replica may not have: the
		// lease keeps the deadline it had (see Lease's renewal handling).
		return fmt.Errorf("%w: the renewal of %q reached fewer than %d replicas within %s", ErrNotReplicated, n.key, c.opts.Replicas, c.opts.ReplicaTimeout)
	}
	return nil
}

// run runs script; with Options.Replicas, WAIT follows it in one pipeline
// on the same connection (WAIT counts the replicas that acknowledged that
// connection's writes), and confirmed reports whether enough did. Without
// Replicas, confirmed is always true.
func (c *Client) run(ctx context.Context, script *redis.Script, keys []string, args ...any) (cmd *redis.Cmd, confirmed bool) {
	if c.opts.Replicas == 0 {
		return script.Run(ctx, c.rdb, keys, args...), true
	}
	cmd, wait := c.runAndWait(ctx, script.EvalSha, keys, args)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		// A server that never saw the script (a restart, a new primary)
		// gets it whole, once.
		cmd, wait = c.runAndWait(ctx, script.Eval, keys, args)
	}
	n, err := wait.Int64()
	return cmd, err == nil && n >= int64(c.opts.Replicas)
}

func (c *Client) runAndWait(ctx context.Context, run func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd, keys []string, args []any) (*redis.Cmd, *redis.Cmd) {
	pipe := c.rdb.Pipeline()
	cmd := run(ctx, pipe, keys, args...)
	wait := pipe.Do(ctx, "WAIT", c.opts.Replicas, ms(c.opts.ReplicaTimeout))
	_, _ = pipe.Exec(ctx) // each command keeps its own error
	return cmd, wait
}

// release runs the owner-checked delete; token "" matches any token of
// the owner. Such a release by owner is the clean-up of a try whose outcome
// is unknown (or of a RedLock instance that had not granted the lease):
// when the lock is not the owner's, it leaves a tombstone that the try,
// should it still land, finds (see release.lua). A reentrant owner's tries
// share it, so each of its releases goes by the try's record instead, which
// names the hold that try added (and is the tombstone if it added none).
func (c *Client) release(ctx context.Context, n names, cl claim, token string) error {
	keys, args := []string{n.lock, n.waiting}, []any{cl.owner, token}
	switch {
	case cl.reentrant:
		keys, args = append(keys, n.gone(cl.id)), append(args, ms(goneTTL), flagOn)
	case token == "":
		keys, args = append(keys, n.gone(cl.id)), append(args, ms(goneTTL))
	}
	res, err := releaseScript.Run(ctx, c.rdb, keys, args...).Int64()
	if err != nil {
		return fmt.Errorf("lock: release %q: %w", n.key, err)
	}
	if res < 0 {
		return fmt.Errorf("%w: %q had expired or been taken before release", ErrLockLost, n.key)
	}
	return nil
}

// releaseDetached releases the claim's hold even though ctx may have
// ended, bounded by ReleaseTimeout; it is best effort: a key it cannot
// reach expires at its TTL.
func (c *Client) releaseDetached(ctx context.Context, n names, cl claim, token string) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.ReleaseTimeout)
	defer cancel()
	return c.bounded(rctx, func(ctx context.Context) error { return c.release(ctx, n, cl, token) })
}

// single is the lease backend for one Client.
type single struct {
	c     *Client
	n     names
	cl    claim
	token string
}

func (s *single) refresh(ctx context.Context, ttl time.Duration) (bool, error) {
	err := s.c.bounded(ctx, func(ctx context.Context) error { return s.c.refresh(ctx, s.n, s.cl, s.token, ttl) })
	return classify(err).mayHaveRun(), err
}

func (s *single) release(ctx context.Context) error {
	return s.c.releaseDetached(ctx, s.n, s.cl, s.token)
}
