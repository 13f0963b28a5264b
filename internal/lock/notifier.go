package lock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// notifier multiplexes the wake-up channels of every waiter of one Client
// over a single pub/sub connection. A channel is subscribed while it has
// waiters and unsubscribed when the last one leaves.
//
// No network call is made under mu: a waiter only records what it wants,
// and one worker goroutine sends SUBSCRIBE and UNSUBSCRIBE in that order,
// each bounded by subscribeTimeout. go-redis's PubSub can block a call for
// a whole dial or read timeout while it reconnects to a stalled server;
// only the worker waits for that, never a waiter.
type notifier struct {
	rdb redis.UniversalClient

	mu     sync.Mutex
	ps     *redis.PubSub
	topics map[string]*topic
	ops    []op          // subscription changes the worker has yet to send
	kick   chan struct{} // tells the worker there are ops
	quit   chan struct{} // closed by close
	done   sync.WaitGroup
	closed bool
}

// op is one subscription change: SUBSCRIBE (sub) or UNSUBSCRIBE channel.
type op struct {
	channel string
	sub     bool
}

// topic is one lock's channel. Its waiters queue in arrival order; a release
// wakes only the first, since only one of them could win anyway (the others
// would just hit Redis and go back to sleep). The first keeps its place until
// it obtains the lock or leaves, which makes the wait fair within a Client.
// A fair lock's release names the waiter first in Redis's line instead
// (fair_queue.lua): it wakes that waiter, if it is one of this Client's,
// and no other.
type topic struct {
	waiters   []*waiter
	confirmed bool
	idle      *time.Timer // pending unsubscribe while lingering
}

type waiter struct {
	id    string // a fair waiter's place in line; "" for the others
	wake  chan struct{}
	ready func() // called once, under mu, when the subscription is confirmed
}

// linger is how long a channel stays subscribed after its last waiter got
// the lock, so that a burst of contention does not pay for SUBSCRIBE and its
// confirmation on every handoff.
const linger = 500 * time.Millisecond

// subscribeTimeout bounds sending one SUBSCRIBE or UNSUBSCRIBE (and dialling
// for it).
const subscribeTimeout = 250 * time.Millisecond

func newNotifier(rdb redis.UniversalClient) *notifier {
	return &notifier{rdb: rdb, topics: make(map[string]*topic)}
}

// subscribe adds wake to channel's waiters, as the fair waiter id when id
// is not ""; ready is called (once, under
// n.mu, so it must not block) when Redis has confirmed the subscription. A
// SUBSCRIBE that fails is not an error: go-redis resubscribes when it
// reconnects, and waiters fall back to their timers meanwhile.
func (n *notifier) subscribe(channel, id string, wake chan struct{}, ready func()) func(linger bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		// Nothing will ever wake this waiter; its timer still works.
		return func(bool) {}
	}
	if n.ps == nil {
		n.ps = n.rdb.Subscribe(context.Background()) // no channels yet: no network
		n.kick = make(chan struct{}, 1)
		n.quit = make(chan struct{})
		n.done.Add(2)
		go n.read(n.ps.ChannelWithSubscriptions())
		go n.work()
	}
	t := n.topics[channel]
	if t == nil {
		t = &topic{}
		n.topics[channel] = t
		n.enqueue(op{channel, true})
	}
	if t.idle != nil {
		t.idle.Stop()
		t.idle = nil
	}
	w := &waiter{id: id, wake: wake, ready: ready}
	t.waiters = append(t.waiters, w)
	if t.confirmed {
		w.ready()
		w.ready = nil
	}
	return func(linger bool) { n.unsubscribe(channel, w, linger) }
}

func (n *notifier) unsubscribe(channel string, w *waiter, lingering bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	t := n.topics[channel]
	if t == nil {
		return
	}
	i := slices.Index(t.waiters, w)
	if i < 0 {
		return
	}
	t.waiters = slices.Delete(t.waiters, i, i+1)
	if len(t.waiters) > 0 {
		select {
		case <-w.wake:
			// It left with a wake-up it did not use: pass it on, or the
			// next waiter would sleep until its fallback timer. (A fair
			// waiter's leave script wakes the next in line itself.)
			if w.id == "" {
				t.wakeFirst()
			}
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

// drop forgets channel and has it unsubscribed; n.mu must be held.
func (n *notifier) drop(channel string) {
	delete(n.topics, channel)
	// A SUBSCRIBE the worker has not sent yet need not be sent at all.
	for i := len(n.ops) - 1; i >= 0; i-- {
		if n.ops[i].channel == channel {
			if n.ops[i].sub {
				n.ops = slices.Delete(n.ops, i, i+1)
				return
			}
			break
		}
	}
	n.enqueue(op{channel, false})
}

// enqueue hands op to the worker; n.mu must be held.
func (n *notifier) enqueue(o op) {
	n.ops = append(n.ops, o)
	select {
	case n.kick <- struct{}{}:
	default: // already kicked
	}
}

// work sends the queued subscription changes in order until close. A run
// of changes of one kind goes out as one command.
func (n *notifier) work() {
	defer n.done.Done()
	for {
		select {
		case <-n.kick:
		case <-n.quit:
			return
		}
		for {
			n.mu.Lock()
			ops := n.ops
			n.ops = nil
			n.mu.Unlock()
			if len(ops) == 0 {
				break
			}
			for len(ops) > 0 {
				k, channels := 1, []string{ops[0].channel}
				for k < len(ops) && ops[k].sub == ops[0].sub && !slices.Contains(channels, ops[k].channel) {
					channels = append(channels, ops[k].channel)
					k++
				}
				ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
				// If the write fails the connection is broken; go-redis
				// resubscribes the channels it holds when it reconnects.
				if ops[0].sub {
					_ = n.ps.Subscribe(ctx, channels...)
				} else {
					_ = n.ps.Unsubscribe(ctx, channels...)
				}
				cancel()
				ops = ops[k:]
				select {
				case <-n.quit:
					return
				default:
				}
			}
		}
	}
}

// read dispatches messages until the pub/sub is closed.
func (n *notifier) read(ch <-chan interface{}) {
	defer n.done.Done()
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
					for _, w := range t.waiters {
						if w.ready != nil {
							w.ready()
							w.ready = nil
						}
					}
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
				t.wake(m.Payload)
			}
			n.mu.Unlock()
		}
	}
}

// wake handles a release's message: "1" wakes the first waiter; anything
// else is the id of the fair waiter first in line, which wakes that waiter
// if it is one of this Client's, and nobody otherwise (a waiter of another
// process is first; the waiters here would only find it so).
func (t *topic) wake(payload string) {
	if payload == "1" {
		t.wakeFirst()
		return
	}
	for _, w := range t.waiters {
		if w.id == payload {
			w.poke()
			return
		}
	}
}

func (w *waiter) poke() {
	select {
	case w.wake <- struct{}{}:
	default: // already has a pending wake-up
	}
}

func (t *topic) wakeFirst() {
	if len(t.waiters) > 0 {
		select {
		case t.waiters[0].wake <- struct{}{}:
		default: // already has a pending wake-up
		}
	}
}

func (t *topic) wakeAll() {
	for _, w := range t.waiters {
		select {
		case w.wake <- struct{}{}:
		default: // already has a pending wake-up
		}
	}
}

// close stops the worker and the pub/sub connection. go-redis may hold its
// PubSub for a dial or read timeout while it reconnects to a stalled
// server; close waits for that.
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
	ps := n.ps
	if ps != nil {
		close(n.quit)
	}
	n.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	n.done.Wait()
	if err != nil {
		return fmt.Errorf("lock: close pub/sub: %w", err)
	}
	return nil
}
