package lock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// attempt tries to obtain once. It returns a lease, or the time after which
// the current holder's lease runs out, or an error that ends the wait.
type attempt func(ctx context.Context) (*Lease, time.Duration, error)

// subscriber registers wake for release messages of one lock and returns
// channels that close once each subscription is confirmed, and a cancel;
// cancel(true) lets the channel stay subscribed for a moment (see linger).
type subscriber func(ctx context.Context, wake chan struct{}) ([]<-chan struct{}, func(linger bool))

// minRecheck bounds how soon a waiter re-checks a lock whose remaining TTL
// Redis could not tell (it was just expiring).
const minRecheck = 2 * time.Millisecond

// waitFor runs try until it obtains the lock, wait runs out, or ctx ends.
// Between tries it sleeps until a release message arrives or the holder's
// TTL would have run out (plus jitter), whichever is first: the timer is the
// fallback for a lost message or a holder that died without releasing.
func waitFor(ctx context.Context, key string, wait time.Duration, hooks *Hooks, try attempt, subscribe subscriber) (l *Lease, err error) {
	l, retry, err := try(ctx)
	if l != nil || err != nil {
		return l, orCtxErr(ctx, key, err)
	}
	if wait <= 0 {
		return nil, fmt.Errorf("%w: %q is held", ErrNotObtained, key)
	}

	start := time.Now()
	deadline := start.Add(wait)
	wakeups := 0
	defer func() { hooks.waited(key, time.Since(start), wakeups) }()

	wake := make(chan struct{}, 1)
	ready, cancel := subscribe(ctx, wake)
	// A waiter that got the lock leaves the channel subscribed for a moment,
	// since more contention usually follows; one that gave up leaves none.
	defer func() { cancel(l != nil) }()

	timer := time.NewTimer(recheckAfter(retry, deadline))
	defer timer.Stop()

	// A release published before our subscription is confirmed would be
	// missed, so try again only once Redis has confirmed it.
confirm:
	for _, r := range ready {
		select {
		case <-r:
		case <-wake:
			wakeups++
		case <-timer.C:
			break confirm
		case <-ctx.Done():
			return nil, notObtainedCtx(ctx, key)
		}
	}

	for {
		l, retry, err = try(ctx)
		if l != nil || err != nil {
			return l, orCtxErr(ctx, key, err)
		}
		if !time.Now().Before(deadline) {
			return nil, fmt.Errorf("%w: %q still held after waiting %v", ErrNotObtained, key, wait)
		}
		timer.Reset(recheckAfter(retry, deadline))
		select {
		case <-wake:
			wakeups++
		case <-timer.C:
		case <-ctx.Done():
			return nil, notObtainedCtx(ctx, key)
		}
	}
}

// orCtxErr reports a failed try as "not obtained" when it failed because ctx
// ended.
func orCtxErr(ctx context.Context, key string, err error) error {
	if err != nil && ctx.Err() != nil && !errors.Is(err, ErrNotObtained) {
		return notObtainedCtx(ctx, key)
	}
	return err
}

func notObtainedCtx(ctx context.Context, key string) error {
	return fmt.Errorf("%w: waiting for %q: %w", ErrNotObtained, key, ctx.Err())
}

// recheckAfter is the fallback sleep: the holder's remaining TTL plus up to
// 10% jitter (so waiters do not all re-check at once), capped at the
// deadline.
func recheckAfter(remaining time.Duration, deadline time.Time) time.Duration {
	if remaining < minRecheck {
		remaining = minRecheck
	}
	d := remaining + rand.N(remaining/10+time.Millisecond)
	if left := time.Until(deadline); d > left {
		d = max(left, 0)
	}
	return d
}

// notifier multiplexes the wake-up channels of every waiter of one Client
// over a single pub/sub connection. A channel is subscribed while it has
// waiters and unsubscribed when the last one leaves.
type notifier struct {
	rdb redis.UniversalClient

	mu     sync.Mutex
	ps     *redis.PubSub
	done   chan struct{} // closed when the reader goroutine exits
	topics map[string]*topic
	closed bool
}

// topic is one lock's channel. Its waiters queue in arrival order; a release
// wakes only the first, since only one of them could win anyway (the others
// would just hit Redis and go back to sleep). The first keeps its place until
// it obtains the lock or leaves, which makes the wait fair within a Client.
type topic struct {
	waiters   []chan struct{}
	ready     chan struct{}
	confirmed bool
	idle      *time.Timer // pending unsubscribe while lingering
}

// linger is how long a channel stays subscribed after its last waiter got
// the lock, so that a burst of contention does not pay for SUBSCRIBE and its
// confirmation on every handoff.
const linger = 500 * time.Millisecond

// subscribeTimeout bounds sending SUBSCRIBE (and dialling for it).
const subscribeTimeout = 250 * time.Millisecond

func newNotifier(rdb redis.UniversalClient) *notifier {
	return &notifier{rdb: rdb, topics: make(map[string]*topic)}
}

var errClosed = errors.New("lock: client closed")

// subscribe adds wake to channel's waiters. The returned channel closes when
// Redis has confirmed the subscription. A failed SUBSCRIBE is not an error:
// go-redis resubscribes when it reconnects, and waiters fall back to their
// timers meanwhile.
func (n *notifier) subscribe(ctx context.Context, channel string, wake chan struct{}) (<-chan struct{}, func(linger bool)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		// Nothing will ever wake this waiter; its timer still works.
		return nil, func(bool) {}
	}
	if n.ps == nil {
		n.ps = n.rdb.Subscribe(context.WithoutCancel(ctx))
		n.done = make(chan struct{})
		go n.read(n.ps.ChannelWithSubscriptions(), n.done)
	}
	t := n.topics[channel]
	if t == nil {
		t = &topic{ready: make(chan struct{})}
		n.topics[channel] = t
		// Bounded, since n.mu is held: an unreachable server must not stall
		// every waiter of this Client for a whole dial timeout.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), subscribeTimeout)
		_ = n.ps.Subscribe(sctx, channel) // see above
		cancel()
	}
	if t.idle != nil {
		t.idle.Stop()
		t.idle = nil
	}
	t.waiters = append(t.waiters, wake)
	return t.ready, func(linger bool) { n.unsubscribe(channel, wake, linger) }
}

func (n *notifier) unsubscribe(channel string, wake chan struct{}, lingering bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	t := n.topics[channel]
	if t == nil {
		return
	}
	i := slices.Index(t.waiters, wake)
	if i < 0 {
		return
	}
	t.waiters = slices.Delete(t.waiters, i, i+1)
	if len(t.waiters) > 0 {
		select {
		case <-wake:
			// It left with a wake-up it did not use: pass it on, or the
			// next waiter would sleep until its fallback timer.
			t.wakeFirst()
		default:
		}
		return
	}
	if n.closed {
		return
	}
	if lingering {
		t.idle = time.AfterFunc(linger, func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			if n.topics[channel] == t && len(t.waiters) == 0 && !n.closed {
				n.drop(channel)
			}
		})
		return
	}
	n.drop(channel)
}

// drop unsubscribes channel; n.mu must be held.
func (n *notifier) drop(channel string) {
	delete(n.topics, channel)
	// If the write fails the connection is broken; go-redis has already
	// dropped the channel from its set, so it will not resubscribe it.
	_ = n.ps.Unsubscribe(context.Background(), channel)
}

// read dispatches messages until the pub/sub is closed.
func (n *notifier) read(ch <-chan interface{}, done chan struct{}) {
	defer close(done)
	for m := range ch {
		switch m := m.(type) {
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			n.mu.Lock()
			if t := n.topics[m.Channel]; t != nil {
				if !t.confirmed {
					t.confirmed = true
					close(t.ready)
				} else {
					// A resubscription after a reconnect: messages may
					// have been lost meanwhile, so let every waiter
					// re-check now rather than at its fallback timer.
					t.wakeAll()
				}
			}
			n.mu.Unlock()
		case *redis.Message:
			n.mu.Lock()
			if t := n.topics[m.Channel]; t != nil {
				t.wakeFirst()
			}
			n.mu.Unlock()
		}
	}
}

func (t *topic) wakeFirst() {
	if len(t.waiters) > 0 {
		select {
		case t.waiters[0] <- struct{}{}:
		default: // already has a pending wake-up
		}
	}
}

func (t *topic) wakeAll() {
	for _, w := range t.waiters {
		select {
		case w <- struct{}{}:
		default: // already has a pending wake-up
		}
	}
}

func (n *notifier) close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	for _, t := range n.topics {
		if t.idle != nil {
			t.idle.Stop()
		}
	}
	ps, done := n.ps, n.done
	n.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	<-done
	if err != nil {
		return fmt.Errorf("lock: close pub/sub: %w", err)
	}
	return nil
}
