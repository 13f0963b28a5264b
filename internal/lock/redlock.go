package lock

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
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
}

// NewRedLock returns a RedLock over clients, which must be independent
// servers. It panics if clients is empty or opts.Prefix contains braces.
func NewRedLock(clients []redis.UniversalClient, opts RedLockOptions) *RedLock {
	if len(clients) == 0 {
		panic("lock: NewRedLock needs at least one client")
	}
	opts.Options = opts.Options.withDefaults()
	if opts.InstanceTimeout <= 0 {
		opts.InstanceTimeout = 50 * time.Millisecond
	}
	nodeOpts := opts.Options
	nodeOpts.Hooks = Hooks{}
	r := &RedLock{opts: opts, quorum: len(clients)/2 + 1, timeout: opts.InstanceTimeout}
	for _, c := range clients {
		r.nodes = append(r.nodes, New(c, nodeOpts))
	}
	return r
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
// does on one; the errors are the same. The lease's validity is the TTL
// minus the time the acquisition took minus the drift allowance; if that is
// not positive, or fewer than a majority answered yes, every instance is
// released and the attempt counts as not obtained.
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

func (r *RedLock) obtain(ctx context.Context, key string, ttl time.Duration, o ObtainOptions) (*Lease, error) {
	if err := checkArgs(key, ttl); err != nil {
		return nil, err
	}
	n := newNames(r.opts.Prefix, key)
	owner, reentrant := o.Owner, o.Owner != ""
	if !reentrant {
		owner = newOwnerToken()
	}
	order := r.order(key)
	obtainOn := func(ctx context.Context, i int, c *Client) (bool, int64, error) {
		return c.try(ctx, n, owner, reentrant, o.Wait > 0, ttl)
	}
	try := func(ctx context.Context) (*Lease, time.Duration, error) {
		sent := time.Now()
		res := r.gated(ctx, order, obtainOn)
		if err := ctx.Err(); err != nil {
			r.releaseAll(ctx, n, owner, reentrant, res)
			return nil, 0, notObtainedCtx(ctx, key)
		}
		tokens := make([]string, len(r.nodes))
		var got int
		var token int64
		retry := ttl
		for _, x := range res {
			switch {
			case x.ok:
				got++
				tokens[x.i] = strconv.FormatInt(x.val, 10)
				token = max(token, x.val)
			case x.err == nil:
				retry = min(retry, time.Duration(x.val)*time.Millisecond)
			}
		}
		validity := ttl - time.Since(sent) - drift(ttl)
		if got >= r.quorum && validity > 0 {
			b := &quorumBackend{r: r, n: n, owner: owner, tokens: tokens}
			return newLease(ctx, key, token, b, ttl, sent, !o.Fixed, &r.opts.Hooks), 0, nil
		}
		r.releaseAll(ctx, n, owner, reentrant, res)
		if failed := countErr(res); failed > len(r.nodes)-r.quorum {
			// No majority answered. Instances that refused the connection
			// are down: that is an outage, not contention, so fail now
			// rather than wait for a release nobody can send. Timeouts may
			// only mean load, so a waiter tries again shortly.
			if o.Wait <= 0 || !allTimeouts(res) {
				return nil, 0, fmt.Errorf("%w: %q: %d of %d instances failed: %w",
					ErrNotObtained, key, failed, len(r.nodes), firstErr(res))
			}
			// Back off by a few instance timeouts, at random: waiters that
			// all retried at once would add the very load that made the
			// instances slow. A release still wakes a waiter at once.
			retry = min(retry, 2*r.timeout+rand.N(4*r.timeout))
		}
		return nil, retry, nil
	}
	subscribe := func(ctx context.Context, wake chan struct{}) ([]<-chan struct{}, func(bool)) {
		var ready []<-chan struct{}
		var cancels []func(bool)
		channel := n.channel()
		for _, c := range r.nodes {
			rd, cancel := c.wake.subscribe(ctx, channel, wake)
			ready = append(ready, rd)
			cancels = append(cancels, cancel)
		}
		return ready, func(linger bool) {
			for _, c := range cancels {
				c(linger)
			}
		}
	}
	return waitFor(ctx, key, o.Wait, &r.opts.Hooks, try, subscribe)
}

func firstErr(res []nodeResult) error {
	for _, x := range res {
		if x.err != nil {
			return x.err
		}
	}
	return nil
}

// allTimeouts reports whether every failed instance timed out (rather than
// refusing the connection or answering with an error).
func allTimeouts(res []nodeResult) bool {
	for _, x := range res {
		if x.err != nil && !errors.Is(x.err, context.DeadlineExceeded) {
			return false
		}
	}
	return true
}

func countErr(res []nodeResult) int {
	k := 0
	for _, x := range res {
		if x.err != nil {
			k++
		}
	}
	return k
}

// releaseAll undoes a failed attempt. Instances that said yes are released
// by token; instances that did not answer in time may have said yes, so they
// are released by owner, except for reentrant owners, whose earlier holds
// such a release could take away (those keys simply expire).
func (r *RedLock) releaseAll(ctx context.Context, n names, owner string, reentrant bool, res []nodeResult) {
	tokens := make([]string, len(r.nodes))
	todo := make([]bool, len(r.nodes))
	for _, x := range res {
		switch {
		case x.ok:
			tokens[x.i], todo[x.i] = strconv.FormatInt(x.val, 10), true
		case x.err != nil && !reentrant:
			todo[x.i] = true
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.ReleaseTimeout)
	defer cancel()
	r.each(rctx, func(ctx context.Context, i int, c *Client) (bool, int64, error) {
		if !todo[i] {
			return false, 0, nil
		}
		// Best effort: an instance we cannot reach expires the key at its TTL.
		return false, 0, c.release(ctx, n, owner, tokens[i])
	})
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

// gated asks the key's gate first, alone: the first instance in order that
// answers. Only if the gate grants the key are the remaining instances asked,
// in parallel. Without a gate, contenders asking all instances at once split
// the votes (each wins one instance, nobody a majority), give up together,
// retry together, and can livelock under a burst; with it, only the gate's
// winner goes on to collect a majority. Instances before the gate that did
// not answer are reported as failed; after a refusal by the gate the rest
// are not asked at all, which is safe, since a majority is still required.
func (r *RedLock) gated(ctx context.Context, order []int, f func(context.Context, int, *Client) (bool, int64, error)) []nodeResult {
	var res []nodeResult
	for k, i := range order {
		x := r.eachOf(ctx, []int{i}, f)[0]
		res = append(res, x)
		if x.err != nil {
			continue // unreachable: the next instance in order is the gate
		}
		if x.ok {
			res = append(res, r.eachOf(ctx, order[k+1:], f)...)
		}
		break
	}
	return res
}

// each runs f on every instance in parallel, each bounded by the instance
// timeout, and returns when all have answered or timed out. A call that
// outlives its timeout is abandoned, not awaited; its goroutine ends when
// go-redis gives up on it.
func (r *RedLock) each(ctx context.Context, f func(context.Context, int, *Client) (bool, int64, error)) []nodeResult {
	all := make([]int, len(r.nodes))
	for i := range all {
		all[i] = i
	}
	return r.eachOf(ctx, all, f)
}

// eachOf is each over the instances listed in idx; results follow idx.
func (r *RedLock) eachOf(ctx context.Context, idx []int, f func(context.Context, int, *Client) (bool, int64, error)) []nodeResult {
	out := make(chan nodeResult, len(idx))
	for _, i := range idx {
		c := r.nodes[i]
		go func() {
			ictx, cancel := context.WithTimeout(ctx, r.timeout)
			defer cancel()
			ok, val, err := f(ictx, i, c)
			out <- nodeResult{i: i, ok: ok, val: val, err: err}
		}()
	}
	timeout := time.NewTimer(r.timeout + time.Millisecond)
	defer timeout.Stop()
	got := make(map[int]nodeResult, len(idx))
	for range idx {
		select {
		case x := <-out:
			got[x.i] = x
			continue
		case <-timeout.C:
		}
		break
	}
	res := make([]nodeResult, len(idx))
	for k, i := range idx {
		x, ok := got[i]
		if !ok {
			x = nodeResult{i: i, err: fmt.Errorf("lock: instance %d: %w", i, context.DeadlineExceeded)}
		}
		res[k] = x
	}
	return res
}

// quorumBackend renews and releases a RedLock lease on every instance.
type quorumBackend struct {
	r      *RedLock
	n      names
	owner  string
	tokens []string // per instance; "" where the instance did not grant it
}

func (q *quorumBackend) refresh(ctx context.Context, ttl time.Duration) error {
	res := q.r.each(ctx, func(ctx context.Context, i int, c *Client) (bool, int64, error) {
		err := c.refresh(ctx, q.n, q.owner, q.tokens[i], ttl)
		return err == nil, 0, err
	})
	ok, lost := 0, 0
	for _, x := range res {
		switch {
		case x.ok:
			ok++
		case errors.Is(x.err, ErrLockLost):
			lost++
		}
	}
	switch {
	case ok >= q.r.quorum:
		return nil
	case lost > len(q.r.nodes)-q.r.quorum:
		return fmt.Errorf("%w: %q renewed on %d of %d instances, %d no longer hold it",
			ErrLockLost, q.n.key, ok, len(q.r.nodes), lost)
	default:
		return fmt.Errorf("lock: refresh %q: renewed on %d of %d instances: %w",
			q.n.key, ok, len(q.r.nodes), firstErr(res))
	}
}

func (q *quorumBackend) release(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.r.opts.ReleaseTimeout)
	defer cancel()
	res := q.r.each(rctx, func(ctx context.Context, i int, c *Client) (bool, int64, error) {
		err := c.release(ctx, q.n, q.owner, q.tokens[i])
		return err == nil, 0, err
	})
	ok, lost := 0, 0
	for _, x := range res {
		switch {
		case x.ok:
			ok++
		case errors.Is(x.err, ErrLockLost):
			lost++
		}
	}
	switch {
	case ok >= q.r.quorum:
		return nil
	case lost > len(q.r.nodes)-q.r.quorum:
		return fmt.Errorf("%w: %q released on %d of %d instances, %d no longer held it",
			ErrLockLost, q.n.key, ok, len(q.r.nodes), lost)
	default:
		return fmt.Errorf("lock: release %q: released on %d of %d instances: %w",
			q.n.key, ok, len(q.r.nodes), firstErr(res))
	}
}
