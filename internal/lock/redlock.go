package lock

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedLockOptions configure a RedLock.
type RedLockOptions struct {
	// Options apply to every instance (Prefix, FenceTTL, ReleaseTimeout);
	// Hooks report on the RedLock as a whole.
	Options
	// InstanceTimeout bounds each call to one instance, so a dead or slow
	// instance costs at most this much. It should be far below the TTL.
	// Default 50ms. Build the instances' clients with InstanceOptions, so
	// that they honour it and report a dead instance as one.
	InstanceTimeout time.Duration
}

// InstanceOptions adjusts o for a client of one RedLock instance and returns
// it. ContextTimeoutEnabled makes go-redis honour the instance timeout on
// reads as well as dials. RedLock retries on its own, so the client must
// not: MaxRetries -1 and DialerRetries 1, and a DialerRetryTimeout of 1ms,
// because go-redis sleeps that long after a failed dial even when it will
// not retry (100ms by default, as long as a typical instance timeout). A
// refused connection must come back as a refusal, not as a timeout: RedLock
// fails fast when a majority refuses, but keeps waiting through timeouts,
// which may only mean load.
func InstanceOptions(o *redis.Options) *redis.Options {
	o.ContextTimeoutEnabled = true
	o.MaxRetries = -1
	o.DialerRetries = 1
	o.DialerRetryTimeout = time.Millisecond
	return o
}

// RedLock is the Redlock algorithm over N independent Redis servers (not
// replicas of each other): a lease is held while a majority, N/2+1, holds
// the key. See the package documentation for what it does and does not
// promise. It is safe for concurrent use; Close it when done.
type RedLock struct {
	nodes   []*Client
	opts    RedLockOptions
	quorum  int
	timeout time.Duration
	// slow marks instances whose last call was refused or got no reply in
	// time: a slow gate is asked last (see orderNow), and the mark is
	// cleared as soon as the instance answers again. A call that never got
	// a connection from the pool in time does not count: that queue is the
	// client's own.
	slow []atomic.Bool
	line lineup
}

// NewRedLock returns a RedLock over clients, which must be independent
// servers. It returns an error if clients is empty, opts.Prefix contains
// braces, opts.Replicas is set (RedLock's servers are independent, with
// no replicas to wait for), or a client retries commands (build them with
// InstanceOptions).
func NewRedLock(clients []redis.UniversalClient, opts RedLockOptions) (*RedLock, error) {
	if len(clients) == 0 {
		return nil, errors.New("lock: NewRedLock needs at least one client")
	}
	if opts.Replicas != 0 {
		return nil, errors.New("lock: Options.Replicas is for one primary with replicas; RedLock's servers are independent")
	}
	var err error
	if opts.Options, err = opts.Options.withDefaults(); err != nil {
		return nil, err
	}
	if opts.InstanceTimeout <= 0 {
		opts.InstanceTimeout = 50 * time.Millisecond
	}
	nodeOpts := opts.Options
	nodeOpts.Hooks = Hooks{}
	r := &RedLock{opts: opts, quorum: len(clients)/2 + 1, timeout: opts.InstanceTimeout, slow: make([]atomic.Bool, len(clients))}
	for i, c := range clients {
		n, err := New(c, nodeOpts)
		if err != nil {
			return nil, fmt.Errorf("lock: RedLock instance %d: %w", i, err)
		}
		r.nodes = append(r.nodes, n)
	}
	return r, nil
}

// Close stops the pub/sub connections of all instances.
func (r *RedLock) Close() error {
	var errs []error
	for _, n := range r.nodes {
		errs = append(errs, n.Close())
	}
	return errors.Join(errs...)
}

// Obtain takes the lock on a majority of the instances, as Client.Obtain
// does on one; the errors are the same. It returns as soon as a majority has
// granted the lock, without waiting for slower instances. The lease's
// validity is the TTL minus the time the acquisition took minus the drift
// allowance; if that is not positive, or no majority granted it, every
// instance that did (or may yet) is released and the attempt counts as not
// obtained.
//
// A majority that refuses connections is an outage: Obtain then fails at
// once, even with a Wait. A majority that only times out may be busy, not
// dead, so a waiter keeps trying until its Wait or ctx runs out.
func (r *RedLock) Obtain(ctx context.Context, key string, ttl time.Duration, o ObtainOptions) (*Lease, error) {
	start := time.Now()
	l, err := r.obtain(ctx, key, ttl, o)
	r.opts.Hooks.obtained(key, time.Since(start), err)
	return l, err
}

type nodeResult struct {
	i   int
	ok  bool
	val int64
	err error
}

// instanceFunc is a call to one instance.
type instanceFunc func(ctx context.Context, i int, c *Client) (bool, int64, error)

func (r *RedLock) obtain(ctx context.Context, key string, ttl time.Duration, o ObtainOptions) (*Lease, error) {
	if err := checkArgs(key, ttl, r.opts.FenceTTL); err != nil {
		return nil, err
	}
	if o.Fair {
		return nil, errors.New("lock: RedLock has no fair mode: a line on each instance would not be one line")
	}
	n := newNames(r.opts.Prefix, key)
	try := func(ctx context.Context) (*Lease, time.Duration, error) {
		cl := o.claim()
		sent := time.Now()
		b := r.gated(ctx, r.orderNow(key), func(ctx context.Context, _ int, c *Client) (bool, int64, error) {
			return c.try(ctx, n, cl, o.Wait > 0, ttl, "")
		})
		if o.Wait > 0 && b.yes() == 0 && b.gate() >= 0 {
			// The gate refused: the other instances were not asked.
			r.markWaiting(ctx, n, b)
		}
		if err := ctx.Err(); err != nil {
			r.undo(ctx, n, cl, b)
			return nil, 0, notObtainedCtx(ctx, key)
		}
		tokens := make([]string, len(r.nodes))
		var got int
		var token int64
		retry := ttl
		for _, x := range b.res {
			switch {
			case x.ok:
				got++
				tokens[x.i] = strconv.FormatInt(x.val, 10)
				token = max(token, x.val)
			case x.err == nil:
				retry = min(retry, time.Duration(x.val)*time.Millisecond)
			}
		}
		took := time.Since(sent)
		validity := ttl - took - drift(ttl)
		if got >= r.quorum && validity > 0 {
			// Instances still answering may grant it too: the lease renews
			// and releases them by owner, or for a reentrant owner by the
			// try's record (their token is "").
			q := &quorumBackend{r: r, n: n, cl: cl, tokens: tokens}
			return newLease(ctx, key, token, q, ttl, sent, !o.Fixed, &r.opts.Options), 0, nil
		}
		r.undo(ctx, n, cl, b)
		if got >= r.quorum && o.Wait <= 0 {
			// Nobody holds it: the grants came too late to be trusted.
			// "Held" would send the caller looking for a holder.
			return nil, 0, fmt.Errorf("%w: %q: a majority granted it, but the grants took %v of its TTL of %v, which leaves no validity",
				ErrNotObtained, key, took.Round(time.Millisecond), ttl)
		}
		if failed := b.failed(); failed > len(r.nodes)-r.quorum {
			// No majority answered. Instances that refused the connection
			// are down: that is an outage, not contention, so fail now
			// rather than wait for a release nobody can send. Timeouts may
			// only mean load, so a waiter tries again shortly.
			if o.Wait <= 0 || !b.allTimeouts() {
				return nil, 0, fmt.Errorf("%w: %q: %d of %d instances failed: %w",
					ErrNotObtained, key, failed, len(r.nodes), b.errs())
			}
			// Back off by a few instance timeouts, at random: waiters that
			// all retried at once would add the very load that made the
			// instances slow. A release still wakes a waiter at once.
			retry = min(retry, 2*r.timeout+rand.N(4*r.timeout))
		}
		return nil, retry, nil
	}
	subscribe := func(ctx context.Context, wake chan struct{}) (<-chan struct{}, func(bool)) {
		// Wait for a majority of confirmations, not all: a release that
		// reaches a majority reaches one of them, and a dead instance
		// would never confirm.
		ready := make(chan struct{})
		var confirmed atomic.Int32
		need := int32(r.quorum)
		var cancels []func(bool)
		channel := n.channel()
		for _, c := range r.nodes {
			cancels = append(cancels, c.wake.subscribe(channel, "", wake, func() {
				if confirmed.Add(1) == need {
					close(ready)
				}
			}))
		}
		return ready, func(linger bool) {
			for _, c := range cancels {
				c(linger)
			}
		}
	}
	line := &r.line
	if o.Owner != "" {
		line = nil // see Client.lineFor
	}
	return waitFor(ctx, key, o.Wait, &r.opts.Hooks, line, waitingRefresh, try, subscribe)
}

// undo gives back a failed attempt, in the background, so that the next
// try or the caller's error does not wait for it. Instances that said yes
// are released by token; instances that did not answer in time may have
// said yes, or may yet, so they are released by owner (a reentrant owner's
// by the try's record, which gives back only the hold this try added) once
// their call has ended. Each try has an owner or a record of its own, so
// this can never release a later try.
func (r *RedLock) undo(ctx context.Context, n names, cl claim, b *ballot) {
	release := func(x nodeResult) {
		token := ""
		switch {
		case x.ok:
			token = strconv.FormatInt(x.val, 10)
		case x.err == nil || !classify(x.err).mayHaveRun():
			return
		}
		// Best effort: an instance we cannot reach expires the key at its TTL.
		_ = r.nodes[x.i].releaseDetached(ctx, n, cl, token)
	}
	for _, x := range b.res {
		go release(x)
	}
	b.late(release)
}

// markWaiting sets the waiting record on the instances that were not asked
// because the gate refused the try: otherwise only the gate would know that
// someone waits, and if it failed before the release, the majority left
// would release without a wake-up. It waits for the answers, at most an
// instance timeout, so that a release that comes after the waiter's
// subscription publishes. Instances marked slow are left out, so that a
// stalled one does not cost every waiting try an instance timeout; a
// record that did not land is made up for by the waiter's own timer.
func (r *RedLock) markWaiting(ctx context.Context, n names, tried *ballot) {
	b := r.newBallot(ctx, r.timeout)
	for i, asked := range tried.asked {
		if !asked && !r.slow[i].Load() {
			b.ask(i, func(ctx context.Context, _ int, c *Client) (bool, int64, error) {
				return false, 0, c.rdb.Set(ctx, n.waiting, "1", waitingTTL).Err()
			})
		}
	}
	b.collect(func() bool { return false })
}

// order is the sequence in which contenders for key ask the instances: a
// rotation that starts at an instance chosen by hashing the key, the same
// for every client.
func (r *RedLock) order(key string) []int {
	h := fnv.New32a()
	h.Write([]byte(key))
	start := int(h.Sum32() % uint32(len(r.nodes)))
	out := make([]int, len(r.nodes))
	for k := range out {
		out[k] = (start + k) % len(r.nodes)
	}
	return out
}

// orderNow is order, but when the key's gate is marked slow it goes last,
// so that a stalled instance does not cost every try on its keys an
// instance timeout. Only the gate moves, and only by one place: clients that
// disagree about it (each learns after a timeout of its own) then use one
// of two gates, and two contenders holding one gate each still leave the
// rest of the instances to decide, so one of them wins (see gated). Were
// the order free to change, three could each hold one instance of three
// and all fail, again and again.
func (r *RedLock) orderNow(key string) []int {
	order := r.order(key)
	if len(order) > 1 && r.slow[order[0]].Load() {
		order = append(order[1:], order[0])
	}
	return order
}

// gated asks the key's gate first, alone: the first instance in order that
// answers. Only if the gate grants the key are the remaining instances asked,
// in parallel, and only until a majority has said yes or a majority has
// become impossible. Without a gate, contenders asking all instances at once
// split the votes (each wins one instance, nobody a majority), give up
// together, retry together, and can livelock under a burst; with it, only
// the gate's winner goes on to collect a majority. Instances before the gate
// that did not answer are reported as failed; after a refusal by the gate
// the rest are not asked at all, which is safe, since a majority is still
// required.
func (r *RedLock) gated(ctx context.Context, order []int, f instanceFunc) *ballot {
	b := r.newBallot(ctx, r.timeout)
	for k, i := range order {
		b.ask(i, f)
		b.collect(func() bool { return b.answered(i) })
		x, ok := b.result(i)
		if !ok || x.err != nil {
			continue // unreachable: the next instance in order is the gate
		}
		if x.ok {
			for _, j := range order[k+1:] {
				b.ask(j, f)
			}
			b.collect(func() bool { return b.yes() >= r.quorum || b.yes()+b.open() < r.quorum })
		}
		break
	}
	return b
}

// ballot collects the answers of instances called in parallel. Each call
// runs on its own goroutine, bounded by the instance timeout; the collector
// stops waiting when it has what it needs, or an instance timeout after the
// last call began. Calls still running then are left behind: their answers
// go to late.
type ballot struct {
	r       *RedLock
	ctx     context.Context // the caller's
	timeout time.Duration   // per call
	out     chan nodeResult // buffered for every instance: no call ever blocks
	asked   []bool
	res     []nodeResult // the answers so far, in arrival order
	pending int          // asked, not answered
	limit   time.Time
}

func (r *RedLock) newBallot(ctx context.Context, timeout time.Duration) *ballot {
	return &ballot{r: r, ctx: ctx, timeout: timeout, out: make(chan nodeResult, len(r.nodes)), asked: make([]bool, len(r.nodes))}
}

func (b *ballot) ask(i int, f instanceFunc) {
	b.asked[i] = true
	b.pending++
	b.limit = time.Now().Add(b.timeout + time.Millisecond)
	go func() {
		ictx, cancel := context.WithTimeout(b.ctx, b.timeout)
		defer cancel()
		ok, val, err := f(ictx, i, b.r.nodes[i])
		switch o := classify(err); {
		case o.stalled() && b.ctx.Err() == nil:
			// Its own timeout, not the end of the caller's context.
			b.r.slow[i].Store(true)
		case o.heard():
			b.r.slow[i].Store(false)
		}
		b.out <- nodeResult{i: i, ok: ok, val: val, err: err}
	}()
}

// collect waits for answers until enough reports true, nothing is pending,
// or the time is up.
func (b *ballot) collect(enough func() bool) {
	b.collectBy(b.limit, enough)
}

// collectBy is collect with a limit of its own, no later than the ballot's.
func (b *ballot) collectBy(limit time.Time, enough func() bool) {
	if enough() || b.pending == 0 {
		return
	}
	timeout := time.NewTimer(time.Until(earlier(limit, b.limit)))
	defer timeout.Stop()
	for !enough() && b.pending > 0 {
		select {
		case x := <-b.out:
			b.res = append(b.res, x)
			b.pending--
		case <-timeout.C:
			return
		}
	}
}

func (b *ballot) result(i int) (nodeResult, bool) {
	for _, x := range b.res {
		if x.i == i {
			return x, true
		}
	}
	return nodeResult{}, false
}

// gate is the instance that answered first without an error: the gate of
// a gated ballot; -1 if none.
func (b *ballot) gate() int {
	for _, x := range b.res {
		if x.err == nil {
			return x.i
		}
	}
	return -1
}

func (b *ballot) answered(i int) bool {
	_, ok := b.result(i)
	return ok
}

// yes counts the instances that granted the call.
func (b *ballot) yes() int {
	k := 0
	for _, x := range b.res {
		if x.ok {
			k++
		}
	}
	return k
}

// open counts the instances that may still say yes: asked and pending, or
// not asked.
func (b *ballot) open() int {
	k := b.pending
	for _, asked := range b.asked {
		if !asked {
			k++
		}
	}
	return k
}

// pendingPrompt counts the instances asked, not yet answered, and not
// known to be slow.
func (b *ballot) pendingPrompt() int {
	k := 0
	for i, asked := range b.asked {
		if asked && !b.answered(i) && !b.r.slow[i].Load() {
			k++
		}
	}
	return k
}

// lost counts the instances that answered that the lock is not ours.
func (b *ballot) lost() int {
	k := 0
	for _, x := range b.res {
		if errors.Is(x.err, ErrLockLost) {
			k++
		}
	}
	return k
}

// failed counts the instances asked that did not answer: an error, or no
// answer in time.
func (b *ballot) failed() int {
	k := b.pending
	for _, x := range b.res {
		if x.err != nil {
			k++
		}
	}
	return k
}

// unsure reports whether some call may have run, or may yet run, without an
// answer saying so.
func (b *ballot) unsure() bool {
	if b.pending > 0 {
		return true
	}
	for _, x := range b.res {
		if classify(x.err).mayHaveRun() {
			return true
		}
	}
	return false
}

// allTimeouts reports whether every failure was a timeout (rather than a
// refused connection or an error reply): the instances may be busy.
func (b *ballot) allTimeouts() bool {
	for _, x := range b.res {
		if x.err != nil && !classify(x.err).busy() {
			return false
		}
	}
	return true
}

// errs is what went wrong on every instance that failed, each error named
// by its instance, and the calls that did not answer: one error that
// matches each of them (errors.Is). An outage names every failure, not
// only the first, so that a refusal is told from a timeout elsewhere.
func (b *ballot) errs() error {
	var all instanceErrs
	for _, x := range b.res {
		if x.err != nil {
			all = append(all, fmt.Errorf("instance %d: %w", x.i, x.err))
		}
	}
	if b.pending > 0 {
		all = append(all, fmt.Errorf("%d instances did not answer within %v: %w", b.pending, b.timeout, context.DeadlineExceeded))
	}
	if len(all) == 0 {
		return nil
	}
	return all
}

// instanceErrs are the failures of several instances, on one line.
type instanceErrs []error

func (e instanceErrs) Error() string {
	parts := make([]string, len(e))
	for i, err := range e {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

func (e instanceErrs) Unwrap() []error { return e }

func (b *ballot) firstErr() error {
	for _, x := range b.res {
		if x.err != nil {
			return x.err
		}
	}
	if b.pending > 0 {
		return fmt.Errorf("lock: %d instances did not answer within %v: %w", b.pending, b.timeout, context.DeadlineExceeded)
	}
	return nil
}

// late hands the answers of calls still running to f, as they come in, on a
// goroutine of its own.
func (b *ballot) late(f func(nodeResult)) {
	if b.pending == 0 {
		return
	}
	go func(n int) {
		for range n {
			f(<-b.out)
		}
	}(b.pending)
}

// all asks every instance in parallel, each call bounded by timeout, and
// collects until enough.
func (r *RedLock) all(ctx context.Context, timeout time.Duration, f instanceFunc, enough func(*ballot) bool) *ballot {
	b := r.newBallot(ctx, timeout)
	for i := range r.nodes {
		b.ask(i, f)
	}
	b.collect(func() bool { return enough(b) })
	return b
}

// quorumBackend renews and releases a RedLock lease on every instance,
// returning once a majority has answered either way.
type quorumBackend struct {
	r      *RedLock
	n      names
	cl     claim
	tokens []string // per instance; "" where the instance did not grant it
}

// settled reports whether the outcome of a renewal or release is known: a
// majority said yes, or enough said no, or too many failed.
func (q *quorumBackend) settled(b *ballot) bool {
	ok := b.yes()
	return ok >= q.r.quorum || b.lost() > len(q.r.nodes)-q.r.quorum || ok+b.pending < q.r.quorum
}

func (q *quorumBackend) refresh(ctx context.Context, ttl time.Duration) (bool, error) {
	b := q.r.all(ctx, q.r.timeout, func(ctx context.Context, i int, c *Client) (bool, int64, error) {
		err := c.refresh(ctx, q.n, q.cl, q.tokens[i], ttl)
		return err == nil, 0, err
	}, q.settled)
	ok, lost := b.yes(), b.lost()
	switch {
	case ok >= q.r.quorum:
		return b.unsure(), nil
	case lost > len(q.r.nodes)-q.r.quorum:
		return b.unsure(), fmt.Errorf("%w: %q renewed on %d of %d instances, %d no longer hold it",
			ErrLockLost, q.n.key, ok, len(q.r.nodes), lost)
	default:
		return b.unsure(), fmt.Errorf("lock: refresh %q: renewed on %d of %d instances: %w",
			q.n.key, ok, len(q.r.nodes), b.firstErr())
	}
}

// release gives the lock back on every instance, each call bounded by
// ReleaseTimeout rather than the instance timeout: a release that gives up
// early would leave the key held on that instance for the rest of its TTL,
// and if that instance is the key's gate, every contender waits that long.
// It returns once settled (and the prompt instances have answered, or an
// instance timeout has passed); calls to slower instances go on in the
// background, each within its own ReleaseTimeout.
func (q *quorumBackend) release(ctx context.Context) error {
	start := time.Now()
	b := q.r.all(context.WithoutCancel(ctx), q.r.opts.ReleaseTimeout, func(ctx context.Context, i int, c *Client) (bool, int64, error) {
		err := c.release(ctx, q.n, q.cl, q.tokens[i])
		return err == nil, 0, err
	}, q.settled)
	ok, lost := b.yes(), b.lost()
	if ok >= q.r.quorum {
		// Give the instances not known to be slow an instance timeout to
		// answer too, so that once Release returns the lock is free
		// wherever Redis answers promptly; a stalled one (marked slow after
		// its first timeout) no longer holds every handoff up.
		b.collectBy(start.Add(q.r.timeout), func() bool { return b.pendingPrompt() == 0 })
		ok = b.yes()
	}
	switch {
	case ok >= q.r.quorum:
		return nil
	case lost > len(q.r.nodes)-q.r.quorum:
		return fmt.Errorf("%w: %q released on %d of %d instances, %d no longer held it",
			ErrLockLost, q.n.key, ok, len(q.r.nodes), lost)
	default:
		return fmt.Errorf("lock: release %q: released on %d of %d instances: %w",
			q.n.key, ok, len(q.r.nodes), b.firstErr())
	}
}
