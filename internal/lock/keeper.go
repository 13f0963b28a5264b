package lock

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"
)

// keeper renews the places in line of one Client's fair waiters: once every
// waitingRefresh, one script per key renews all of them (fair_renew.lua),
// so that the Redis work of waiting grows with the keys a process waits
// for, not with its waiters. A waiter that tried once a second to keep its
// place made a crowd of 200 waiters on one key 200 scripts a second, enough
// to starve the holder's renewals on a busy server.
//
// A waiter still tries itself on arrival, when woken, and at its fallback
// re-check (fairRecheck); the keeper's script also wakes the first in line
// while the lock is free, so a wake-up that was lost costs at most a
// second.
type keeper struct {
	c *Client

	mu     sync.Mutex
	keys   map[string]*kept // by the lock's Redis key
	closed bool
}

// kept are the waiters of one key.
type kept struct {
	n     names
	ids   map[string]struct{}
	timer *time.Timer
}

// add has id's place on n renewed until remove.
func (k *keeper) add(n names, id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return // its own tries still renew it, at fairRecheck
	}
	if k.keys == nil {
		k.keys = make(map[string]*kept)
	}
	e := k.keys[n.lock]
	if e == nil {
		e = &kept{n: n, ids: make(map[string]struct{})}
		e.timer = time.AfterFunc(waitingRefresh, func() { k.renew(e) })
		k.keys[n.lock] = e
	}
	e.ids[id] = struct{}{}
}

// remove stops renewing id's place on n.
func (k *keeper) remove(n names, id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e := k.keys[n.lock]
	if e == nil {
		return
	}
	delete(e.ids, id)
	if len(e.ids) == 0 {
		e.timer.Stop()
		delete(k.keys, n.lock)
	}
}

// renew runs the renewal of e's places, then sets the next one while e
// has waiters.
func (k *keeper) renew(e *kept) {
	k.mu.Lock()
	if k.keys[e.n.lock] != e {
		k.mu.Unlock()
		return
	}
	ids := slices.Collect(maps.Keys(e.ids))
	k.mu.Unlock()

	args := make([]any, 0, len(ids)+2)
	args = append(args, queueLeaseArg, waitingTTLArg)
	for _, id := range ids {
		args = append(args, id)
	}
	// A renewal that fails is not retried early: the places have two more
	// renewals' worth of lease left, and the waiters' own tries renew them
	// too.
	ctx, cancel := context.WithTimeout(context.Background(), waitingRefresh)
	_ = k.c.bounded(ctx, func(ctx context.Context) error {
		n := e.n
		return fairRenewScript.Run(ctx, k.c.rdb, []string{n.lock, n.waiting, n.line, n.leases}, args...).Err()
	})
	cancel()

	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keys[e.n.lock] == e && !k.closed {
		e.timer.Reset(waitingRefresh)
	}
}

// close stops every renewal; a renewal under way finishes.
func (k *keeper) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	for _, e := range k.keys {
		e.timer.Stop()
	}
	k.keys = nil
}

// fairRecheck caps a fair waiter's sleep between its own tries: its place
// is renewed by the keeper, and a release or the keeper wakes it when it is
// first in line, so this re-check is only the fallback for a holder that
// died without releasing (the waiter then tries when the holder's TTL runs
// out, if sooner), for a keeper whose renewals fail, and for a waiter
// dropped from the line, which joins the end of it with this try. (A
// process resumed after a pause finds its timers overdue: it tries at
// once.)
const fairRecheck = 5 * waitingRefresh
