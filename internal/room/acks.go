package room

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"
)

// A sell-out the fleet has heard before the last buyer is told. The
// instances learn a room's state by push (NewsChannel), so a poll costs
// no Redis round trip; but a push is heard a moment after it is sent, and
// a waiting buyer who polls another instance just after the last sale's
// answer could still hear "waiting". So the step that finds the room sold
// out for a sale (Settle) asks, in its news, that every instance hearing
// it acknowledge it on AckChannel once learnt; PUBLISH says how many
// subscribers it reached, and Settle holds the sale's answer until that
// many acknowledgements came back, or Options.AckWait passed (an
// instance paused or gone must not hold the sale). On a Redis Cluster a
// PUBLISH counts only the subscribers of the node it ran on, so the wait
// there covers those.

// AckChannel carries the instances' acknowledgements of a sell-out: the
// id the news asked them under.
const AckChannel = "seckill:room:ack"

// ackWaiters are the acknowledgements this instance waits for, by id.
type ackWaiters struct {
	mu   sync.Mutex
	wait map[string]chan struct{}
}

// expect registers a new id and the channel its acknowledgements arrive
// on, one value each.
func (a *ackWaiters) expect() (string, chan struct{}) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	ch := make(chan struct{}, 64)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.wait == nil {
		a.wait = map[string]chan struct{}{}
	}
	a.wait[id] = ch
	return id, ch
}

func (a *ackWaiters) forget(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.wait, id)
}

// heard counts one acknowledgement of id, if this instance waits for it.
func (a *ackWaiters) heard(id string) {
	a.mu.Lock()
	ch := a.wait[id]
	a.mu.Unlock()
	if ch != nil {
		select {
		case ch <- struct{}{}:
		default: // more than the channel holds: the waiter has enough
		}
	}
}

// acknowledge tells the fleet that this instance learnt the news asked
// under id.
func (m *Manager) acknowledge(id string) {
	ctx, cancel := context.WithTimeout(m.ctx, time.Second)
	defer cancel()
	if err := m.opts.RDB.Publish(ctx, AckChannel, id).Err(); err != nil {
		m.opts.Log.Debug("acknowledging a waiting room's sell-out failed", "err", err)
	}
}

// awaitAcks waits for n acknowledgements on ch of the room's news named
// what, at most Options.AckWait.
func (m *Manager) awaitAcks(ctx context.Context, id, n int64, ch chan struct{}, what string) error {
	if m.awaiting != nil {
		m.awaiting()
	}
	t := time.NewTimer(m.opts.AckWait)
	defer t.Stop()
	for got := int64(0); got < n; got++ {
		select {
		case <-ch:
		case <-t.C:
			m.acksMissed.Add(1)
			m.opts.Log.Warn("a waiting room's news was not acknowledged by every instance in time; it is answered all the same",
				"news", what, "item", id, "acknowledged", got, "of", n, "waited", m.opts.AckWait)
			return nil
		case <-ctx.Done():
			return fmt.Errorf("waiting for the fleet to hear item %d's %s: %w", id, what, ctx.Err())
		}
	}
	return nil
}
